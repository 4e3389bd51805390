"""Stored recipes on the real engine: lifetimes (a delta keeps its snapshot and the deltas
before it alive; a snapshot supersedes the chain it replaces, which keeps
TOOLREF_EDIT_SUPERSEDED_TTL; a refresh extends every piece), bounded round trips
whatever the length, and pieces that do not hash to their id never served. The clock is
the test's."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from tests.conftest import all_keys
from tests.unit.edits.test_edits import HEADERS
from tests.unit.test_recipe_nodes import stored
from toolref.edits.edit import Inline, Op, diff
from toolref.edits.recipe import is_piece, piece_of
from toolref.edits.request import Cut, cut
from toolref.wire.errors import DecompressedTooLargeError
from toolref_server.storage import keys
from toolref_server.storage.recipe_cache import RecipeCache
from toolref_server.storage.recipe_held import derive
from toolref_server.storage.recipes import Held, Recipes
from toolref_server.storage.store import Store

pytestmark = pytest.mark.engine

TTL, SUPERSEDED, REFRESH = 1000, 60, 300


class Counted:
    """Counts pipelines sent: each is one round trip."""

    def __init__(self, redis: Redis) -> None:
        self.redis, self.trips = redis, 0

    def pipeline(self, *args: Any, **kwargs: Any) -> Any:
        self.trips += 1
        return self.redis.pipeline(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.redis, name)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def size(n: int) -> int:
    """The first two messages are pieces; the others literals."""
    return 17_000 if n < 2 else 2100


def request(turns: int, word: str = "turn") -> Cut:
    messages = ",".join(
        f'{{"role":"user","content":"{word} {n} {"w" * (size(n) + n)}"}}' for n in range(turns)
    )
    made = cut(HEADERS, f'{{"model":"m","messages":[{messages}]}}'.encode(), "messages")
    assert made is not None
    return made


def recipes_on(redis: Any, clock: Clock, cache: int = 0, every: int = 3) -> Recipes:
    store = Store(getattr(redis, "redis", redis), TTL)  # a cluster known as one
    store.redis = redis  # then its round trips counted, when `redis` counts them
    return Recipes(
        store,
        RecipeCache(cache),
        snapshot_every=every,
        superseded_ttl=SUPERSEDED,
        refresh_seconds=REFRESH,
        clock=clock,
    )


async def keep(recipes: Recipes, new: Cut, base: Held | None) -> Held:
    ops: list[Op] = (
        diff(base.entries, new.entries, new.segments) if base else [Inline(s) for s in new.segments]
    )
    edit, added = stored(ops, new)
    parts = derive(base, edit, added)
    carried = {
        piece_of(op): data
        for op, data in zip([op for op in edit if isinstance(op, bytes)], added, strict=True)
        if is_piece(op)
    }
    kept = await recipes.keep("t", parts, edit, base=base, pieces=carried, named=())
    assert kept.ref == new.ref
    held = await recipes.load("t", kept.ref)
    assert held is not None
    return held


def pieces_of(held: Held) -> list[bytes]:
    return [piece_of(e) for e in held.entries if is_piece(e)]


async def ttl(redis: Redis, ref: str) -> int:
    return int(await redis.ttl(keys.recipe_node("t", ref)))


async def test_lifetimes_of_nodes_and_snapshots(redis: Redis) -> None:
    clock = Clock()
    recipes = recipes_on(redis, clock)
    first = await keep(recipes, request(3), None)  # a snapshot
    second = await keep(recipes, request(4), first)  # a delta on it
    assert first.snapshot is None
    assert second.snapshot == first.ref
    assert await ttl(redis, first.ref) > SUPERSEDED  # the snapshot a live delta needs
    third = await keep(recipes, request(5), second)  # a delta on the same snapshot
    assert third.depth == 2
    assert third.path == (second.ref, third.ref)
    assert await ttl(redis, second.ref) > SUPERSEDED  # a delta it is read through
    assert await ttl(redis, first.ref) > SUPERSEDED
    fourth = await keep(recipes, request(6), third)  # every 3rd: a snapshot again
    assert fourth.snapshot is None
    for old in (first, second, third):  # they hold the literals chunks refer to
        assert await ttl(redis, old.ref) > SUPERSEDED
    assert await ttl(redis, fourth.ref) > TTL - 5
    assert set(first.stored) & set(fourth.stored)  # appends: the first chunk is shared
    fifth = await keep(recipes, request(2, "new"), fourth)  # all replaced: a compaction
    sixth = await keep(recipes, request(3, "new"), fifth)
    seventh = await keep(recipes, request(4, "new"), sixth)  # a snapshot
    assert seventh.snapshot is None
    assert set(fourth.stored) - set(seventh.stored)
    for chunk in set(fourth.stored) - set(seventh.stored):  # chunks no longer held
        assert await redis.ttl(keys.recipe_chunk("t", chunk)) <= SUPERSEDED


async def test_a_turn_back_to_a_recipe_of_its_group_keeps_what_that_recipe_reads(
    redis: Redis,
) -> None:
    """Found: a turn whose request its group had kept already (an undo: the conversation as
    it was a turn before) was kept as a new snapshot; that recipe's node was there (never
    written over), so it stayed the delta it was, while the snapshot shortened the chunks
    the delta reads to TOOLREF_EDIT_SUPERSEDED_TTL: the recipe confirmed lived on without
    them (its next turn a resend). Now it is kept as the same recipe again, and nothing of
    it is superseded."""
    clock = Clock()
    recipes = recipes_on(redis, clock, every=8)
    first = await keep(recipes, request(12), None)
    second = await keep(recipes, request(3, "new"), first)  # little of the first kept
    third = await keep(recipes, request(4, "new"), second)
    chunks = await chunk_keys(redis)
    back = await keep(recipes, request(3, "new"), third)  # the second again
    assert back.ref == second.ref
    assert back.snapshot == first.ref
    assert back.stored == first.stored
    for chunk in back.stored:
        assert await redis.ttl(keys.recipe_chunk("t", chunk)) > SUPERSEDED
    assert await chunk_keys(redis) == chunks  # none written for a snapshot never kept


async def chunk_keys(redis: Redis) -> list[Any]:
    return [key for key in await all_keys(redis) if b":k:" in key]


async def test_a_refresh_extends_every_piece_once_its_time_has_come(redis: Redis) -> None:
    clock = Clock()
    recipes = recipes_on(redis, clock)
    held = await keep(recipes, request(3), None)
    first_piece = keys.edit_piece("t", pieces_of(held)[0])
    await redis.expire(first_piece, 500)  # as if time passed for it alone
    clock.now += REFRESH - 1
    held = await keep(recipes, request(4), held)
    assert await redis.ttl(first_piece) <= 500  # kept, not extended: not due yet
    assert held.node.refreshed == 1_000_000
    clock.now += 1
    held = await keep(recipes, request(5), held)
    assert await redis.ttl(first_piece) > 500  # due: every piece extended
    assert held.node.refreshed == int(clock.now)


async def test_a_recipe_loads_in_bounded_round_trips_whatever_its_length(redis: Redis) -> None:
    clock = Clock()
    counted = Counted(redis)
    for turns in (5, 60):
        recipes = recipes_on(counted, clock)
        held = None
        for n in range(turns - 4, turns + 1):
            held = await keep(recipes, request(n), held)
        assert held is not None
        cold = recipes_on(counted, clock)  # another replica: nothing cached
        gets_before, trips_before = await _gets(redis), counted.trips
        loaded = await cold.load("t", held.ref)
        assert loaded is not None
        assert (loaded.entries, loaded.segments) == (held.entries, held.segments)
        assert held.depth == 1
        if not isinstance(redis, RedisCluster):  # INFO reads one node of a cluster
            assert await _gets(redis) - gets_before == 1  # the node
        # MGET its snapshot and the deltas between, MGET the chunks, MGET every piece
        assert counted.trips - trips_before == 3


async def _gets(redis: Redis) -> int:
    stats = await redis.info("commandstats")
    return int(stats.get("cmdstat_get", {}).get("calls", 0))


async def test_a_piece_that_does_not_hash_to_its_id_is_not_held(redis: Redis) -> None:
    clock = Clock()
    recipes = recipes_on(redis, clock)
    held = await keep(recipes, request(3), None)
    piece, other = pieces_of(held)[0:2]
    value = await redis.get(keys.edit_piece("t", other))
    assert isinstance(value, bytes)
    await redis.set(keys.edit_piece("t", piece), value)
    found = await recipes_on(redis, clock).pieces("t", [piece, other])
    assert list(found) == [other]


async def test_the_cache_spares_the_store_and_is_not_needed(redis: Redis) -> None:
    clock = Clock()
    cached = recipes_on(redis, clock, cache=1 << 20)
    held = await keep(cached, request(4), None)
    before = await _gets(redis)
    assert await cached.load("t", held.ref) == held
    assert await _gets(redis) == before  # from memory
    await redis.flushall()
    assert await recipes_on(redis, clock).load("t", held.ref) is None  # the store decides


def chat(messages: list[str], tail: str = "") -> Cut:
    """A request of `messages`, its body ending in `tail` after them."""
    listed = ",".join(f'{{"role":"user","content":"{m}"}}' for m in messages)
    made = cut(HEADERS, f'{{"model":"m","messages":[{listed}]{tail}}}'.encode(), "messages")
    assert made is not None
    return made


def message(n: int) -> str:
    """The first two messages are pieces; the others literals of 3 KiB."""
    return f"turn {n} " + "w" * (17_000 if n < 2 else 3_000 + n)


async def age(redis: Redis, seconds: float) -> None:
    """Every key's lifetime as it is `seconds` later (those it outlives gone)."""
    for key in await all_keys(redis):
        left = int(await redis.pttl(key))
        if 0 <= left <= seconds * 1000:
            await redis.delete(key)
        elif left > 0:
            await redis.pexpire(key, left - int(seconds * 1000))


async def test_a_refreshed_recipe_loads_whole_for_its_whole_lifetime(redis: Redis) -> None:
    """Found: a snapshot may hold a chunk in part (a turn back that drops the end of the
    conversation, then goes on). Loading it read every literal of that chunk, also those of
    the part it does not hold, stored in nodes no literal of the recipe is in; a refresh
    extends the nodes its literals are in, so those expired first, and the recipe (its
    refresh promising it the TTL) was not held from then on. Now a snapshot reads the
    literals of the slices it holds, and nothing else."""
    clock = Clock()
    recipes = recipes_on(redis, clock)
    messages = [message(n) for n in range(3)]
    held = await keep(recipes, chat(messages), None)
    for added in (range(3, 7), range(7, 8), range(8, 9)):  # a delta of 4, of 1, a snapshot
        messages += [message(n) for n in added]
        held = await keep(recipes, chat(messages), held)
    messages = messages[:7]  # back to the delta of 4, the body ending otherwise
    for n in range(3):  # a delta, then a snapshot holding the chunk of the last one in part
        held = await keep(recipes, chat(messages, ',"stop":1'), held)
        messages.append(message(20 + n))
    assert any(n < t for n, t in zip(held.chunks.lengths, held.chunks.totals, strict=True))
    clock.now += 500
    await age(redis, 500)
    held = await keep(recipes, chat(messages, ',"stop":1'), held)  # a refresh
    assert held.node.refreshed == int(clock.now)
    clock.now += 600
    await age(redis, 600)  # within the TTL since the refresh
    assert await recipes_on(redis, clock).load("t", held.ref) is not None


async def test_a_delta_loads_for_its_whole_lifetime_with_no_group_extended(
    redis: Redis,
) -> None:
    """Deltas kept over time, none due a refresh: each new delta's node lives until
    `refreshed` + TTL, and so does every node of its group, written to that time or
    extended to it at the refresh; a turn extends nothing of its group again (six EXPIREs
    a turn, once). The newest recipe loads up to the end of its own lifetime, from a
    process that holds nothing."""
    clock = Clock()
    recipes = recipes_on(redis, clock, every=8)
    messages = [message(n) for n in range(3)]
    held = await keep(recipes, chat(messages), None)
    for n in range(3, 9):  # deltas, 40 s apart: the group grows, no refresh is due
        clock.now += 40
        await age(redis, 40)
        messages.append(message(n))
        held = await keep(recipes, chat(messages), held)
    assert held.depth > 1  # a delta read through its group
    left = await ttl(redis, held.ref)
    group = [keys.recipe_node("t", ref) for ref in held.group]
    lifetimes = [int(await redis.ttl(key)) for key in group]
    assert min(lifetimes) >= left - 1, lifetimes
    clock.now += left - 2
    await age(redis, left - 2)
    assert await recipes_on(redis, clock).load("t", held.ref) is not None


async def test_a_recipe_resent_whole_reads_back_when_its_old_node_did_not(
    redis: Redis,
) -> None:
    """Found in review: a delta whose group is gone (evicted; or kept on a base only a
    process's cache held) is not held, so its next edit is answered 409 and the client
    resends the request whole. Keeping that request wrote its node SET NX: the broken delta
    stayed, extended again, and the recipe never read back, every turn a 409 and a resend.
    Now a node there that does not read back is written over by the one just made."""
    clock = Clock()
    recipes = recipes_on(redis, clock)
    snapshot = await keep(recipes, request(3), None)
    delta = await keep(recipes, request(4), snapshot)
    assert delta.depth == 1
    await redis.delete(keys.recipe_node("t", snapshot.ref))
    assert await recipes.load("t", delta.ref) is None  # not held: 409, never an error
    again = await keep(recipes, request(4), None)  # the resend: read back (`keep` asserts)
    assert again.ref == delta.ref
    assert await recipes_on(redis, clock).load("t", delta.ref) is not None


@pytest.mark.parametrize("bad", [b"\x28\xb5\x2f\xfd" + bytes(12), b"not what was written"])
async def test_a_node_chunk_or_piece_that_does_not_read_is_deleted_when_read(
    redis: Redis, bad: bytes
) -> None:
    """Found in review: a piece or chunk whose stored bytes did not read (corrupt; or
    compressed with a dictionary this replica lacks) was not held, but stayed: the resend
    writes it SET NX, so the bad bytes stayed, and every turn missed until they expired.
    Now what does not read is deleted where it is read (the recipe's own node, the nodes of
    its group, its chunks and pieces): put back, the recipe loads again."""
    clock = Clock()
    recipes = recipes_on(redis, clock)
    snapshot = await keep(recipes, request(3), None)
    delta = await keep(recipes, request(4), snapshot)
    assert delta.snapshot == snapshot.ref
    for key in (
        keys.edit_piece("t", pieces_of(snapshot)[0]),
        keys.recipe_chunk("t", snapshot.stored[0]),
        keys.recipe_node("t", snapshot.ref),  # a node of its group
        keys.recipe_node("t", delta.ref),  # its own node
    ):
        good = await redis.get(key)
        assert isinstance(good, bytes)
        await redis.set(key, bad, keepttl=True)
        assert await recipes_on(redis, clock).load("t", delta.ref) is None
        assert not await redis.exists(key), key
        await redis.set(key, good, ex=TTL)  # what a resend writes (SET NX)
        assert await recipes_on(redis, clock).load("t", delta.ref) is not None


# A zstd frame header gone bad: it declares 1 TiB of content (single segment, 8-byte size).
HUGE_FRAME = b"\x28\xb5\x2f\xfd\xe0" + (1 << 40).to_bytes(8, "little") + b"gone bad"


async def test_a_piece_whose_frame_declares_an_impossible_size_is_a_miss_not_a_413(
    redis: Redis,
) -> None:
    """Found in review: a stored piece whose frame header went bad, declaring more than any
    piece can be (over the limit on the whole body it is a segment of), failed the size
    check of an edit naming it with 413 `decompressed-too-large` before it was read, so
    it was never deleted: every edit naming it was refused until it expired, and the
    sender's resend (SET NX) could not store it again. Now it reads as corrupt: left out
    (a miss), deleted, and the resend stores it. Pieces that are what they say and make
    more than the limit together still get their 413."""
    clock = Clock()
    recipes = recipes_on(redis, clock)
    held = await keep(recipes, request(3), None)
    piece, other = pieces_of(held)[0:2]
    key = keys.edit_piece("t", piece)
    good = await redis.get(key)
    assert isinstance(good, bytes)
    await redis.set(key, HUGE_FRAME, keepttl=True)
    limit = 20_000  # over one piece (17,000 bytes and more), under two
    found = await recipes_on(redis, clock).pieces("t", [piece, other], limit=limit)
    assert list(found) == [other]  # a miss: the sender resends it
    assert not await redis.exists(key)  # deleted: the resend's SET NX stores it
    await redis.set(key, good, ex=TTL)
    with pytest.raises(DecompressedTooLargeError):  # both real: over the limit together
        await recipes_on(redis, clock).pieces("t", [piece, other], limit=limit)
    await redis.set(key, HUGE_FRAME, keepttl=True)
    third = pieces_of(await keep(recipes, request(3, "other"), None))[0]
    with pytest.raises(DecompressedTooLargeError):  # two real ones over it: still refused
        await recipes_on(redis, clock).pieces("t", [piece, other, third], limit=limit)
    assert not await redis.exists(key)  # and the corrupt one deleted all the same
