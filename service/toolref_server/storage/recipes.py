"""Stored recipes of edited requests: their pieces, one node per recipe, and chunks.

A piece (a segment of `toolref.edits.recipe.PIECE_MIN` bytes or more) is stored once per
tenant under its 16-byte id, zstd-compressed as history messages are (`compressors`, the
shipped messages dictionary), written SET NX; read back, it is inflated and checked against
its id before it is used (a piece that does not hash to its id is not held).

A shorter segment is a literal, stored once: in the node of the recipe whose edit brought
it (`recipe_nodes`), compressed against the literals its group (the snapshot it grows from
and the deltas between) stored before it. A recipe's node is a snapshot or a delta: a
delta is written for each edit of a recipe but every `snapshot_every`-th
(TOOLREF_EDIT_SNAPSHOT_EVERY), which writes a snapshot: the slices of chunks its entries
are (`recipe_chunks`: runs of entries, a literal by where it is stored, shared by every
snapshot holding them), and the chunks no earlier snapshot stored (an append: one, the
entries added since). A turn writes its own edit, its literals and at most
`snapshot_every` ids, never every entry again. A recipe comes back in at most four round
trips whatever the conversation's length: GET its node; MGET its snapshot and the deltas
between (those after the newest one this process holds); MGET the snapshot's chunks; MGET
the nodes those chunks' literals are stored in and every piece (a GET per key on a
cluster, in one round trip: `slots`).

Lifetimes: a node lives until its `refreshed` time plus the TTL, and so does everything it
needs (its group, the pieces and chunks of its recipe, the nodes their literals are in):
keeping a recipe extends all of them once `refresh_seconds` have passed since
(TOOLREF_EDIT_REFRESH_SECONDS), else only what it writes and the pieces it names anew (a
delta's group, which it is read through, was written or extended to that time since the
refresh: nothing of it is extended again each turn). A node holds literals others may
read, so it is never shortened; a
snapshot shortens the chunks of the snapshot before it that it no longer holds to
`superseded_ttl` seconds (TOOLREF_EDIT_SUPERSEDED_TTL).

What this process read or kept is held in its `RecipeCache` too (a `Held`, with the bytes
of every segment): the next turn on this process reads nothing; nothing depends on it.

A node, chunk or piece read that is not what was written (corrupt; compressed with a
dictionary this process lacks) is not held, and is deleted (`_discard`): the client's
resend, written SET NX, then stores it again, and the miss recovers by itself. So is a
piece an edit names whose frame declares more than the edit's body limit by itself
(`recipe_pieces.impossible`: a header gone bad, not a large piece), rather than refused 413
on every edit naming it until it expired. How a recipe is made into a snapshot or a delta
to write: `recipe_forms`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import replace
from typing import Final, TypeVar

from toolref.asgi.workers import Workers
from toolref.edits.edit import EditError
from toolref.edits.recipe import PIECE, framed, recipe_ref_of, ref_of_framed
from toolref.wire.errors import DecompressedTooLargeError, StoreUnavailableError
from toolref_server.storage import compressors, keys, recipe_pieces
from toolref_server.storage.recipe_cache import RecipeCache
from toolref_server.storage.recipe_chunks import Chunks, StoredEdit
from toolref_server.storage.recipe_forms import delta_of, snapshot_of
from toolref_server.storage.recipe_groups import (
    chunk_entries,
    group_literals,
    literal_reads,
    recipe_id,
    replayed,
)
from toolref_server.storage.recipe_held import Held, Parts, Source
from toolref_server.storage.recipe_nodes import (
    Delta,
    RecipeNode,
    Snapshot,
    decode_chunk,
    decode_node,
    encode_node,
)
from toolref_server.storage.recipe_pieces import (
    Bound,
    bounded,
    impossible,
    inflated,
    piece_id,
)
from toolref_server.storage.store import Put, Store
from toolref_server.storage.under_way import ANSWER, RECIPE, UnderWay

__all__ = ["Held", "Recipes", "piece_id"]

_ACTION: Final = "recipe"
_T = TypeVar("_T")
log = logging.getLogger(__name__)


def _pieces_of(entries: Iterable[bytes | object]) -> list[bytes]:
    return [e[1:] for e in entries if isinstance(e, bytes) and e[:1] == PIECE]


class Recipes:
    """The recipes, chunks and pieces of every tenant in `store` (see the module
    docstring)."""

    def __init__(
        self,
        store: Store,
        cache: RecipeCache[Held],
        workers: Workers | None = None,
        *,
        snapshot_every: int = 8,
        superseded_ttl: int | None = None,
        refresh_seconds: int = 3600,
        clock: Callable[[], float] = time.time,
        under_way: UnderWay | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.cache = cache
        self.under_way = UnderWay() if under_way is None else under_way  # `Answers` share it
        self.workers = workers or Workers(None, None)
        self.snapshot_every = max(1, snapshot_every)
        self.superseded_ttl = min(superseded_ttl or store.ttl, store.ttl)
        self.refresh_seconds = min(refresh_seconds, store.ttl)

    # --- reading --------------------------------------------------------------------------

    async def load(self, tenant: str, ref: str) -> Held | None:
        """Recipe `ref` with the bytes of every segment, or None when it is not held whole
        (never kept, expired, evicted; a node, chunk or piece it needs gone). From the
        cache, else at most four round trips (module docstring); linear in the recipe."""
        held = self.cache.recipe(tenant, ref)
        if held is None:  # a keep of it under way in this process (`keeping`): its end
            await self.under_way.settled((RECIPE, tenant, ref))
            held = self.cache.recipe(tenant, ref)
        if held is not None:
            return held
        key = keys.recipe_node(tenant, ref)
        data = await self.store.get(key, _ACTION)
        node = None if data is None else decode_node(data)
        if node is None:
            await self._discard(tenant, [key] if data is not None else [])
            return None
        try:
            held = await self._loaded(tenant, ref, node)
        except (EditError, KeyError, IndexError, ValueError):  # not what was kept
            return None
        if held is None or held.ref != ref:
            return None
        self.cache.keep_recipe(tenant, ref, held)
        return held

    async def _loaded(self, tenant: str, ref: str, node: RecipeNode) -> Held | None:
        if isinstance(node, Snapshot):
            held, _ = await self._snapshot(tenant, ref, node, [])
            return held
        chain = [recipe_ref_of(a) for a in node.ancestors]
        snapshot_ref = recipe_ref_of(node.snapshot)
        start: Held | None = None
        later = chain
        for index in range(len(chain) - 1, -1, -1):  # the newest of its group held here
            start = self.cache.recipe(tenant, chain[index])
            if start is not None:
                later = chain[index + 1 :]
                break
        else:
            start = self.cache.recipe(tenant, snapshot_ref)
        wanted = later if start is not None else [snapshot_ref, *later]
        node_keys = [keys.recipe_node(tenant, r) for r in wanted]
        nodes = await self._read(tenant, node_keys, lambda v, _: decode_node(v))
        deltas = [*nodes[len(wanted) - len(later) :], node]
        if not all(isinstance(d, Delta) for d in deltas):
            return None
        added = [p for d in deltas if isinstance(d, Delta) for p in _pieces_of(d.ops)]
        if start is None:
            head = nodes[0]
            if not isinstance(head, Snapshot):
                return None
            start, pieces = await self._snapshot(tenant, snapshot_ref, head, added)
            if start is None:
                return None
        else:
            pieces = await self.pieces(tenant, added)
        held = start
        for delta_ref, delta in zip([*later, ref], deltas, strict=True):
            assert isinstance(delta, Delta)
            held = replayed(held, delta_ref, delta, pieces)
            if held is None:
                return None
        return held

    async def _snapshot(
        self, tenant: str, ref: str, node: Snapshot, added: Sequence[bytes]
    ) -> tuple[Held | None, dict[bytes, bytes]]:
        """The snapshot `node` of `ref`: its chunks read, then the nodes their literals are
        stored in and its pieces and `added` (the pieces of deltas on it) in one read; and
        those pieces."""
        stored = node.ids
        chunk_keys = [keys.recipe_chunk(tenant, c) for c in stored]
        chunks = await self._read(tenant, chunk_keys, lambda v, at: decode_chunk(v, stored[at]))
        by_id = {c: chunk for c, chunk in zip(stored, chunks, strict=True) if chunk is not None}
        if len(by_id) < len(stored):
            return None, {}
        # Only the slices it holds are read: the rest of a chunk may name nodes and pieces
        # this recipe does not need, which its refresh does not extend (`_everything`).
        counts: dict[tuple[bytes, ...], int] = {}  # each group's first nodes it reads
        for chunk, offset, length in node.chunks:
            if offset + length > len(by_id[chunk].entries):
                return None, {}
            literal_reads(by_id[chunk], offset, offset + length, counts)
        members = list(dict.fromkeys(m for g, n in counts.items() for m in g[:n]))
        own = recipe_id(ref)
        wanted = _pieces_of(e for c, o, n in node.chunks for e in by_id[c].entries[o : o + n])
        nodes, pieces = await self._nodes_and_pieces(
            tenant, [m for m in members if m != own], [*wanted, *added]
        )
        nodes[own] = node
        literals: dict[tuple[bytes, ...], list[list[bytes]]] = {}
        for group, count in counts.items():
            first = group[:count]
            found = (
                group_literals([nodes[m] for m in first])
                if all(m in nodes for m in first)
                else None
            )
            if found is None:
                return None, pieces
            literals[group] = found[0]
        entries: list[bytes] = []
        sources: list[Source | None] = []
        for chunk, offset, length in node.chunks:
            run = chunk_entries(by_id[chunk], literals, offset, offset + length)
            if run is None:
                return None, pieces
            entries += run[0]
            sources += run[1]
        segments = [e[1:] if e[:1] != PIECE else pieces.get(e[1:]) for e in entries]
        if None in segments:
            return None, pieces
        framed_entries = [framed(e) for e in entries]
        if ref_of_framed(framed_entries) != ref:
            return None, pieces
        own_literals = group_literals([node])
        if own_literals is None:
            return None, pieces
        chunks_of = Chunks.of(
            [length for _, _, length in node.chunks],
            [c for c, _, _ in node.chunks],
            [offset for _, offset, _ in node.chunks],
            [len(by_id[c].entries) for c, _, _ in node.chunks],
        )
        held = Held(
            ref,
            entries,
            framed_entries,
            segments,  # type: ignore[arg-type]  # no None left
            sources,
            chunks_of,
            node,
            None,
            (),
            stored,
            own_literals[1],
        )
        return held, pieces

    async def _nodes_and_pieces(
        self,
        tenant: str,
        ids: Sequence[bytes],
        wanted: Iterable[bytes],
        bound: Bound | None = None,
    ) -> tuple[dict[bytes, RecipeNode], dict[bytes, bytes]]:
        """The nodes of `ids` held here or in the store, and the pieces of `wanted`: one
        read for both. `bound`: (limit, aside), see `pieces`."""
        nodes: dict[bytes, RecipeNode] = {}
        lacking_nodes: list[bytes] = []
        for node_id in ids:
            cached = self.cache.recipe(tenant, recipe_ref_of(node_id))
            if cached is None:
                lacking_nodes.append(node_id)
            else:
                nodes[node_id] = cached.node
        pieces: dict[bytes, bytes] = {}
        lacking: list[bytes] = []
        for piece in dict.fromkeys(wanted):
            data = self.cache.piece(tenant, piece)
            if data is None:
                lacking.append(piece)
            else:
                pieces[piece] = data
        node_keys = [keys.recipe_node(tenant, recipe_ref_of(i)) for i in lacking_nodes]
        piece_keys = [keys.edit_piece(tenant, p) for p in lacking]
        values = await self.store.get_many([*node_keys, *piece_keys], _ACTION)
        unread: list[str] = []  # there, and not what was written: deleted (`_discard`)
        for key, node_id, value in zip(node_keys, lacking_nodes, values, strict=False):
            found = None if value is None else decode_node(value)
            if found is not None:
                nodes[node_id] = found
            elif value is not None:
                unread.append(key)
        stored = values[len(node_keys) :]
        if bound is not None:
            bad = impossible(bound, lacking, stored)  # corrupt, not large: not counted
            unread += [piece_keys[at] for at in bad]
            gone = set(bad)
            stored = [None if at in gone else v for at, v in enumerate(stored)]
            try:
                bounded(bound, pieces, lacking, stored)
            except DecompressedTooLargeError:
                await self._discard(tenant, unread)  # refused, and what did not read deleted
                raise
        read = await self._inflate(lacking, stored)
        pairs = zip(piece_keys, lacking, stored, strict=True)
        unread += [k for k, p, v in pairs if v is not None and p not in read]
        await self._discard(tenant, unread)
        self.cache.keep_pieces(tenant, read.items())
        pieces.update(read)
        return nodes, pieces

    async def _read(
        self, tenant: str, wanted: Sequence[str], decode: Callable[[bytes, int], _T | None]
    ) -> list[_T | None]:
        """The values of `wanted` (one read), each decoded (`decode(value, index)`), None
        where absent or not what was written (those deleted: `_discard`)."""
        values = await self.store.get_many(wanted, _ACTION)
        found = [None if v is None else decode(v, at) for at, v in enumerate(values)]
        pairs = zip(wanted, values, found, strict=True)
        await self._discard(tenant, [k for k, v, f in pairs if v is not None and f is None])
        return found

    async def _discard(self, tenant: str, unread: Sequence[str]) -> None:
        """Delete `unread`: values there that do not read (corrupt; compressed with a
        dictionary this process lacks, a mixed-version rollout), each a miss. The resend
        writes them SET NX: kept, they would stay until they expire, every turn a miss.
        One DEL round trip, only then; a failure leaves them to the next read."""
        if not unread:
            return
        log.warning(
            "%d stored recipe value(s) do not read (first: %s); deleted", len(unread), unread[0]
        )
        with suppress(StoreUnavailableError):
            await self.store.put(tenant, _ACTION, [], delete=unread)

    async def _inflate(
        self, ids: Sequence[bytes], values: Sequence[bytes | None]
    ) -> dict[bytes, bytes]:
        pairs = [(p, v) for p, v in zip(ids, values, strict=True) if v is not None]
        size = sum(compressors.inflated_size(v) for _, v in pairs)
        return await self.workers.run(size, inflated, pairs)

    async def pieces(
        self,
        tenant: str,
        ids: Iterable[bytes],
        *,
        limit: int | None = None,
        aside: bytes | None = None,
    ) -> dict[bytes, bytes]:
        """The bytes of each piece of `ids` this tenant holds (the others left out): from
        the cache, the rest in one batched read, inflated and checked (in a worker thread
        when large). Linear in the ids and the bytes read. `limit`: the bytes they may make
        but `aside`'s (an edit's headers' segment, which its body's limit leaves out),
        counted before any is inflated (the sizes their zstd frames declare):
        `DecompressedTooLargeError` past it."""
        bound = None if limit is None else (limit, aside)
        _, found = await self._nodes_and_pieces(tenant, [], ids, bound)
        return found

    # --- keeping --------------------------------------------------------------------------

    def keeping(self, tenant: str, ref: str, keep: asyncio.Task[None]) -> None:
        """`keep` is keeping recipe `ref`: a `load` of it here waits for its end."""
        self.under_way.add((RECIPE, tenant, ref), keep)

    async def keep(
        self,
        tenant: str,
        parts: Parts,
        edit: StoredEdit,
        *,
        base: Held | None,
        pieces: Mapping[bytes, bytes],
        named: Collection[bytes],
    ) -> Held:
        """Keep the recipe `parts`, made by `edit` from `base` (None: a recipe of its own),
        and return it as held. `pieces`: the bytes of the pieces the request carried
        (written SET NX); `named`: ids of pieces held elsewhere that it names (extended).
        One write round trip (two with a stored-bytes quota); its own literals and
        O(ops + snapshot_every) bytes but every `snapshot_every`-th recipe: its node (a
        slice a chunk) and the chunks no snapshot stored. A recipe its base's group holds
        already (an undo) is that node, kept as the same recipe again (read back first)."""
        store = self.store
        ref = parts.ref
        edited = base.ref if base is not None else None  # its answer: this edit's dictionary
        if base is not None and ref != base.ref and ref in base.group:
            # Its node is there, never written over: a snapshot made here would not be the
            # recipe, and would supersede the chunks that node reads.
            base = await self.load(tenant, ref) or base
        now = int(self.clock())
        refresh = base is None or now - base.refreshed >= self.refresh_seconds
        refreshed = now if refresh or base is None else base.refreshed
        lifetime = max(1, min(store.ttl, refreshed + store.ttl - now))
        compressed = await self.workers.run(
            sum(map(len, pieces.values())), recipe_pieces.compressed, list(pieces.items())
        )
        puts = [
            Put(keys.edit_piece(tenant, piece), value, store.ttl, keep=True)
            for piece, value in compressed
        ]
        extend: list[tuple[str, int]] = []
        shorten: list[tuple[str, int]] = []
        if base is not None and ref == base.ref:  # the same recipe again: its node, refreshed
            held = replace(base, node=replace(base.node, refreshed=refreshed))
        elif (
            base is None
            or base.depth + 1 >= self.snapshot_every
            or ref == base.snapshot
            or ref in base.path
        ):
            held, written = await snapshot_of(self.workers, parts, refreshed)
            puts += [Put(keys.recipe_chunk(tenant, c), v, store.ttl, keep=True) for c, v in written]
            fresh = {c for c, _ in written}
            old = [c for c in held.stored if c not in fresh]
            extend += [(keys.recipe_chunk(tenant, c), store.ttl) for c in old]
            if base is not None:
                kept = set(held.stored)
                gone = [c for c in base.stored if c not in kept]
                shorten += [(keys.recipe_chunk(tenant, c), self.superseded_ttl) for c in gone]
        else:  # its group lives until `refreshed` + TTL already: written or extended so
            held = await delta_of(self.workers, parts, edit, base, refreshed)
        same = base is not None and ref == base.ref  # its own node again, refreshed
        node_put = Put(keys.recipe_node(tenant, ref), encode_node(held.node), lifetime, not same)
        puts.append(node_put)
        if refresh:
            extend += _everything(tenant, held, lifetime, store.ttl)
        else:
            extend += [(keys.edit_piece(tenant, p), store.ttl) for p in named if p not in pieces]
        # The base's streamed answer was its next edit's dictionary: this is that edit.
        dropped = [keys.answer(tenant, edited)] if edited is not None and edited != ref else []
        if dropped:  # its write, when still under way here, first (else it lingers)
            await self.under_way.settled((ANSWER, tenant, edited))
        try:
            done = await store.put(
                tenant, _ACTION, puts, shorten=shorten, extend=extend, delete=dropped
            )
        except StoreUnavailableError:  # held here still: this process's next turn edits it
            self.cache.keep_pieces(tenant, pieces.items())
            self.cache.keep_recipe(tenant, ref, held)
            raise
        self.cache.keep_pieces(tenant, pieces.items())
        if not (done[-1] or same):  # kept before, as another node: that one is the recipe
            self.cache.drop_recipe(tenant, ref)
            if await self.load(tenant, ref) is not None:
                return held
            # ...unless it does not read back (a delta whose group is gone: evicted, or
            # kept on a base only a process's cache held). Written over by this one, or
            # each resend would extend it again and the recipe never read back.
            await store.put(tenant, _ACTION, [replace(node_put, keep=False)])
        self.cache.keep_recipe(tenant, ref, held)
        return held


def _everything(tenant: str, held: Held, lifetime: int, ttl: int) -> list[tuple[str, int]]:
    """Every key `held` needs, extended (a refresh): its group's nodes, the nodes its
    literals are stored in, its chunks and pieces. Linear in its entries (once per
    TOOLREF_EDIT_REFRESH_SECONDS)."""
    nodes = {ref for source in held.sources if source is not None for ref in source[0]}
    nodes.update(held.group)
    nodes.discard(held.ref)
    found = [(keys.recipe_node(tenant, r), lifetime) for r in nodes]
    found += [(keys.recipe_chunk(tenant, c), ttl) for c in held.stored]
    found += [(keys.edit_piece(tenant, p), ttl) for p in set(_pieces_of(held.entries))]
    return found
