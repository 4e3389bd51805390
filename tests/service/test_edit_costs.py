"""What a turn of an edited conversation costs the registry in Python steps, counted (no
clock): a 200-turn conversation through `registry.edits.apply_edit` on the real engine,
each turn an append of one exchange. The helpers that touch one entry at a time (framing
an entry for the ref, telling pieces from literals, making an entry), the pieces looked
up, and the entries a snapshot cuts into chunks and writes are counted per turn: bounded
by what the turn adds (and, on a snapshot turn, by what the turns since the last one
added), the same at turn 200 as at turn 20.

Fails on the first layout (commit 82ba9e9), where every turn looked at every entry in
Python (the pieces to read, each segment's bytes, the ref digested entry by entry)."""

from __future__ import annotations

import builtins
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

import toolref.edits.edit
import toolref.edits.recipe
import toolref_server.registry.edits
import toolref_server.storage.recipe_chunks
import toolref_server.storage.recipe_forms
import toolref_server.storage.recipe_groups
import toolref_server.storage.recipe_held
import toolref_server.storage.recipe_nodes
import toolref_server.storage.recipes
from tests.unit.edits.test_edits import HEADERS
from toolref.asgi.budget import Budget
from toolref.edits import wire
from toolref.edits.edit import Inline, Keep, diff
from toolref.edits.request import Cut, cut
from toolref.wire.errors import BadRequestError
from toolref_server.app import create_app
from toolref_server.registry.edits import apply_edit
from toolref_server.settings import LOCAL_TENANT, Settings

from ..conftest import snapshot

pytestmark = pytest.mark.engine

PER_ENTRY = ("framed", "entry_of", "is_piece", "piece_of", "literal_of")
MODULES = (
    toolref.edits.recipe,
    toolref.edits.edit,
    toolref_server.registry.edits,
    toolref_server.storage.recipes,
    toolref_server.storage.recipe_forms,
    toolref_server.storage.recipe_held,
    toolref_server.storage.recipe_groups,
    toolref_server.storage.recipe_nodes,
    toolref_server.storage.recipe_chunks,
)


def counting(counts: Counter[str], name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        counts[name] += 1
        return function(*args, **kwargs)

    return counted


def edit_of(base: Cut | None, new: Cut) -> bytes:
    if base is None:
        return wire.encode(None, [Inline(s) for s in new.segments], b"")
    return wire.encode(base.ref, diff(base.entries, new.entries, new.segments), b"")


async def growing(
    redis: Redis, turns: int, before: Callable[[], None]
) -> AsyncIterator[tuple[Any, bytes, Cut, Any]]:
    """A conversation growing by a question and an answer a turn, after a 20 KB system
    message (a piece), each turn applied as an edit of the one before on the app:
    (services, body, its cut, applied) a turn; `before` runs just before each apply."""
    app = create_app(Settings(redis_url="unused"), redis=redis)
    budget = Budget(1 << 30)
    messages: list[Any] = [{"role": "system", "content": "s" * 20_000}]
    base: Cut | None = None
    async with app.router.lifespan_context(app):
        services = app.state.services
        for turn in range(turns):
            messages += [
                {"role": "user", "content": f"question {turn} " + "q" * (100 + turn % 7)},
                {"role": "assistant", "content": f"answer {turn} " + "a" * (300 + turn % 5)},
            ]
            body = json.dumps({"model": "m", "messages": messages}).encode()
            new = cut(HEADERS, body, "messages")
            assert new is not None
            data = edit_of(base, new)
            before()
            with budget.account() as account:
                applied = await apply_edit(services, LOCAL_TENANT, data, new.secrets, account)
            yield services, body, new, applied
            base = new


async def test_a_turn_costs_python_steps_for_what_it_adds_not_for_the_conversation(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts: Counter[str] = Counter()
    for module in MODULES:
        for name in PER_ENTRY:
            if hasattr(module, name):
                monkeypatch.setattr(module, name, counting(counts, name, getattr(module, name)))
    recipes = toolref_server.storage.recipes.Recipes
    pieces = recipes.pieces

    async def looked_up(self: Any, tenant: str, ids: Any, **bound: Any) -> Any:
        ids = list(ids)
        counts["pieces looked up"] += len(ids)
        return await pieces(self, tenant, ids, **bound)

    monkeypatch.setattr(recipes, "pieces", looked_up)
    chunk_of = toolref_server.storage.recipe_groups.chunk_of
    cuts = toolref_server.storage.recipe_chunks._cuts

    def chunked(entries: Any, sources: Any) -> Any:
        counts["entries chunked"] += len(entries)
        return chunk_of(entries, sources)

    def cut_up(entries: Any, start: int, end: int) -> Any:
        counts["entries sized"] += end - start
        return cuts(entries, start, end)

    monkeypatch.setattr(toolref_server.storage.recipe_forms, "chunk_of", chunked)
    monkeypatch.setattr(toolref_server.storage.recipe_chunks, "_cuts", cut_up)
    per_turn: list[Counter[str]] = []
    async for _, body, new, applied in growing(redis, 200, counts.clear):
        per_turn.append(Counter(counts))
        assert applied.request.body == body
        assert applied.ref == new.ref
    # A turn adds 4 entries (two messages, two commas); a snapshot turn (one in 8) looks
    # at what the 8 turns since the last added. None looks at the conversation's ~800.
    for turn, counted in enumerate(per_turn[1:], start=1):
        assert sum(counted.values()) <= 3 * 4 * 8 + 8, (turn, counted)
    early = max(sum(c.values()) for c in per_turn[8:40])
    late = max(sum(c.values()) for c in per_turn[-32:])
    assert late <= early, (early, late)


async def test_what_the_caller_does_to_the_body_comes_before_anything_is_kept(
    redis: Redis,
) -> None:
    """`apply_edit`'s `then` (the gateway's switch rewrite) refusing leaves the store as it
    was: the recipe is kept only after it (a refusal stores nothing; before, the recipe was
    kept first, and a refusal of the rewrite left it behind)."""
    app = create_app(Settings(redis_url="unused"), redis=redis)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi " * 30}]})
    new = cut(HEADERS, body.encode(), "messages")
    assert new is not None

    async def refuse(restored: bytes) -> bytes:
        assert restored == body.encode()
        raise BadRequestError("the switch cannot be made")

    async with app.router.lifespan_context(app):
        before = await snapshot(redis)
        with Budget(1 << 30).account() as account, pytest.raises(BadRequestError):
            await apply_edit(
                app.state.services,
                LOCAL_TENANT,
                edit_of(None, new),
                new.secrets,
                account,
                then=refuse,
            )
        assert await snapshot(redis) == before


async def test_a_turn_sizes_the_segments_it_adds_or_drops_not_those_it_keeps(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The body's size (checked against the limit) and the recipe's (the cache's weight)
    are its base's less the entries the edit drops plus those it adds: the segments whose
    lengths a turn sums are what changed, not the conversation (before, every segment kept
    was summed twice a turn, at turn 120 about a thousand)."""
    counts: Counter[str] = Counter()

    def sizing(items: Any, start: int = 0) -> Any:
        listed = list(items)
        counts["segments sized"] += len(listed)
        return builtins.sum(listed, start)

    for module in (toolref_server.registry.edits, toolref_server.storage.recipe_held):
        monkeypatch.setattr(module, "sum", sizing, raising=False)
    per_turn: list[int] = []
    async for services, body, new, applied in growing(redis, 120, counts.clear):
        per_turn.append(counts["segments sized"])
        assert applied.request.body == body
        held = services.recipes.cache.recipe(LOCAL_TENANT, applied.ref)
        assert held is not None
        assert held.length == builtins.sum(map(len, new.segments))
    # A turn adds 4 entries and drops the one that closed the body before: a few each.
    assert max(per_turn[1:]) <= 16, per_turn
    assert max(per_turn[-20:]) <= max(per_turn[1:21]), per_turn


async def test_an_edit_placing_the_empty_headers_segment_after_the_first_is_refused(
    redis: Redis,
) -> None:
    """A base whose headers' segment is empty, kept after an inline first segment: the
    recipe would hold an empty segment past the first, which the registry's answer as an
    edit (`Accept: application/vnd.toolref.edit`) cannot say (`wire.read` refuses it), so
    the turn worked or failed by which worker held its base. Refused 400 now, nothing
    kept; the same keep as the first op stands."""
    app = create_app(Settings(redis_url="unused"), redis=redis)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi " * 30}]})
    async with app.router.lifespan_context(app):
        services = app.state.services
        with Budget(1 << 30).account() as account:
            first = wire.encode(None, [Inline(b""), Inline(body.encode())], b"")
            base = await apply_edit(services, LOCAL_TENANT, first, [], account)
            before = await snapshot(redis)
            moved = wire.encode(base.ref, [Inline(b"x-a: 1\r\n"), Keep(0, 2)], b"")
            with pytest.raises(BadRequestError, match="op 1 keeps the base's empty headers"):
                await apply_edit(services, LOCAL_TENANT, moved, [], account)
            assert await snapshot(redis) == before
            same = wire.encode(base.ref, [Keep(0, 2)], b"")
            again = await apply_edit(services, LOCAL_TENANT, same, [], account)
            assert again.request.body == body.encode()
