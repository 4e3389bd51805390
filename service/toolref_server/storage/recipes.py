"""Stored recipes of edited requests: their pieces, their chunks, and one node per recipe.

A piece (a segment of `toolref.edits.recipe.PIECE_MIN` bytes or more) is stored once per
tenant under its 16-byte id, zstd-compressed as history messages are (`compressors`, the
shipped messages dictionary), written SET NX; read back, it is inflated and checked against
its id before it is used (a piece that does not hash to its id is not held). A shorter
segment is a literal entry: it lives in the recipe's own node and chunks.

A recipe's node, under its ref (`recipe_nodes`), is either a snapshot, the ids of its
chunks (`recipe_chunks`: content-defined runs of entries, literals with their bytes, each
compressed as one value and shared by every snapshot that holds it), or a delta: its own
edit, the snapshot it grows from and the deltas between. A delta is written for each edit
of a recipe but every `snapshot_every`-th (TOOLREF_EDIT_SNAPSHOT_EVERY), which writes a
snapshot and the chunks no earlier snapshot stored (an appended turn: the last one or two).
A turn writes O(edit) bytes (a delta: its edit and at most `snapshot_every` ids), a
snapshot O(chunks x 16) and its new chunks, never every entry again. A recipe comes back
in at most four round trips whatever the conversation's length: GET the node, MGET its
snapshot and the deltas between (those after the newest one this process holds), MGET the
snapshot's chunks, MGET the pieces (one MGET per hash slot on a cluster, in one round trip).

Lifetimes: a piece lives at least as long as every node naming it. A node carries when
every piece of it was last extended (`refreshed`), and lives until then plus the TTL at
most. Keeping a recipe extends every piece (and chunk) of it once `refresh_seconds` have
passed since (TOOLREF_HISTORY_REFRESH_SECONDS), else only the pieces it writes or names anew.
A delta extends its snapshot and the deltas between to its own lifetime; a snapshot
supersedes the chain it replaces (its base's snapshot and deltas, and the chunks of that
snapshot it does not hold): each keeps at most `superseded_ttl` seconds
(TOOLREF_HISTORY_SUPERSEDED_TTL).

What this process read or kept is held in its `RecipeCache` too (a `Held`, with the bytes
of every segment): the next turn on this process reads nothing; nothing depends on it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from itertools import chain
from typing import Final, TypeGuard

from toolref.edits.edit import EditError
from toolref.edits.recipe import (
    ID_BYTES,
    PIECE,
    framed,
    parse_recipe_ref,
    recipe_ref_of,
    ref_of_framed,
)
from toolref.receiving.workers import Workers
from toolref_server.storage import compressors, keys
from toolref_server.storage.recipe_cache import RecipeCache
from toolref_server.storage.recipe_chunks import Chunks, StoredEdit, chunk_id, settled
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
from toolref_server.storage.store import Put, Store

__all__ = ["Held", "Recipes", "piece_id"]

_ACTION: Final = "recipe"


def piece_id(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()[:ID_BYTES]


def _inflated(pairs: Sequence[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    """Each (id, stored value) inflated and checked against its id; those that fail are
    left out (not held). Linear in the bytes."""
    found: dict[bytes, bytes] = {}
    for piece, value in pairs:
        data = _decompressed(value)
        if data is not None and piece_id(data) == piece:
            found[piece] = data
    return found


def _decompressed(value: bytes) -> bytes | None:
    try:
        return compressors.decompress(value)
    except Exception:  # corrupt bytes fail in many ways (zstd, an unknown dictionary)
        return None


def _compressed(pieces: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(piece, compressors.compress(data, "messages")) for piece, data in pieces]


def _encoded_chunks(runs: Sequence[Sequence[bytes]]) -> list[bytes]:
    return [encode_chunk(run) for run in runs]


def _decoded_chunks(pairs: Sequence[tuple[bytes, bytes | None]]) -> list[list[bytes]] | None:
    found = []
    for expected, value in pairs:
        entries = None if value is None else decode_chunk(value, expected)
        if entries is None:
            return None
        found.append(entries)
    return found


def _ids(refs: Iterable[str]) -> tuple[bytes, ...]:
    found = tuple(parse_recipe_ref(ref) for ref in refs)
    assert all(found)
    return found  # type: ignore[return-value]


def _piece(op: object) -> TypeGuard[bytes]:
    return isinstance(op, bytes) and op[:1] == PIECE


def _added(edit: StoredEdit, pieces: Mapping[bytes, bytes]) -> list[bytes] | None:
    """The bytes of the entries `edit` adds; None when a piece is not held."""
    found: list[bytes] = []
    for op in edit:
        if isinstance(op, bytes):
            data = pieces.get(op[1:]) if op[:1] == PIECE else op[1:]
            if data is None:
                return None
            found.append(data)
    return found


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
    ) -> None:
        self.store = store
        self.clock = clock
        self.cache = cache
        self.workers = workers or Workers(None, None)
        self.snapshot_every = max(1, snapshot_every)
        self.superseded_ttl = min(superseded_ttl or store.ttl, store.ttl)
        self.refresh_seconds = min(refresh_seconds, store.ttl)

    # --- reading --------------------------------------------------------------------------

    async def load(self, tenant: str, ref: str) -> Held | None:
        """Recipe `ref` with the bytes of every segment, or None when it is not held whole
        (never kept, expired, evicted; its snapshot, a delta between, a chunk or a piece
        gone). From the cache, else at most four round trips (module docstring); linear in
        the recipe."""
        held = self.cache.recipe(tenant, ref)
        if held is not None:
            return held
        data = await self.store.get(keys.recipe_node(tenant, ref), _ACTION)
        node = None if data is None else decode_node(data)
        if node is None:
            return None
        if isinstance(node, Snapshot):
            held, _ = await self._snapshot(tenant, ref, node)
        else:
            held = await self._delta(tenant, ref, node)
        if held is None or held.ref != ref:
            return None  # not the bytes the node was written with
        self.cache.keep_recipe(tenant, ref, held)
        return held

    async def _snapshot(
        self, tenant: str, ref: str, node: Snapshot, added: Sequence[bytes] = ()
    ) -> tuple[Held | None, dict[bytes, bytes]]:
        """The snapshot `node` of `ref`, its chunks read, then its pieces and `added` (the
        pieces of deltas on it) in one read; and those pieces."""
        stored = node.ids
        values = await self.store.get_many([keys.recipe_chunk(tenant, c) for c in stored], _ACTION)
        pairs = list(zip(stored, values, strict=True))
        runs = await self.workers.run(sum(len(v or b"") for v in values), _decoded_chunks, pairs)
        if runs is None:
            return None, {}
        by_id = dict(zip(stored, runs, strict=True))
        slices = [by_id[c][offset : offset + length] for c, offset, length in node.chunks]
        if any(len(s) != length for s, (_, _, length) in zip(slices, node.chunks, strict=True)):
            return None, {}
        entries = list(chain.from_iterable(slices))
        wanted = [e[1:] for e in entries if e[:1] == PIECE]
        pieces = await self.pieces(tenant, [*wanted, *added])
        segments: list[bytes] = []
        for entry in entries:
            data = pieces.get(entry[1:]) if entry[:1] == PIECE else entry[1:]
            if data is None:
                return None, pieces
            segments.append(data)
        framed_entries = [framed(e) for e in entries]
        if ref_of_framed(framed_entries) != ref:
            return None, pieces
        chunks = Chunks.of(
            [length for _, _, length in node.chunks],
            [c for c, _, _ in node.chunks],
            [offset for _, offset, _ in node.chunks],
            [len(by_id[c]) for c, _, _ in node.chunks],
        )
        held = Held(ref, entries, framed_entries, segments, chunks, node, None, (), stored)
        return held, pieces

    async def _delta(self, tenant: str, ref: str, node: Delta) -> Held | None:
        """The delta `node` of `ref`: replayed from the newest recipe of its chain this
        process holds, else from its snapshot."""
        chain_refs = [recipe_ref_of(a) for a in node.ancestors]
        snapshot_ref = recipe_ref_of(node.snapshot)
        start: Held | None = None
        later = chain_refs
        for index in range(len(chain_refs) - 1, -1, -1):
            start = self.cache.recipe(tenant, chain_refs[index])
            if start is not None:
                later = chain_refs[index + 1 :]
                break
        else:
            start = self.cache.recipe(tenant, snapshot_ref)
        wanted = later if start is not None else [snapshot_ref, *later]
        values = await self.store.get_many([keys.recipe_node(tenant, r) for r in wanted], _ACTION)
        nodes = [None if v is None else decode_node(v) for v in values]
        deltas = [*nodes[len(wanted) - len(later) :], node]
        if not all(isinstance(d, Delta) for d in deltas):
            return None
        added = [op[1:] for d in deltas if isinstance(d, Delta) for op in d.ops if _piece(op)]
        if start is None:
            first = nodes[0]
            if not isinstance(first, Snapshot):
                return None
            start, pieces = await self._snapshot(tenant, snapshot_ref, first, added)
            if start is None:
                return None
        else:
            pieces = await self.pieces(tenant, added)
        held = start
        path = list(chain_refs[: len(chain_refs) - len(later)])
        for delta_ref, delta in zip([*later, ref], deltas, strict=True):
            assert isinstance(delta, Delta)
            edit = edit_of(delta, context(held.segments, delta.context))
            segments = None if edit is None else _added(edit, pieces)
            if edit is None or segments is None:
                return None
            try:
                parts = derive(held, edit, segments)
            except EditError:  # an edit that does not fit: not what was kept
                return None
            path.append(delta_ref)
            held = _held(parts, delta, snapshot_ref, tuple(path), held.stored)
        return held

    async def pieces(self, tenant: str, ids: Iterable[bytes]) -> dict[bytes, bytes]:
        """The bytes of each piece of `ids` this tenant holds (the others left out): from
        the cache, the rest in one batched read, inflated and checked (in a worker thread
        when large). Linear in the ids and the bytes read."""
        found: dict[bytes, bytes] = {}
        lacking: list[bytes] = []
        for piece in dict.fromkeys(ids):
            data = self.cache.piece(tenant, piece)
            if data is None:
                lacking.append(piece)
            else:
                found[piece] = data
        if not lacking:
            return found
        values = await self.store.get_many(
            [keys.edit_piece(tenant, piece) for piece in lacking], _ACTION
        )
        pairs = [(p, v) for p, v in zip(lacking, values, strict=True) if v is not None]
        size = sum(compressors.inflated_size(v) for _, v in pairs)
        read = await self.workers.run(size, _inflated, pairs)
        self.cache.keep_pieces(tenant, read.items())
        found.update(read)
        return found

    # --- keeping --------------------------------------------------------------------------

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
        One write round trip (two with a stored-bytes quota); O(edit + snapshot_every)
        bytes but every `snapshot_every`-th recipe: its node (16 bytes a chunk) and the
        chunks no snapshot stored."""
        store = self.store
        ref = parts.ref
        now = int(self.clock())
        refresh = base is None or now - base.refreshed >= self.refresh_seconds
        refreshed = now if refresh or base is None else base.refreshed
        lifetime = max(1, min(store.ttl, refreshed + store.ttl - now))
        compressed = await self.workers.run(
            sum(map(len, pieces.values())), _compressed, list(pieces.items())
        )
        puts = [
            Put(keys.edit_piece(tenant, piece), value, store.ttl, keep=True)
            for piece, value in compressed
        ]
        extend: list[tuple[str, int]] = []
        shorten: list[tuple[str, int]] = []
        if base is not None and ref == base.ref:  # the same recipe again: its node, refreshed
            held = _refreshed(base, refreshed)
        elif (
            base is None
            or base.depth + 1 >= self.snapshot_every
            or ref == base.snapshot
            or ref in base.path
        ):
            held, written = await self._snapshot_of(parts, edit, refreshed)
            puts += [Put(keys.recipe_chunk(tenant, c), v, store.ttl, keep=True) for c, v in written]
            fresh = {c for c, _ in written}
            extend += [
                (keys.recipe_chunk(tenant, c), store.ttl) for c in held.stored if c not in fresh
            ]
            if base is not None:
                old = [base.snapshot or base.ref, *base.path]
                shorten += [
                    (keys.recipe_node(tenant, r), self.superseded_ttl) for r in old if r != ref
                ]
                kept = set(held.stored)
                shorten += [
                    (keys.recipe_chunk(tenant, c), self.superseded_ttl)
                    for c in base.stored
                    if c not in kept
                ]
        else:
            held = _delta_of(parts, edit, base, refreshed)
            chain_refs = [held.snapshot or "", *base.path]
            extend += [(keys.recipe_node(tenant, r), lifetime) for r in chain_refs]
            if refresh:
                extend += [(keys.recipe_chunk(tenant, c), store.ttl) for c in held.stored]
        puts.append(Put(keys.recipe_node(tenant, ref), encode_node(held.node), lifetime))
        extended = set(named) if not refresh else {e[1:] for e in held.entries if e[:1] == PIECE}
        extend += [(keys.edit_piece(tenant, p), store.ttl) for p in extended if p not in pieces]
        await store.put(tenant, _ACTION, puts, shorten=shorten, extend=extend)
        self.cache.keep_pieces(tenant, pieces.items())
        self.cache.keep_recipe(tenant, ref, held)
        return held

    async def _snapshot_of(
        self, parts: Parts, edit: StoredEdit, refreshed: int
    ) -> tuple[Held, list[tuple[bytes, bytes]]]:
        """The recipe as a snapshot, and the chunks to write (id, value): its fresh runs,
        settled (`recipe_chunks.settled`). O(slices + the fresh entries)."""
        chunks = settled(parts.chunks, parts.entries)
        ids = list(chunks.ids)
        runs: list[list[bytes]] = []
        fresh: list[bytes] = []
        for index, known in enumerate(ids):
            if known is None:
                start, end = chunks.starts[index], chunks.ends[index]
                made = chunk_id(parts.framed[start:end])
                ids[index] = made
                fresh.append(made)
                runs.append(parts.entries[start:end])
        size = sum(len(e) for run in runs for e in run)
        values = await self.workers.run(size, _encoded_chunks, runs)
        done = Chunks(
            chunks.lengths, chunks.starts, chunks.ends, ids, chunks.offsets, chunks.totals
        )
        node = Snapshot(tuple(done.slices), refreshed)
        held = Held(
            parts.ref,
            parts.entries,
            parts.framed,
            parts.segments,
            done,
            node,
            None,
            (),
            node.ids,
        )
        return held, list(zip(fresh, values, strict=True))


def _held(
    parts: Parts, node: Delta, snapshot: str, path: tuple[str, ...], stored: tuple[bytes, ...]
) -> Held:
    return Held(
        parts.ref,
        parts.entries,
        parts.framed,
        parts.segments,
        parts.chunks,
        node,
        snapshot,
        path,
        stored,
    )


def _refreshed(base: Held, refreshed: int) -> Held:
    return replace(base, node=replace(base.node, refreshed=refreshed))


def _delta_of(parts: Parts, edit: StoredEdit, base: Held, refreshed: int) -> Held:
    """The recipe as a delta on `base`: its literals compressed against the base's end."""
    snapshot = base.snapshot or base.ref
    (snapshot_id,) = _ids([snapshot])
    node = delta_of(snapshot_id, _ids(base.path), edit, context(base.segments), refreshed)
    return _held(parts, node, snapshot, (*base.path, parts.ref), base.stored)
