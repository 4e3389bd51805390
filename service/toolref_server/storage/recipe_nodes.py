"""A recipe's node and chunks as stored: their bytes, and reading them back.

A node is a snapshot (the slices of chunks its entries are, in order: chunk id, offset,
length) or a delta: its own edit (ranges of
its base kept, entries added: pieces by id, literals by length, their bytes in one zstd
frame against the last `CONTEXT` bytes of the base, which whoever reads the delta holds),
the snapshot it grows from and the deltas between (ids, oldest first), so that loading it
is one read of them all, whatever the conversation's length. A chunk is a run of entries
(`recipe_chunks`), literals with their bytes, under its id, shared by every snapshot that
holds it.

Bytes: a version byte, then msgpack, compressed (zstd, the shipped messages dictionary)
when that is smaller (`_PLAIN` / `_PACKED`). Reading is total: bytes no version wrote, or a
chunk that does not hash to its id, read as None (not held).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from toolref.edits.recipe import ID_BYTES, LITERAL, PIECE, Entry, framed
from toolref.wire import compression
from toolref.wire.encoding import packb, unpackb
from toolref_server.storage import compressors
from toolref_server.storage.recipe_chunks import StoredEdit, StoredOp, chunk_id

_PLAIN: Final = b"\x02"  # msgpack follows
_PACKED: Final = b"\x03"  # a zstd frame of the msgpack follows
CONTEXT: Final = 32 << 10  # a delta's literals are compressed against this much of its base
_LEVEL: Final = 3

NodeOp = tuple[int, int] | bytes | int  # a range kept, a piece entry, a literal's length


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A recipe as slices of chunks: (chunk id, offset, length) each."""

    chunks: tuple[tuple[bytes, int, int], ...]
    refreshed: int  # epoch seconds: every piece of the recipe extended then

    @property
    def ids(self) -> tuple[bytes, ...]:
        """The ids of its chunks, each once, in order."""
        return tuple(dict.fromkeys(c for c, _, _ in self.chunks))


@dataclass(frozen=True, slots=True)
class Delta:
    """A recipe as its own edit of its base; `snapshot` and `ancestors` (the deltas after
    it, oldest first, the base last) are 16-byte ids of recipe refs. `ops`: the edit, a
    literal by its length; `literals`: their bytes, one zstd frame against the base's last
    `context` bytes (`context` 0: as they are)."""

    snapshot: bytes
    ancestors: tuple[bytes, ...]
    ops: tuple[NodeOp, ...]
    literals: bytes
    context: int
    refreshed: int

    @property
    def depth(self) -> int:
        return len(self.ancestors) + 1


def delta_of(
    snapshot: bytes,
    ancestors: tuple[bytes, ...],
    edit: StoredEdit,
    context: bytes,
    refreshed: int,
) -> Delta:
    """The delta of `edit`, its literals compressed against `context` (the base's last
    `CONTEXT` bytes, `base_context`). Linear in the edit and the context."""
    ops: list[NodeOp] = []
    literals: list[bytes] = []
    for op in edit:
        if isinstance(op, bytes) and op[:1] == LITERAL:
            ops.append(len(op) - 1)
            literals.append(op[1:])
        else:
            ops.append(op)
    data = b"".join(literals)
    if data and context:
        data = compression.compress(data, context, _LEVEL)
    return Delta(snapshot, ancestors, tuple(ops), data, len(context) if data else 0, refreshed)


def edit_of(delta: Delta, context: bytes) -> StoredEdit | None:
    """The edit `delta` stores, its literals inflated against `context` (the base's last
    `delta.context` bytes); None when they do not inflate to the lengths its ops state."""
    size = sum(op for op in delta.ops if type(op) is int)
    data = delta.literals
    if delta.context:
        if len(context) != delta.context:
            return None
        try:
            data = compression.decompress(data, context, size, "the delta's base", None)
        except Exception:  # a frame that does not inflate against it, or to that size
            return None
    if len(data) != size:
        return None
    found: list[StoredOp] = []
    at = 0
    for op in delta.ops:
        if type(op) is int:
            found.append(LITERAL + data[at : at + op])
            at += op
        else:
            found.append(op)  # type: ignore[arg-type]  # a range or a piece entry
    return tuple(found)


RecipeNode = Snapshot | Delta


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
    """A node's bytes; linear in it."""
    if isinstance(node, Snapshot):
        return _packed({"r": node.refreshed, "c": [list(c) for c in node.chunks]})
    ops = [list(op) if isinstance(op, tuple) else op for op in node.ops]
    fields = {"r": node.refreshed, "s": node.snapshot, "a": list(node.ancestors), "x": ops}
    if node.literals:
        fields |= {"l": node.literals, "z": node.context}
    return _packed(fields)


def decode_node(data: bytes) -> RecipeNode | None:
    """The node in `data`; None for bytes no version wrote (read as not held)."""
    try:
        fields = _unpacked(data)
        refreshed = fields["r"]
        if type(refreshed) is not int:
            return None
        if "c" in fields:
            chunks = tuple(_slice(c) for c in fields["c"])
            return Snapshot(chunks, refreshed)
        snapshot, ancestors = fields["s"], tuple(fields["a"])
        if not _is_id(snapshot) or not all(map(_is_id, ancestors)):
            return None
        ops = tuple(_node_op(op) for op in fields["x"])
        literals, context = fields.get("l", b""), fields.get("z", 0)
        if not isinstance(literals, bytes) or type(context) is not int or context < 0:
            return None
        return Delta(snapshot, ancestors, ops, literals, context, refreshed)
    except Exception:  # corrupt bytes fail in many ways (zstd, msgpack, keys, types)
        return None


def encode_chunk(entries: Sequence[Entry]) -> bytes:
    return _packed(list(entries))


def decode_chunk(data: bytes, expected: bytes) -> list[Entry] | None:
    """The entries of the chunk in `data`; None unless they hash to `expected`."""
    try:
        entries = _unpacked(data)
        if not isinstance(entries, list) or not entries or not all(map(is_entry, entries)):
            return None
    except Exception:  # corrupt bytes fail in many ways
        return None
    return entries if chunk_id([framed(e) for e in entries]) == expected else None


def _slice(value: object) -> tuple[bytes, int, int]:
    if isinstance(value, list) and len(value) == 3 and _is_id(value[0]):
        chunk, offset, length = value
        if type(offset) is int and type(length) is int and offset >= 0 and length > 0:
            return chunk, offset, length
    raise ValueError("not a slice of a chunk")


def _is_id(value: object) -> bool:
    return isinstance(value, bytes) and len(value) == ID_BYTES


def is_entry(entry: object) -> bool:
    if not isinstance(entry, bytes) or not entry:
        return False
    return len(entry) == 1 + ID_BYTES if entry[:1] == PIECE else entry[:1] == LITERAL


def _node_op(op: object) -> NodeOp:
    if isinstance(op, list) and len(op) == 2 and all(type(i) is int for i in op):
        return (op[0], op[1])
    if type(op) is int and op >= 0:
        return op
    if isinstance(op, bytes) and op[:1] == PIECE and is_entry(op):
        return op
    raise ValueError("not an op")
