"""An assistant segment as copies of the answer (record kind 8, edits of version 8: issue 39).

The agent writes back the answer the gateway streamed to it one turn before: the model's
segment of the next request is that answer, give or take the bytes the agent's own JSON
writer changes. Version 3 compresses such a segment against the answer (kind 3): a zstd
frame costs about 14 bytes of its own (magic, header, block header, checksum) around a few
bytes of matches, two thirds of the record. A record of kind 8 names the spans it copies
from the answer, and carries the rest as it is:

    0x08 + varint(size) + instructions (`size` bytes), until the segment's length is made:
        varint(n << 1 | 1) varint(offset)    n bytes of the answer from `offset` (n > 0)
        varint(n << 1) + n bytes             n bytes as they are (n > 0)

A segment the agent wrote back unchanged costs 5 or 6 bytes. The answer is the one the
edit's header names by id (`answer.answer_id`), checked before any record is read, so
copies of it are exact as the frame's checksum made kind 3's. As kind 3, a record of kind 8
may stand only for the model's own segments (`isolated`): its size tells how a segment
differs from the model's answer, never a tool result's or a user's text.

The sender tries copies where kind 3's record is short (`FRAMED`: the segment mostly the
answer's bytes) and finds them greedily (`encode`): the answer's `GRAM`-byte runs at every
`GRAM`-th offset are indexed, each offset of the segment looked up, and a match extended
both ways; any common run of `2 * GRAM - 1` bytes or more is found. O(answer + segment)
dictionary steps (a match is extended once over the bytes it covers), neither past `MOST`.
The sender keeps whichever record is smaller. Reading (`decode`) is linear in the record
and the segment.
"""

from __future__ import annotations

from typing import Final

from toolref.kit.varints import read_varint, varint
from toolref.wire.compression import Meter
from toolref.wire.errors import MalformedBodyError

KIND: Final = 0x08
SINCE: Final = 8  # the edits version whose records may be of this kind
GRAM: Final = 8  # bytes of a run indexed: a copy shorter than this costs more than it saves
# A segment or answer past this size is not tried: the index and the scan cost about 0.2-0.4
# us a byte in Python (a 16 KiB segment sharing nothing with a 16 KiB answer: about 3 ms at
# most, on the sender's event loop), and past it the 14 bytes of kind 3's frame, which still
# stands for it, are under 0.1% of the segment.
MOST: Final = 16 << 10
# Copies are tried only where kind 3's record is at most this long: zstd codes literals and
# matches at least as tightly as copies do, so copies win by the frame's own bytes, where the
# segment is mostly the answer's (and the scan, jumping over each match, costs little); a
# segment far from the answer (a long frame) is not scanned.
FRAMED: Final = 128
_STEP: Final = 16  # bytes compared at first, then twice as many while they match


def encode(segment: bytes, answer: bytes) -> bytes | None:
    """The record of kind 8 of `segment` against `answer` (kind byte, size, instructions),
    or None where it copies nothing (or either is past `MOST`)."""
    if not answer or not segment or len(segment) > MOST or len(answer) > MOST:
        return None
    index: dict[bytes, int] = {}
    for at in range(0, len(answer) - GRAM + 1, GRAM):
        index.setdefault(answer[at : at + GRAM], at)
    out = bytearray()
    copied = False
    literal_from = at = 0
    end = len(segment)
    while at + GRAM <= end:
        found = index.get(segment[at : at + GRAM])
        if found is None:
            at += 1
            continue
        start, source = at, found
        while start > literal_from and source > 0 and segment[start - 1] == answer[source - 1]:
            start, source = start - 1, source - 1
        stop = at + GRAM + _common(segment, at + GRAM, answer, found + GRAM)
        _literal(out, segment[literal_from:start])
        out += varint((stop - start) << 1 | 1) + varint(source)
        copied = True
        literal_from = at = stop
    if not copied:
        return None
    _literal(out, segment[literal_from:])
    return bytes([KIND]) + varint(len(out)) + bytes(out)


def _common(segment: bytes, at: int, answer: bytes, source: int) -> int:
    """How many bytes `segment` from `at` and `answer` from `source` have in common: slices
    compared in steps that double while they match (C comparisons over the bytes a match
    covers, O(match) in all), the last step's bytes one by one."""
    most = min(len(segment) - at, len(answer) - source)
    same = 0
    step = _STEP
    while same < most:
        size = min(step, most - same)
        if segment[at + same : at + same + size] == answer[source + same : source + same + size]:
            same += size
            step *= 2
        elif size > _STEP:
            step = _STEP
        else:
            while same < most and segment[at + same] == answer[source + same]:
                same += 1
            return same
    return same


def _literal(out: bytearray, data: bytes) -> None:
    if data:
        out += varint(len(data) << 1) + data


def decode(record: bytes, answer: bytes, length: int, meter: Meter | None, what: str) -> bytes:
    """The segment of `length` bytes the instructions `record` (the bytes after the record's
    size) make of `answer`; its bytes charged to `meter` before they are made.
    `MalformedBodyError` for instructions that do not make exactly `length` bytes, copy
    past the answer or end within one. O(record + length)."""
    if meter is not None:
        meter.charge(length)
    out = bytearray()
    at = 0
    while at < len(record):
        word, at = read_varint(record, at)
        if word is None or word >> 1 == 0 or len(out) + (word >> 1) > length:
            raise _malformed(what, "an instruction is cut short, empty, or past the segment")
        size = word >> 1
        if word & 1:
            source, at = read_varint(record, at)
            if source is None or source + size > len(answer):
                raise _malformed(what, f"a copy of {size} bytes runs past the answer's end")
            out += answer[source : source + size]
        else:
            if at + size > len(record):
                raise _malformed(what, f"{size} bytes as they are run past the record")
            out += record[at : at + size]
            at += size
    if len(out) != length:
        raise _malformed(what, f"its instructions make {len(out)} bytes, not its {length}")
    return bytes(out)


def _malformed(what: str, fact: str) -> MalformedBodyError:
    return MalformedBodyError(
        f"the edit's inline records cannot be read: {what}'s record of kind 8 (copies of the "
        f"answer): {fact}; send it as toolref.edits.copies.encode writes it, or the request "
        "whole"
    )
