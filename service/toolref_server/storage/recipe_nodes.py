"""A recipe's node and chunks as stored: their bytes, and reading them back.

Every node holds the literals its own edit added (their lengths, and their bytes as one
zstd frame: `blob`), and nothing else holds them: a literal is stored once, in the node
that brought it. A snapshot and the deltas after it are a *group*: the blob of each is
compressed against the end of the group's literals before it (its `context`, the last
`context` bytes of them, at most `CONTEXT`), the snapshot's against nothing (the shipped
messages dictionary); reading a node's literals takes the group's nodes before it, in
order, and no other.

A snapshot also lists the slices of chunks its entries are, in order (chunk id, offset,
length); a delta its own edit (ranges of its base kept, entries added: pieces by id,
literals by length), the snapshot it grows from and the deltas between (ids, oldest
first), so that loading it is one read of them all, whatever the conversation's length.
A chunk (`recipe_chunks`) is a run of entries under its id (a digest of what it stores),
shared by every snapshot that holds it: a piece by its entry, a literal by where it is
stored (a group's nodes, the node's place in it, the literal's place in the node). A node
is never written over (SET NX): what a chunk refers to stays what it was (but a node that
no longer reads back, which nothing can read through either: `Recipes.keep`).

Bytes: a version byte, then msgpack (a node positional, `encode_node`), compressed (zstd,
the shipped messages dictionary) when that is smaller (`_PLAIN` / `_PACKED`). Reading is
total: bytes no version wrote read as None (not held); a chunk is checked against its id
once its literals are read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from toolref.edits.recipe import ID_BYTES, LITERAL, PIECE
from toolref.wire import compression
from toolref.wire.encoding import packb, unpackb
from toolref_server.storage import compressors
from toolref_server.storage.recipe_chunks import StoredEdit, StoredOp

_PLAIN: Final = b"\x02"  # msgpack follows
_PACKED: Final = b"\x03"  # a zstd frame of the msgpack follows
CONTEXT: Final = 32 << 10  # a node's literals are compressed against this much of its group
_LEVEL: Final = 3
_SNAPSHOT: Final = 0  # a node's first member: its kind
_DELTA: Final = 1

NodeOp = tuple[int, int] | bytes | int  # a range kept, a piece entry, a literal's length
Ref = tuple[int, int, int]  # a literal in a chunk: (group, node in it, literal in the node)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A recipe as slices of chunks, (chunk id, offset, length) each; and the literals
    its own edit added (`lengths`, their bytes in `blob`, against nothing)."""

    chunks: tuple[tuple[bytes, int, int], ...]
    lengths: tuple[int, ...]
    blob: bytes
    refreshed: int  # epoch seconds: every piece of the recipe extended then

    @property
    def ids(self) -> tuple[bytes, ...]:
        """The ids of its chunks, each once, in order."""
        return tuple(dict.fromkeys(c for c, _, _ in self.chunks))

    @property
    def context(self) -> int:
        return 0


@dataclass(frozen=True, slots=True)
class Delta:
    """A recipe as its own edit of its base; `snapshot` and `ancestors` (the deltas after
    it, oldest first, the base last) are 16-byte ids of recipe refs. `ops`: the edit, a
    literal by its length; `blob`: the literals' bytes, against the last `context` bytes
    of its group's literals before it."""

    snapshot: bytes
    ancestors: tuple[bytes, ...]
    ops: tuple[NodeOp, ...]
    blob: bytes
    context: int
    refreshed: int

    @property
    def depth(self) -> int:
        return len(self.ancestors) + 1

    @property
    def lengths(self) -> tuple[int, ...]:
        return tuple(op for op in self.ops if type(op) is int)


RecipeNode = Snapshot | Delta


@dataclass(frozen=True, slots=True)
class Chunk:
    """A chunk as stored: its groups (the ids of each group's nodes, in order) and its
    entries (a piece entry, or a `Ref` to a literal)."""

    groups: tuple[tuple[bytes, ...], ...]
    entries: tuple[bytes | Ref, ...]


def blob_of(literals: Sequence[bytes], context: bytes) -> tuple[bytes, int]:
    """`literals` as a node stores them, against `context` (its group's literals before
    it; b"" for a snapshot), and the context's length. Linear in them and the context."""
    data = b"".join(literals)
    if not data:
        return b"", 0
    if context:
        return compression.compress(data, context, _LEVEL), len(context)
    return compressors.compress(data, "messages"), 0


def literals_of(node: RecipeNode, context: bytes) -> list[bytes] | None:
    """The literals `node` stores, its blob inflated against `context` (the last
    `node.context` bytes of its group's literals before it); None when they do not
    inflate to the lengths it states."""
    lengths = node.lengths
    size = sum(lengths)
    data = node.blob
    try:
        if node.context:
            if len(context) != node.context:
                return None
            data = compression.decompress(data, context, size, "the node's group", None)
        elif data:
            data = compressors.decompress(data)
    except Exception:  # a frame that does not inflate against it, or to that size
        return None
    if len(data) != size:
        return None
    found: list[bytes] = []
    at = 0
    for length in lengths:
        found.append(data[at : at + length])
        at += length
    return found


def edit_of(delta: Delta, literals: Sequence[bytes]) -> StoredEdit:
    """The edit `delta` stores, with its `literals` (`literals_of`) in place."""
    given = iter(literals)
    found: list[StoredOp] = []
    for op in delta.ops:
        found.append(LITERAL + next(given) if type(op) is int else op)  # type: ignore[arg-type]
    return tuple(found)


def node_ops(edit: StoredEdit) -> tuple[tuple[NodeOp, ...], list[bytes]]:
    """An edit as a delta keeps it (a literal by its length), and its literals."""
    ops: list[NodeOp] = []
    literals: list[bytes] = []
    for op in edit:
        if isinstance(op, bytes) and op[:1] == LITERAL:
            ops.append(len(op) - 1)
            literals.append(op[1:])
        else:
            ops.append(op)
    return tuple(ops), literals


def _packed(fields: Any) -> bytes:
    data = packb(fields)
    squeezed = compressors.compress(data, "messages")
    return _PACKED + squeezed if len(squeezed) < len(data) else _PLAIN + data


def _unpacked(data: bytes) -> Any:
    if data[:1] == _PLAIN:
        return unpackb(data[1:])
    if data[:1] == _PACKED:
        return unpackb(compressors.decompress(data[1:]))
    raise ValueError("not a version this code wrote")


def encode_node(node: RecipeNode) -> bytes:
    """A node's bytes; linear in it. Positional (a map's member names cost a tenth of a
    short delta): a snapshot `[0, refreshed, blob, context, slices, lengths]`, a delta
    `[1, refreshed, blob, context, chain, ops]`, its chain the snapshot's id and its
    ancestors' joined (16 bytes each)."""
    if isinstance(node, Snapshot):
        slices = [list(c) for c in node.chunks]
        fields: list[Any] = [_SNAPSHOT, node.refreshed, node.blob, 0, slices, list(node.lengths)]
    else:
        ops = [list(op) if isinstance(op, tuple) else op for op in node.ops]
        chain = node.snapshot + b"".join(node.ancestors)
        fields = [_DELTA, node.refreshed, node.blob, node.context, chain, ops]
    return _packed(fields)


def decode_node(data: bytes) -> RecipeNode | None:
    """The node in `data`; None for bytes no version wrote (read as not held). Reads the
    positional form (`encode_node`) and the map form earlier versions wrote."""
    try:
        fields = _unpacked(data)
        if isinstance(fields, dict):
            return _from_map(fields)
        kind, refreshed, blob, context, listed, rest = fields
        if type(refreshed) is not int or not isinstance(blob, bytes) or not _count(context):
            return None
        if kind == _SNAPSHOT and not context:
            lengths = tuple(rest)
            if not all(map(_count, lengths)):
                return None
            return Snapshot(tuple(_slice(c) for c in listed), lengths, blob, refreshed)
        if kind != _DELTA or not isinstance(listed, bytes) or not listed:
            return None
        if len(listed) % ID_BYTES:
            return None
        ids = [listed[at : at + ID_BYTES] for at in range(0, len(listed), ID_BYTES)]
        ops = tuple(_node_op(op) for op in rest)
        return Delta(ids[0], tuple(ids[1:]), ops, blob, context, refreshed)
    except Exception:  # corrupt bytes fail in many ways (zstd, msgpack, shapes, types)
        return None


def _from_map(fields: dict[str, Any]) -> RecipeNode | None:
    """A node as earlier versions wrote it (msgpack map)."""
    refreshed = fields["r"]
    blob, context = fields.get("l", b""), fields.get("z", 0)
    if type(refreshed) is not int or not isinstance(blob, bytes) or not _count(context):
        return None
    if "c" in fields:
        chunks = tuple(_slice(c) for c in fields["c"])
        lengths = tuple(fields["n"])
        if not all(map(_count, lengths)) or context:
            return None
        return Snapshot(chunks, lengths, blob, refreshed)
    snapshot, ancestors = fields["s"], tuple(fields["a"])
    if not _is_id(snapshot) or not all(map(_is_id, ancestors)):
        return None
    ops = tuple(_node_op(op) for op in fields["x"])
    return Delta(snapshot, ancestors, ops, blob, context, refreshed)


def encode_chunk(chunk: Chunk) -> tuple[bytes, bytes]:
    """A chunk's id (the first 16 bytes of the SHA-256 of its msgpack) and its bytes."""
    entries = [e if isinstance(e, bytes) else list(e) for e in chunk.entries]
    data = packb({"g": [list(g) for g in chunk.groups], "e": entries})
    squeezed = compressors.compress(data, "messages")
    value = _PACKED + squeezed if len(squeezed) < len(data) else _PLAIN + data
    return hashlib.sha256(data).digest()[:ID_BYTES], value


def decode_chunk(data: bytes, expected: bytes) -> Chunk | None:
    """The chunk in `data` (its literals not read yet); None for bytes no version wrote,
    that do not hash to `expected`, or references outside its groups."""
    try:
        if data[:1] == _PACKED:
            data = _PLAIN + compressors.decompress(data[1:])
        if data[:1] != _PLAIN or hashlib.sha256(data[1:]).digest()[:ID_BYTES] != expected:
            return None
        fields = unpackb(data[1:])
        groups = tuple(tuple(g) for g in fields["g"])
        if not all(g and all(map(_is_id, g)) for g in groups):
            return None
        entries = tuple(_chunk_entry(e, groups) for e in fields["e"])
    except Exception:  # corrupt bytes fail in many ways
        return None
    return Chunk(groups, entries) if entries else None


def _chunk_entry(entry: object, groups: tuple[tuple[bytes, ...], ...]) -> bytes | Ref:
    if isinstance(entry, bytes) and entry[:1] == PIECE and len(entry) == 1 + ID_BYTES:
        return entry
    if isinstance(entry, list) and len(entry) == 3 and all(map(_count, entry)):
        group, member, index = entry
        if group < len(groups) and member < len(groups[group]):
            return (group, member, index)
    raise ValueError("not an entry of a chunk")


def _count(value: object) -> bool:
    return type(value) is int and value >= 0


def _slice(value: object) -> tuple[bytes, int, int]:
    if isinstance(value, list) and len(value) == 3 and _is_id(value[0]):
        chunk, offset, length = value
        if _count(offset) and _count(length) and length > 0:
            return chunk, offset, length
    raise ValueError("not a slice of a chunk")


def _is_id(value: object) -> bool:
    return isinstance(value, bytes) and len(value) == ID_BYTES


def _node_op(op: object) -> NodeOp:
    if isinstance(op, list) and len(op) == 2 and all(type(i) is int for i in op):
        return (op[0], op[1])
    if _count(op):
        return op  # type: ignore[return-value]
    if isinstance(op, bytes) and op[:1] == PIECE and len(op) == 1 + ID_BYTES:
        return op
    raise ValueError("not an op")
