"""Recipe nodes and chunks as stored (`toolref_server.storage.recipe_nodes`,
`recipe_chunks`, `recipe_held`): encoded and read back as they were; a chain of deltas
(each its own edit, literals compressed against its base's end) replayed to the same
recipes; snapshots cut into chunks that later snapshots share, each slice of a stored
chunk holding exactly the entries it stands for; and bytes no version wrote, or a chunk
that does not hash to its id, read as not held."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.edits.test_edits import EDITS, HEADERS, body_of, conversation, edited
from toolref.edits.edit import Inline, Keep, Op, diff
from toolref.edits.recipe import LITERAL, PIECE, Entry, entry_of, framed, recipe_ref
from toolref.edits.request import Cut, cut
from toolref_server.storage.recipe_cache import RecipeCache
from toolref_server.storage.recipe_chunks import (
    Chunks,
    StoredEdit,
    StoredOp,
    chunk_id,
    rechunk,
    settled,
)
from toolref_server.storage.recipe_held import Held, Parts, context, derive
from toolref_server.storage.recipe_nodes import (
    Delta,
    Snapshot,
    decode_chunk,
    decode_node,
    delta_of,
    edit_of,
    encode_chunk,
    encode_node,
)

ID = b"i" * 16


def stored(ops: list[Op], new: Cut) -> tuple[StoredEdit, list[bytes]]:
    """The edit as the registry stores it, and the bytes of the entries it adds."""
    edit: list[StoredOp] = []
    added: list[bytes] = []
    at = 0
    for op in ops:
        if isinstance(op, Keep):
            edit.append((op.start, op.end))
            at += op.end - op.start
        else:
            edit.append(new.entries[at])
            added.append(new.segments[at])
            at += 1
    return tuple(edit), added


def held_of(parts: Parts, node: Snapshot | Delta) -> Held:
    return Held(
        parts.ref, parts.entries, parts.framed, parts.segments, parts.chunks, node, None, (), ()
    )


def snapshot(parts: Parts, chunks_held: dict[bytes, list[Entry]]) -> Chunks:
    """The chunks a snapshot of `parts` stores (written to `chunks_held`), every slice
    checked against the chunk it names."""
    cut_up = settled(parts.chunks, parts.entries)
    ids: list[bytes | None] = []
    for index, known in enumerate(cut_up.ids):
        start, end = cut_up.starts[index], cut_up.ends[index]
        made = known or chunk_id(parts.framed[start:end])
        if known is None:
            chunks_held[made] = decode_chunk(encode_chunk(parts.entries[start:end]), made) or []
        ids.append(made)
        run = chunks_held[made]
        offset = cut_up.offsets[index]
        assert run[offset : offset + end - start] == parts.entries[start:end]
        assert len(run) == cut_up.totals[index]
    return Chunks(cut_up.lengths, cut_up.starts, cut_up.ends, ids, cut_up.offsets, cut_up.totals)


@given(
    st.lists(
        st.tuples(st.binary(min_size=16, max_size=16), st.integers(0, 99), st.integers(1, 99)),
        max_size=20,
    ),
    st.integers(0, 2**40),
)
def test_a_snapshot_comes_back_as_written(slices: list[Any], refreshed: int) -> None:
    node = Snapshot(tuple(slices), refreshed)
    assert decode_node(encode_node(node)) == node


@given(st.integers(1, 25), st.integers(0, 10**6), st.lists(EDITS, min_size=1, max_size=10))
@settings(max_examples=100, deadline=None)
def test_deltas_and_snapshots_give_every_recipe_exactly(
    turns: int, seed: int, hows: list[str]
) -> None:
    """A chain snapshot -> delta -> delta ..., each delta written and read back, its
    literals inflated against its base's end, replays to every recipe of the chain; every
    other recipe is also a snapshot, whose chunks (slices of the chunks earlier snapshots
    stored, and the new ones) hold exactly its entries."""
    rng = random.Random(seed)
    messages = conversation(turns, seed)
    extra = {"tools": ["t" * 3000]}
    first = cut(HEADERS, body_of(messages, extra, "compact").encode(), "messages")
    assert first is not None
    chunks_held: dict[bytes, list[Entry]] = {}
    edit, added = stored([Inline(s) for s in first.segments], first)
    parts = derive(None, edit, added)
    assert parts.ref == first.ref
    base = held_of(parts, Snapshot((), 1))
    for n, how in enumerate(hows):
        messages = edited(messages, how, rng)
        new = cut(HEADERS, body_of(messages, extra, "compact").encode(), "messages")
        assert new is not None
        ops = diff(base.entries, new.entries, new.segments)
        edit, added = stored(ops, new)
        parts = derive(base, edit, added)
        assert (parts.ref, parts.entries, parts.segments) == (new.ref, new.entries, new.segments)
        assert sum(parts.chunks.lengths) == len(parts.entries)
        node = decode_node(encode_node(delta_of(ID, (ID,), edit, context(base.segments), 1)))
        assert isinstance(node, Delta)
        assert edit_of(node, context(base.segments, node.context)) == edit
        assert edit_of(node, context(base.segments, node.context)[1:] + b"x") in (None, edit)
        if n % 2:
            chunks = snapshot(parts, chunks_held)
            parts = Parts(parts.ref, parts.entries, parts.framed, parts.segments, chunks)
        base = held_of(parts, Snapshot((), 1))


def test_appends_write_only_what_they_add() -> None:
    """A conversation that only grows: each snapshot writes one new chunk, the entries
    added since the last (the chunk before stays, as a slice without the closing glue)."""
    chunks_held: dict[bytes, list[Entry]] = {}
    messages = [{"role": "user", "content": "q" * 3000}]
    made = cut(HEADERS, body_of(messages, {}, "compact").encode(), "messages")
    assert made is not None
    edit, added = stored([Inline(s) for s in made.segments], made)
    parts = derive(None, edit, added)
    parts = Parts(parts.ref, parts.entries, parts.framed, parts.segments, snapshot(parts, {}))
    previous = made
    for turn in range(40):
        messages = [*messages, {"role": "assistant", "content": f"a{turn} " + "w" * 600}]
        new = cut(HEADERS, body_of(messages, {}, "compact").encode(), "messages")
        assert new is not None
        edit, added = stored(diff(previous.entries, new.entries, new.segments), new)
        base = held_of(parts, Snapshot((), 1))
        parts = derive(base, edit, added)
        if turn % 8 == 7:
            before = set(chunks_held)
            chunks = snapshot(parts, chunks_held)
            assert len(set(chunks_held) - before) == 1, turn
            parts = Parts(parts.ref, parts.entries, parts.framed, parts.segments, chunks)
        previous = new
    assert len(parts.chunks.ids) <= 6  # one per snapshot (and the first)


def test_rechunk_reads_no_entry() -> None:
    """The chunks of an edit come from the ops alone: an edit of a recipe of 10,000
    entries keeps its stored chunks as slices, its partly kept chunk as a shorter slice."""
    base = Chunks.whole([bytes([i]) * 16 for i in range(100)], [100] * 100)
    made = rechunk(base, ((0, 9_999), LITERAL + b",", PIECE + ID, (9_999, 10_000)))
    assert made.ids[:99] == base.ids[:99]
    assert (made.ids[99], made.offsets[99], made.lengths[99]) == (base.ids[99], 0, 99)
    assert made.ids[100:] == [None, base.ids[99]]
    assert made.offsets[101] == 99
    assert (sum(made.lengths), made.lengths[100:]) == (10_002, [2, 1])


def test_bytes_no_version_wrote_are_not_a_node() -> None:
    for data in [b"", b"\x00", b"\x01", b"\x02", b"\x02\x80", b"\x02\x81\xa1r\xa1x", b"\x04abc"]:
        assert decode_node(data) is None
    good = encode_node(Snapshot(((ID, 0, 1),), 1))
    assert decode_node(good[:-1]) is None
    entries = [entry_of(b"x" * 40), entry_of(b"y" * 3000)]
    data = encode_chunk(entries)
    assert decode_chunk(data, chunk_id([framed(e) for e in entries])) == entries
    assert decode_chunk(data, ID) is None  # not what it hashes to
    assert decode_chunk(encode_chunk([b"\x00short"]), chunk_id([framed(b"\x00short")])) is None


def test_a_delta_against_another_base_is_not_read() -> None:
    rng = random.Random(1)
    base = [b"h" * 50, bytes(rng.randrange(256) for _ in range(5000))]
    edit: StoredEdit = ((0, 2), LITERAL + base[1][1000:3000] + b"and new words")
    node = delta_of(ID, (), edit, context(base), 1)
    assert node.context > 0
    assert len(node.literals) < 200  # the base's bytes, by reference
    assert edit_of(node, context(base, node.context)) == edit
    assert edit_of(node, context([b"z" * 5050], node.context)) is None
    assert recipe_ref([b"\x01" + b"x" * 20]) != recipe_ref([b"\x01" + b"y" * 20])


def test_the_cache_is_bounded_by_bytes_and_keeps_tenants_apart() -> None:
    cache: RecipeCache[Held] = RecipeCache(1000)
    cache.keep_pieces("a", [(b"1", b"x" * 600), (b"2", b"y" * 600)])
    assert cache.piece("a", b"1") is None  # dropped for the bound
    assert cache.piece("a", b"2") == b"y" * 600
    assert cache.piece("b", b"2") is None
    cache.keep_pieces("a", [(b"3", b"z" * 2000)])  # larger than the bound: not kept
    assert cache.piece("a", b"3") is None
    assert RecipeCache(0).piece("a", b"2") is None
