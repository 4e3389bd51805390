"""The compact header of an edit of version 4, 5, 7 or 8: what the JSON header line of versions
1-3 says, in bytes (a continuation turn's header went from about 110 bytes to about 30).

    0x04, 0x05, 0x07 or 0x08   the version (a JSON header starts with `{`, 0x7B)
    flags                      bit 0: a base follows; bit 1: an answer id follows
    [16 bytes]                 the base recipe's id (`tb_` + base32 of them)
    [8 bytes]                  the answer's id (`answer.answer_id`: 16 hex digits as bytes)
    varint(ops)                how many ops follow, then each op:
        varint(length << 2)              an inline segment of `length` bytes
        varint(start << 2 | 1) varint(n) keep base entries start to start + n (n > 0)
        varint(2) + 16 bytes             a piece the registry holds, by its id
    <records>                  the inline segments, as versions 2 and 3 carry them
                               (`isolated`: kinds 0 to 4; version 5 also 5 and 6, brotli;
                               version 7 also 7, the shipped dictionary; version 8
                               also 8, copies of the answer)

Inline bytes in all are the sum of the lengths (no `n`). Every rule of the JSON header
holds: a base for keeps and for an answer, the headers' segment first, no empty inline
segment after it, entries and inline bytes bounded before anything is built (`wire.read`
checks them on the `Header` this makes). Pure; linear in the header.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from toolref.edits.edit import Keep, Named
from toolref.edits.recipe import ID_BYTES, parse_recipe_ref, recipe_ref_of
from toolref.kit.varints import read_varint, varint

VERSION: Final = 4
# 5: the records may be brotli streams (`isolated`); 7: also against the shipped dictionary;
# 8: also copies of the answer
VERSIONS: Final = (4, 5, 7, 8)
MARKS: Final = frozenset(VERSIONS)  # the first byte of a compact header
MARK: Final = bytes([VERSION])
ANSWER_BYTES: Final = 8
_BASE: Final = 1
_ANSWER: Final = 2
# Within a channel frame only (`toolref.websocket.bases`): the base named by how many
# streams back the turn that made it went, a varint where the 16-byte id stands. A channel's
# receiver writes the id back before the edit is read; anywhere else it is unreadable.
_STREAM: Final = 4
_INLINE, _KEEP, _NAMED = 0, 1, 2

Op = Keep | Named | int


def encode(
    base: str | None, ops: Sequence[Op], answer: str | None, version: int = VERSION
) -> bytes:
    """The compact header of an edit of `base` (a `tb_` ref, or None) with `ops` (an int:
    the length of the next inline segment) whose model's segments went against `answer`
    (its id, or None), of `version` (4; 5 when its records may be brotli streams; 7 when
    also frames against the shipped dictionary; 8 when also copies of the answer)."""
    if version not in VERSIONS:
        raise ValueError(f"a compact header of version {version}: there are {VERSIONS}")
    flags = (_BASE if base is not None else 0) | (_ANSWER if answer is not None else 0)
    out = bytearray(bytes([version, flags]))
    if base is not None:
        found = parse_recipe_ref(base)
        if found is None:
            raise ValueError(f"{base!r} is no recipe ref")
        out += found
    if answer is not None:
        out += bytes.fromhex(answer)
    out += varint(len(ops))
    for op in ops:
        if isinstance(op, Keep):
            out += varint(op.start << 2 | _KEEP) + varint(op.end - op.start)
        elif isinstance(op, Named):
            out += varint(_NAMED) + op.piece
        else:
            out += varint(op << 2 | _INLINE)
    return bytes(out)


class Unreadable(ValueError):
    """What is wrong with a compact header, in words (`wire.read` says it as a problem)."""


class TooManyOps(Unreadable):
    """A header listing more ops than the caller reads (`count`)."""

    def __init__(self, count: int) -> None:
        super().__init__(f"it lists {count} ops")
        self.count = count


def decode(data: bytes, max_ops: int) -> tuple[str | None, list[Op], str | None, int]:
    """The base, the ops and the answer id of the compact header `data` starts with, and
    the offset after it (its version is its first byte); `Unreadable` for anything else.
    At most `max_ops` ops are read (past them: `TooManyOps`, before any is built)."""
    if len(data) < 2 or data[0] not in MARKS:
        raise Unreadable("it does not start with the version byte (4, 5, 7 or 8) and its flags")
    flags, at = data[1], 2
    if flags & _STREAM:
        raise Unreadable(
            "its base is named by a channel's stream (flags bit 2), which only that channel's "
            "receiver reads: name it by its id"
        )
    if flags & ~(_BASE | _ANSWER):
        raise Unreadable(f"its flags {flags:#04x} name more than a base and an answer")
    base = answer = None
    if at + ID_BYTES * (flags & _BASE) + ANSWER_BYTES * (flags & _ANSWER) // 2 > len(data):
        raise Unreadable("it ends within its base or answer id")
    if flags & _BASE:
        base, at = recipe_ref_of(data[at : at + ID_BYTES]), at + ID_BYTES
    if flags & _ANSWER:
        answer, at = data[at : at + ANSWER_BYTES].hex(), at + ANSWER_BYTES
    count, at = read_varint(data, at)
    if count is None or at > len(data):
        raise Unreadable("it ends before its count of ops")
    if count > max_ops:
        raise TooManyOps(count)
    ops: list[Op] = []
    for index in range(count):
        word, at = read_varint(data, at)
        if word is None:
            raise Unreadable(f"it ends within op {index}")
        kind, value = word & 3, word >> 2
        if kind == _INLINE:
            ops.append(value)
        elif kind == _KEEP:
            size, at = read_varint(data, at)
            if size is None or size == 0:
                raise Unreadable(f"op {index} keeps no entries")
            ops.append(Keep(value, value + size))
        elif kind == _NAMED and value == 0 and at + ID_BYTES <= len(data):
            ops.append(Named(data[at : at + ID_BYTES]))
            at += ID_BYTES
        else:
            raise Unreadable(f"op {index} is of no known kind (0 inline, 1 keep, 2 a piece)")
    return base, ops, answer, at


def base_of(data: bytes) -> bytes | None:
    """The 16-byte id of the base the compact edit `data` names, or None (no compact header,
    no base, or one named by stream). O(1)."""
    if len(data) < 2 + ID_BYTES or data[0] not in MARKS or data[1] & (_BASE | _STREAM) != _BASE:
        return None
    return data[2 : 2 + ID_BYTES]


def by_stream(data: bytes, back: int) -> bytes:
    """The compact edit `data` (whose base `base_of` reads) with its base named `back` (at
    least 1) streams back instead of by its id. O(len(data))."""
    flags = data[1] & ~_BASE | _STREAM
    return bytes([data[0], flags]) + varint(back) + data[2 + ID_BYTES :]


def named_back(data: bytes) -> tuple[int, int] | None:
    """How many streams back the compact edit `data` names its base, and the offset after
    that varint; None where it names none so (its bytes then go on as they are, and read as
    they are: a stray bit 2 is refused by `decode`). O(1)."""
    if len(data) < 3 or data[0] not in MARKS or data[1] & (_BASE | _STREAM) != _STREAM:
        return None
    back, at = read_varint(data, 2)
    return None if back is None or back == 0 else (back, at)


def with_base(data: bytes, base: bytes, at: int) -> bytes:
    """The compact edit `data` (`named_back` read up to `at`) with its base named by its
    16-byte id `base` again. O(len(data))."""
    flags = data[1] & ~_STREAM | _BASE
    return bytes([data[0], flags]) + base + data[at:]
