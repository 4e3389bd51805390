"""Stored recipes of edited requests: their pieces, and one node per recipe.

A piece (a segment of `toolref.edits.recipe.PIECE_MIN` bytes or more) is stored once per
tenant under its 16-byte id, zstd-compressed as history messages are (`compressors`, the
shipped messages dictionary), written SET NX; read back, it is inflated and checked against
its id before it is used (a piece that does not hash to its id is not held).

A recipe's node, under its ref, is either a snapshot (every entry of the recipe) or a
delta: the ref of the snapshot it grows from and the edits since, in order (each edit: the
ranges of the recipe before it kept, and the entries it adds). A delta is written for each
edit of a recipe but every `snapshot_every`-th (TOOLREF_EDIT_SNAPSHOT_EVERY), which writes a
snapshot: a turn writes O(edit x snapshot_every) bytes, never every entry again, and a
recipe comes back in a bounded number of round trips whatever the conversation's length:
GET the node, GET its snapshot, MGET the pieces (one MGET per hash slot on a cluster).

Lifetimes: a piece lives at least as long as every node naming it. A node carries when
every piece of it was last extended (`refreshed`), and lives until then plus the TTL at
most. Keeping a recipe extends every piece of it once `refresh_seconds` have passed since
(TOOLREF_HISTORY_REFRESH_SECONDS), else only the pieces it writes or names anew (those it
keeps from its base live as long as the base's refresh promised). A delta extends its
snapshot to its own lifetime; the node a recipe continues (now superseded) keeps at most
`superseded_ttl` seconds (TOOLREF_HISTORY_SUPERSEDED_TTL), and so does the snapshot a new
snapshot replaces.

What this process read or kept is held in its `RecipeCache` too; nothing depends on it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from toolref.edits.edit import Inline, Keep, Named, Op, apply
from toolref.edits.recipe import ID_BYTES, PIECE, Entry, is_piece, is_recipe_ref, recipe_ref
from toolref.receiving.workers import Workers
from toolref.wire.encoding import packb, unpackb
from toolref_server.storage import compressors, keys
from toolref_server.storage.recipe_cache import RecipeCache
from toolref_server.storage.store import Put, Store

_VERSION: Final = 1  # the first byte of a node
_ENTRY_OVERHEAD: Final = 64  # what a held entry costs in memory beyond its bytes, about

StoredOp = tuple[int, int] | bytes  # a range of the recipe before kept, or an entry added
StoredEdit = tuple[StoredOp, ...]


@dataclass(frozen=True, slots=True)
class RecipeNode:
    """A recipe as stored: a snapshot (`snapshot` None, `entries` all of them), or a delta
    (`snapshot` the ref it grows from, `edits` since, in order)."""

    snapshot: str | None
    entries: tuple[Entry, ...]
    edits: tuple[StoredEdit, ...]
    refreshed: int  # epoch seconds: every piece of the recipe extended then

    @property
    def depth(self) -> int:
        """Edits since the snapshot (0: a snapshot)."""
        return len(self.edits)

    def encode(self) -> bytes:
        """Version byte, then msgpack; linear in the node."""
        fields: dict[str, Any] = {"r": self.refreshed}
        if self.snapshot is None:
            fields["e"] = list(self.entries)
        else:
            fields["s"] = self.snapshot
            fields["x"] = [
                [list(op) if isinstance(op, tuple) else op for op in e] for e in self.edits
            ]
        return bytes((_VERSION,)) + packb(fields)

    @classmethod
    def decode(cls, data: bytes) -> RecipeNode | None:
        """The node in `data`; None for bytes no version wrote (read as not held)."""
        if data[:1] != bytes((_VERSION,)):
            return None
        try:
            fields = unpackb(data[1:])
            refreshed = fields["r"]
            if type(refreshed) is not int:
                return None
            if "e" in fields:
                entries = tuple(fields["e"])
                if not all(_is_entry(e) for e in entries):
                    return None
                return cls(None, entries, (), refreshed)
            snapshot = fields["s"]
            if not is_recipe_ref(snapshot):
                return None
            edits = tuple(tuple(_stored_op(op) for op in edit) for edit in fields["x"])
            return cls(snapshot, (), edits, refreshed)
        except Exception:  # corrupt bytes fail in many ways (msgpack, keys, types)
            return None


def _is_entry(entry: object) -> bool:
    if not isinstance(entry, bytes) or not entry:
        return False
    return len(entry) == 1 + ID_BYTES if entry[:1] == PIECE else entry[:1] == b"\x01"


def _stored_op(op: object) -> StoredOp:
    if isinstance(op, list) and len(op) == 2 and all(type(i) is int for i in op):
        return (op[0], op[1])
    if _is_entry(op):
        assert isinstance(op, bytes)
        return op
    raise ValueError("not an op")


def stored_edit(ops: Sequence[Op], entries: Sequence[Entry]) -> StoredEdit:
    """The edit `ops` made `entries` with, as a node keeps it: ranges kept, entries added
    (linear in the ops)."""
    found: list[StoredOp] = []
    at = 0
    for op in ops:
        if isinstance(op, Keep):
            found.append((op.start, op.end))
            at += op.end - op.start
        else:
            found.append(entries[at])
            at += 1
    return tuple(found)


def replayed(entries: Sequence[Entry], edit: StoredEdit) -> list[Entry]:
    """The entries after `edit`; `EditError` when it does not fit them. Linear in the
    result (a kept range is a slice)."""
    ops: list[Op] = []
    for op in edit:
        if isinstance(op, tuple):
            ops.append(Keep(op[0], op[1]))
        elif is_piece(op):
            ops.append(Named(op[1:]))
        else:
            ops.append(Inline(op[1:]))
    return apply(entries, ops)


@dataclass(frozen=True, slots=True)
class Held:
    """A recipe as loaded: its ref, node and entries."""

    ref: str
    node: RecipeNode
    entries: list[Entry]

    @property
    def size(self) -> int:
        """Bytes it holds in memory, about (for the cache's bound)."""
        edits = sum(len(op) if isinstance(op, bytes) else 16 for e in self.node.edits for op in e)
        return sum(len(e) + _ENTRY_OVERHEAD for e in self.entries) + edits


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


class Recipes:
    """The recipes and pieces of every tenant in `store` (see the module docstring)."""

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

    async def load(self, tenant: str, ref: str) -> Held | None:
        """Recipe `ref`, or None when it is not held (never kept, expired, evicted, or its
        snapshot gone). From the cache, else at most two GETs; linear in the recipe's
        entries times the edits since its snapshot (at most `snapshot_every`)."""
        held = self.cache.recipe(tenant, ref)
        if held is not None:
            return held
        data = await self.store.get(keys.recipe_node(tenant, ref), "recipe")
        node = None if data is None else RecipeNode.decode(data)
        if node is None:
            return None
        if node.snapshot is None:
            entries = list(node.entries)
        else:
            base = await self._snapshot(tenant, node.snapshot)
            if base is None:
                return None
            entries = list(base.entries)
            try:
                for edit in node.edits:
                    entries = replayed(entries, edit)
            except ValueError:  # an edit that does not fit: not what was kept
                return None
        if recipe_ref(entries) != ref:
            return None  # not the bytes the node was written with
        held = Held(ref, node, entries)
        self.cache.keep_recipe(tenant, ref, held)
        return held

    async def _snapshot(self, tenant: str, ref: str) -> RecipeNode | None:
        cached = self.cache.recipe(tenant, ref)
        if cached is not None:
            return RecipeNode(None, tuple(cached.entries), (), cached.node.refreshed)
        data = await self.store.get(keys.recipe_node(tenant, ref), "recipe")
        node = None if data is None else RecipeNode.decode(data)
        return node if node is not None and node.snapshot is None else None

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
            [keys.edit_piece(tenant, piece) for piece in lacking], "recipe"
        )
        pairs = [(p, v) for p, v in zip(lacking, values, strict=True) if v is not None]
        size = sum(compressors.inflated_size(v) for _, v in pairs)
        read = await self.workers.run(size, _inflated, pairs)
        self.cache.keep_pieces(tenant, read.items())
        found.update(read)
        return found

    async def keep(
        self,
        tenant: str,
        entries: list[Entry],
        ops: Sequence[Op],
        *,
        base: Held | None,
        pieces: Mapping[bytes, bytes],
        named: Collection[bytes],
    ) -> str:
        """Keep the recipe of `entries`, made by `ops` from `base` (None: a recipe of its
        own), and return its ref. `pieces`: the bytes of the pieces the request carried
        (written SET NX); `named`: ids of pieces held elsewhere that it names (extended).
        One write round trip (two with a stored-bytes quota); O(edit x snapshot_every)
        bytes but every `snapshot_every`-th recipe, whose node lists its entries."""
        store = self.store
        ref = recipe_ref(entries)
        now = int(self.clock())
        refresh = base is None or now - base.node.refreshed >= self.refresh_seconds
        refreshed = now if refresh or base is None else base.node.refreshed
        lifetime = max(1, min(store.ttl, refreshed + store.ttl - now))
        node = self._node(ref, entries, ops, base, refreshed)
        compressed = await self.workers.run(
            sum(map(len, pieces.values())), _compressed, list(pieces.items())
        )
        puts = [
            Put(keys.edit_piece(tenant, piece), value, store.ttl, keep=True)
            for piece, value in compressed
        ]
        node_key = keys.recipe_node(tenant, ref)
        puts.append(Put(node_key, node.encode(), lifetime))
        extended = set(named) if not refresh else {e[1:] for e in entries if is_piece(e)}
        extend = [(keys.edit_piece(tenant, p), store.ttl) for p in extended if p not in pieces]
        if node.snapshot is not None:
            extend.append((keys.recipe_node(tenant, node.snapshot), lifetime))
        shorten = [
            (keys.recipe_node(tenant, old), self.superseded_ttl)
            for old in _superseded(ref, node, base)
        ]
        await store.put(tenant, "recipe", puts, shorten=shorten, extend=extend)
        self.cache.keep_pieces(tenant, pieces.items())
        self.cache.keep_recipe(tenant, ref, Held(ref, node, entries))
        return ref

    def _node(
        self,
        ref: str,
        entries: list[Entry],
        ops: Sequence[Op],
        base: Held | None,
        refreshed: int,
    ) -> RecipeNode:
        """A snapshot for a recipe of its own, every `snapshot_every`-th edit, and for the
        recipe a delta's snapshot names (never a delta on itself); the base's own node for
        the same recipe again; else a delta."""
        if base is None or base.node.depth + 1 >= self.snapshot_every:
            return RecipeNode(None, tuple(entries), (), refreshed)
        if ref == base.node.snapshot:
            return RecipeNode(None, tuple(entries), (), refreshed)
        if ref == base.ref:
            return replace(base.node, refreshed=refreshed)
        snapshot = base.node.snapshot or base.ref
        edits = (*base.node.edits, stored_edit(ops, entries))
        return RecipeNode(snapshot, (), edits, refreshed)


def _superseded(ref: str, node: RecipeNode, base: Held | None) -> list[str]:
    """The nodes keeping `node` as recipe `ref` supersedes: its base (unless the base is
    its snapshot), and the base's snapshot when `node` starts a new one; never `ref`."""
    if base is None:
        return []
    old = []
    if base.ref != node.snapshot:
        old.append(base.ref)
    if node.snapshot is None and base.node.snapshot is not None:
        old.append(base.node.snapshot)
    return [r for r in old if r != ref]
