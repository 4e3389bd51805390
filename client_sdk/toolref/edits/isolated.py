"""The inline segments of a size-guarded edit (version 2), each in a compression context of
its own.

A compressed size is a signal: a network observer sees it through TLS, and the gateway's
`Toolref-Savings`, savings and metrics show it. Text an attacker places in a conversation
(a fetched page returned as a tool result) compressed together with a secret the
conversation holds costs fewer bytes when it repeats the secret: a guess is confirmed by
its size. In a version-2 edit no inline segment is compressed with any other bytes of the
conversation, not even with the segment it replaces at its place (a Responses WebSocket
turn's items replace the turn before's one for one: a guess would be measured against the
secret it replaces): each travels as it is or as a zstd frame of its own, whichever is
smaller, so its size depends on its own bytes alone. Kept ranges and named pieces still
reference whole segments the gateway holds: a whole segment repeated costs a reference, a
part of one its bytes.

Layout: one record per inline segment, in op order.

    0x00 + the segment's bytes (its length is the op's)
    0x01 + varint(frame size) + a zstd frame, no dictionary
    0x02 + varint(member size) + a gzip member (RFC 1952): a sender with no zstd (a browser)
    0x03 + varint(frame size) + a zstd frame against the answer (version 3 only)
    0x04 + varint(n) + varint(frame size) + one zstd frame of the next n segments joined, no
           dictionary (version 3 only): the pieces of one long message (the long window)
    0x05 + varint(stream size) + a brotli stream (RFC 7932) + its CRC-32 (4 bytes, big
           endian): the segment alone (version 5 only)
    0x06 + varint(n) + varint(stream size) + a brotli stream of the next n segments joined +
           their CRC-32: kind 4 in brotli (version 5 only)
    0x07 + varint(frames' size) + a zstd frame against the shipped dictionary (one frame
           per piece of a split segment, as kind 1), each declaring its size and checksum
           (`shipped.declared`): the segment alone (version 7 only, `toolref.edits.shipped`)
    0x08 + varint(size) + copies of the answer and bytes as they are: a model's segment
           (version 8 only, `toolref.edits.copies`)

A segment a message's tool results share (`toolref.edits.request.Cut.splits`: a user
message carrying the results of parallel tool calls, Anthropic's `tool_result` blocks or
Gemini's `functionResponse` parts; a fetched page beside a file holding a secret) is cut
at the offsets where each result starts and the last ends, and each piece is compressed
alone: its record, of kind 1 (or 2), holds one frame (or gzip member) per piece, back to
back, which the reader inflates as one (`compression.inflate` reads across frames). Never
brotli (a brotli stream is not read across streams), never against the answer, never in a
run (`_apart`); as it is when that is smaller.

Kinds 5 and 6 (issue 39): brotli at quality 5 makes a segment alone 8-12% smaller than
zstd at level 3 does on agent traffic (its built-in dictionary of common words and code
tokens is public, part of the format, the same for every conversation and tenant, so a
segment's size still depends on its own bytes alone), at about 20 us per KiB (zstd: 5): a
sender tries it on the edit's segments in order, then its runs, while their bytes fit in
`BROTLI_BUDGET` (16 KiB an edit: at most about 0.4 ms; a new segment of a continuation turn
is mostly smaller, and the rest go as zstd frames), and keeps whichever record is smaller. A
brotli stream carries no checksum of its own; the CRC-32 after it is checked as zstd's is.

Kinds 3 and 8 are for the assistant segments of a version-3 edit: the answer the base's request
streamed (`toolref.edits.answer`), which the agent writes back, is its raw-content
dictionary. Its size then tells how the segment differs from the model's own answer, the
bytes of both the gateway sent and holds: never a tool result's or a user's text, whose
size must depend on their own bytes alone.

A frame inflates to the op's length exactly (never past it: refused as it inflates), and
carries a checksum (zstd's, gzip's CRC-32, the CRC-32 after a brotli stream). Other kinds
are reserved. Pure;
linear in the segments, with one zstd decompressor per edit (and one against the
answer), not per record: making one costs more than inflating a small frame.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Collection, Mapping, Sequence
from itertools import pairwise
from types import MappingProxyType
from typing import Final

import brotli
import zstandard

from toolref.edits import copies, shipped
from toolref.kit.varints import read_varint, varint
from toolref.wire import compression
from toolref.wire.compression import Meter
from toolref.wire.errors import MalformedBodyError

RAW: Final = 0x00
ALONE: Final = 0x01
GZIP: Final = 0x02
ANSWER: Final = 0x03
JOINED: Final = 0x04
BROTLI: Final = 0x05
BROTLI_JOINED: Final = 0x06
LEVEL: Final = 3  # zstd level: segments are small, the frame's own bytes do the work
MIN_COMPRESSED: Final = 24  # a shorter segment travels as it is (a frame costs ~15 bytes)
BROTLI_QUALITY: Final = 5  # 6-9 gain under 0.1% more; 10-11 another 8% at 20-40x the CPU
# Bytes of an edit tried with brotli at most (segments in order, then runs): brotli costs
# about 20 us per KiB at quality 5 where zstd costs 5, and the relay's turn waits for it.
BROTLI_BUDGET: Final = 16 << 10
# The window's bits: 64 KiB holds any stream the budget lets through (brotli's default, 22,
# sizes the encoder's ring buffer to 4 MiB per stream, which costs its allocation).
BROTLI_WINDOW: Final = 16
CRC_BYTES: Final = 4
# The most frames (gzip members) an edit's records hold beyond one a record: a split
# segment's pieces (`splits`), one frame each. Each costs the reader a step of its own, so
# the records of one edit share this bound (`unpack`), as one body does
# (`compression.MAX_FRAMES`); a sender splits no more than it lets (`_alone`: the rest go
# as they are). A message of more tool results than this is rare; so is a turn of several.
MAX_SPLIT_FRAMES: Final = compression.MAX_FRAMES
_THREAD: Final = threading.local()  # each thread's compressor (`_compressor`)
_NONE: Final[Mapping[int, Sequence[int]]] = MappingProxyType({})  # no segment split


def pack(
    segments: Sequence[bytes],
    *,
    compress: bool = True,
    answer: bytes = b"",
    answered: Collection[int] = (),
    runs: Sequence[tuple[int, int]] = (),
    with_brotli: bool = False,
    splits: Mapping[int, Sequence[int]] = _NONE,
    with_shipped: bool = False,
    with_copies: bool = False,
) -> bytes:
    """The records of `segments`, each the smaller of its bytes as they are and a zstd
    frame of its own (`compress` False: as they are, for a link where CPU costs more than
    bytes: the registry's answer to a middleware next to it); those at the indices of
    `answered` also against `answer` (kind 3), when that is smaller still. `runs`: (first,
    count) of segments of one message, which go as one frame (kind 4) when that is smaller
    than their records one by one. `with_brotli` (version 5): a brotli stream of its own
    (kinds 5, 6) where that is smaller still. `splits`: segment index -> the offsets in it
    of a message's tool results (`Cut.splits`), whose pieces are compressed each alone.
    `with_shipped` (version 7): a zstd frame against the shipped dictionary (kind 7) where
    that is smaller still. `with_copies` (version 8): the model's segments also as copies of
    `answer` (kind 8, `copies`) where that is smaller still."""
    if not compress:
        return b"".join(bytes([RAW]) + data for data in segments)
    alone = _compressor()
    budgets = (BROTLI_BUDGET if with_brotli else 0, shipped.BUDGET if with_shipped else 0)
    records, left = _alone(segments, alone, budgets, splits)
    dictionary = (answer, [index for index in answered if index not in splits])
    return _against(segments, records, dictionary, _apart(runs, splits), alone, left, with_copies)


def pack_both(
    segments: Sequence[bytes],
    *,
    answer: bytes,
    answered: Collection[int],
    runs: Sequence[tuple[int, int]],
    with_brotli: bool = False,
    splits: Mapping[int, Sequence[int]] = _NONE,
    with_shipped: bool = False,
    with_copies: bool = False,
) -> tuple[bytes, bytes]:
    """`pack(segments)` and `pack(segments, answer=..., answered=..., runs=...)`, each
    segment compressed alone once for both (what a sender weighs to choose one)."""
    alone = _compressor()
    budgets = (BROTLI_BUDGET if with_brotli else 0, shipped.BUDGET if with_shipped else 0)
    records, left = _alone(segments, alone, budgets, splits)
    dictionary = (answer, [index for index in answered if index not in splits])
    made = _against(segments, records, dictionary, _apart(runs, splits), alone, left, with_copies)
    return b"".join(records), made


def _compressor() -> zstandard.ZstdCompressor:
    """This thread's compressor for frames of their own (making one per edit costs about
    as much as compressing a small segment; one compressor is not shared across threads).
    It holds nothing of a request past the call (no reference back: the collector never
    needs to free it) and keeps at most level 3's window and tables: 1.3 MiB measured
    after an 8 MiB segment, per thread that packs."""
    made: zstandard.ZstdCompressor | None = getattr(_THREAD, "alone", None)
    if made is None:
        made = _THREAD.alone = zstandard.ZstdCompressor(level=LEVEL, write_checksum=True)
    return made


def _alone(
    segments: Sequence[bytes],
    alone: zstandard.ZstdCompressor,
    budgets: tuple[int, int],
    splits: Mapping[int, Sequence[int]],
) -> tuple[list[bytes], int]:
    """Each segment's record: its bytes as they are or a frame of its own, the smaller,
    those that fit in `budgets` (brotli's, the shipped dictionary's; in order) tried as a
    brotli stream and against the shipped dictionary too; brotli's budget left. A segment
    of `splits`: as it is or a frame per piece (alone, or against the shipped dictionary
    within its budget), the smallest, while the edit's pieces beyond one a segment fit in
    `MAX_SPLIT_FRAMES` (in order); past it, as it is."""
    records = []
    extra = MAX_SPLIT_FRAMES
    budget, words = budgets
    for index, data in enumerate(segments):
        best = bytes([RAW]) + data
        offsets = splits.get(index)
        if offsets is not None and len(data) >= MIN_COMPRESSED:
            pieces = _pieces(data, offsets)
            if pieces - 1 <= extra:  # reserved whichever is smaller (JS's `aloneRecords`)
                extra -= pieces - 1
                best = min(best, _record(ALONE, _frames(data, offsets, alone)), key=len)
                if len(data) <= words:
                    words -= len(data)
                    framed = _frames(data, offsets, shipped.compressor())
                    best = min(best, _record(shipped.KIND, framed), key=len)
        elif len(data) >= MIN_COMPRESSED:
            best = min(best, _record(ALONE, alone.compress(data)), key=len)
            if len(data) <= budget:
                budget -= len(data)
                best = min(best, bytes([BROTLI]) + _brotli_stream(data), key=len)
            if len(data) <= words:
                words -= len(data)
                framed = shipped.compressor().compress(data)
                best = min(best, _record(shipped.KIND, framed), key=len)
        records.append(best)
    return records, budget


def _pieces(data: bytes, offsets: Sequence[int]) -> int:
    """How many pieces (none empty) `data` cut at `offsets` is: the frames `_frames` makes."""
    ends = (0, *offsets, len(data))
    return sum(1 for a, b in pairwise(ends) if b > a)


def _frames(data: bytes, offsets: Sequence[int], alone: zstandard.ZstdCompressor) -> bytes:
    """`data` cut at `offsets` (ascending), each piece a zstd frame of its own, back to back:
    linear in `data`."""
    ends = (0, *offsets, len(data))
    return b"".join(alone.compress(data[a:b]) for a, b in pairwise(ends) if b > a)


def _apart(
    runs: Sequence[tuple[int, int]], splits: Mapping[int, Sequence[int]]
) -> list[tuple[int, int]]:
    """`runs` less the segments of `splits`: each run's stretches of two or more others
    (a segment of split pieces is never compressed with its neighbours). O(runs' segments)."""
    if not splits:
        return list(runs)
    found: list[tuple[int, int]] = []
    for first, count in runs:
        start = first
        for index in range(first, first + count + 1):
            if index == first + count or index in splits:
                if index - start > 1:
                    found.append((start, index - start))
                start = index + 1
    return found


def _brotli_stream(data: bytes) -> bytes:
    """varint(stream size) + `data` as a brotli stream + its CRC-32 (kinds 5 and 6)."""
    stream: bytes = brotli.compress(data, quality=BROTLI_QUALITY, lgwin=BROTLI_WINDOW)
    return varint(len(stream)) + stream + zlib.crc32(data).to_bytes(CRC_BYTES, "big")


def _against(  # noqa: PLR0917  (the records and what may improve them)
    segments: Sequence[bytes],
    records: list[bytes],
    dictionary: tuple[bytes, Collection[int]],
    runs: Sequence[tuple[int, int]],
    alone: zstandard.ZstdCompressor,
    budget: int,
    with_copies: bool = False,
) -> bytes:
    """`records` joined, those at `answered` against `answer` where smaller (kind 3, or
    kind 8 `with_copies`), the `runs` as one frame each where smaller (kind 4, or 6 for runs
    that fit in `budget`, in order). `dictionary`: the answer and the indices of
    `answered`."""
    answer, answered = dictionary
    if answer and answered:
        words = zstandard.ZstdCompressionDict(answer, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
        against = zstandard.ZstdCompressor(level=LEVEL, dict_data=words, write_checksum=True)
        records = list(records)
        for index in sorted(answered):
            if index >= len(segments):
                continue
            segment = segments[index]
            framed = b""
            if len(segment) >= MIN_COMPRESSED:
                framed = _record(ANSWER, against.compress(segment))
                records[index] = min(records[index], framed, key=len)
            worth = with_copies and len(framed) <= copies.FRAMED  # mostly the answer's bytes
            copied = copies.encode(segment, answer) if worth else None
            if copied is not None:
                records[index] = min(records[index], copied, key=len)
    joined = {first: count for first, count in runs if count > 1}
    if not joined:
        return b"".join(records)
    out = bytearray()
    index = 0
    while index < len(records):
        count = joined.get(index, 1)
        if count > 1 and sum(map(len, segments[index : index + count])) >= MIN_COMPRESSED:
            data = b"".join(segments[index : index + count])
            one = _run(data, count, alone, with_brotli=len(data) <= budget)
            budget -= len(data) if len(data) <= budget else 0
            if len(one) < sum(map(len, records[index : index + count])):
                out += one
                index += count
                continue
        out += records[index]
        index += 1
    return bytes(out)


def _run(data: bytes, count: int, alone: zstandard.ZstdCompressor, *, with_brotli: bool) -> bytes:
    """The record of `count` segments joined as `data`: kind 4, or 6 where smaller."""
    frame = alone.compress(data)
    best = bytes([JOINED]) + varint(count) + varint(len(frame)) + frame
    if with_brotli:
        best = min(best, bytes([BROTLI_JOINED]) + varint(count) + _brotli_stream(data), key=len)
    return best


def _joined(  # noqa: PLR0917  (the reader's state, passed on)
    blob: bytes,
    at: int,
    lengths: Sequence[int],
    index: int,
    meter: Meter | None,
    found: list[bytes],
    using: tuple[zstandard.ZstdDecompressor, compression.Frames],
    mode: int = JOINED,
) -> int:
    """A run of kind 4 (or 6, `mode`) at `at` (after its kind): its segments added to
    `found`; the offset after it."""
    count, at = read_varint(blob, at)
    size, at = read_varint(blob, at)
    if count is None or size is None or count < 2 or index + count > len(lengths):
        raise _malformed(f"the run at segment {index} names no segments of the edit")
    end = at + size + (CRC_BYTES if mode == BROTLI_JOINED else 0)
    if end > len(blob):
        raise _malformed(f"the run at segment {index} is cut short")
    wanted = lengths[index : index + count]
    if mode == BROTLI_JOINED:
        data = _brotli_read(blob, at, size, sum(wanted), meter, f"the run at segment {index}")
    else:
        alone, frames = using
        data = compression.inflate(
            blob[at : at + size], sum(wanted), meter, using=alone, frames=frames
        )
    if len(data) != sum(wanted):
        raise _malformed(f"the run at segment {index} inflates to {len(data)} bytes")
    place = 0
    for length in wanted:
        found.append(data[place : place + length])
        place += length
    return end


def _brotli_alone(  # noqa: PLR0917  (the reader's state, passed on)
    blob: bytes, at: int, index: int, length: int, meter: Meter | None, found: list[bytes]
) -> int:
    """A record of kind 5 at `at` (after its kind): its segment added to `found`; the
    offset after it."""
    size, at = read_varint(blob, at)
    if size is None or at + size + CRC_BYTES > len(blob):
        raise _malformed(f"segment {index} is cut short")
    data = _brotli_read(blob, at, size, length, meter, f"segment {index}")
    if len(data) != length:
        raise _malformed(f"segment {index} inflates to {len(data)} bytes, not its {length}")
    found.append(data)
    return at + size + CRC_BYTES


def _brotli_read(  # noqa: PLR0917  (a record's place and what it must be)
    blob: bytes, at: int, size: int, length: int, meter: Meter | None, what: str
) -> bytes:
    """The brotli stream of `size` bytes at `at`, inflated to at most `length` bytes and
    checked against the CRC-32 after it."""
    data = compression.inflate_brotli(blob[at : at + size], length, meter)
    crc = int.from_bytes(blob[at + size : at + size + CRC_BYTES], "big")
    if zlib.crc32(data) != crc:
        raise _malformed(f"{what} does not match its CRC-32")
    return data


def _record(mode: int, frame: bytes) -> bytes:
    return bytes([mode]) + varint(len(frame)) + frame


def unpack(
    blob: bytes,
    lengths: Sequence[int],
    meter: Meter | None,
    answer: bytes | None = None,
    *,
    runs: bool = False,
    with_brotli: bool = False,
    with_shipped: bool = False,
    with_copies: bool = False,
) -> list[bytes]:
    """The segments `pack` made of them, `lengths` each segment's (from the edit's ops),
    `answer` the dictionary of kind 3 (None: the edit has none, and a record of kind 3 is
    malformed), `runs` whether records of kind 4 may come (version 3), `with_brotli`
    whether records of kinds 5 and 6 may (version 5), `with_shipped` whether records of kind
    7 may (version 7), `with_copies` whether records of kind 8 may (version 8, with an
    `answer`). Each frame is
    charged to `meter` as it is inflated, never past its length; `MalformedBodyError` for
    records that do not read, `DictionaryMismatchError` for a frame the answer does not
    inflate."""
    found: list[bytes] = []
    at = 0
    view = memoryview(blob)
    readers = _Readers(answer, len(lengths))
    alone, frames = readers.alone, readers.frames
    for index, length in enumerate(lengths):
        if len(found) > index:
            continue  # read with a run before it (kind 4)
        if at >= len(blob):
            raise _malformed(f"the records end before segment {index}")
        mode = blob[at]
        at += 1
        if (mode == JOINED and runs) or (mode == BROTLI_JOINED and with_brotli):
            at = _joined(blob, at, lengths, index, meter, found, (alone, frames), mode)
            continue
        if mode == BROTLI and with_brotli:
            at = _brotli_alone(blob, at, index, length, meter, found)
            continue
        if mode == RAW:
            if at + length > len(blob):
                raise _malformed(f"segment {index} is cut short")
            found.append(blob[at : at + length])
            at += length
            continue
        size, at = read_varint(blob, at)
        known: tuple[int, ...] = (ALONE, GZIP) if answer is None else (ALONE, GZIP, ANSWER)
        known += (shipped.KIND,) if with_shipped else ()
        known += (copies.KIND,) if with_copies and answer is not None else ()
        if mode not in known or size is None or at + size > len(blob):
            kinds = _kinds(runs, with_brotli, with_shipped, with_copies)
            raise _malformed(f"segment {index} has no record of a known kind ({kinds})")
        data = readers.read(mode, bytes(view[at : at + size]), length, index, meter)
        at += size
        if len(data) != length:
            raise _malformed(f"segment {index} inflates to {len(data)} bytes, not its {length}")
        found.append(data)
    if at != len(blob):
        raise _malformed(f"{len(blob) - at} bytes follow the last segment")
    return found


class _Readers:
    """What reads one edit's framed records: one zstd decompressor for frames alone (made
    per record, it costs the most), one against the answer (made at the first record of
    kind 3), and the frames (gzip members) the edit may hold: one a record, and
    `MAX_SPLIT_FRAMES` more among them (O(records) steps)."""

    def __init__(self, answer: bytes | None, records: int) -> None:
        self.answer = answer
        self.alone = compression.decompressor()
        self.frames = compression.Frames(records + MAX_SPLIT_FRAMES, _FEWER)
        self.against: zstandard.ZstdDecompressor | None = None

    def read(self, mode: int, frame: bytes, length: int, index: int, meter: Meter | None) -> bytes:
        """The segment the record of kind `mode` (a known one) holds in `frame`."""
        answer, frames = self.answer, self.frames
        if mode == copies.KIND:
            assert answer is not None
            return copies.decode(frame, answer, length, meter, f"segment {index}")
        if mode == ANSWER:
            assert answer is not None
            self.against = self.against or compression.decompressor(answer)
            using = self.against
            return compression.decompress(frame, answer, length, "the answer", meter, using=using)
        if mode == ALONE:
            return compression.inflate(frame, length, meter, using=self.alone, frames=frames)
        if mode == shipped.KIND:
            shipped.declared(frame, length, frames.left, f"segment {index}")
            words = shipped.decompressor()
            return compression.inflate(frame, length, meter, using=words, frames=frames)
        return compression.inflate_gzip(frame, length, meter, members=frames)


def _kinds(runs: bool, with_brotli: bool, with_shipped: bool, with_copies: bool) -> str:
    """The record kinds an edit of these versions' rules reads, in words."""
    highest = 8 if with_copies else 7 if with_shipped else 6 if with_brotli else 4 if runs else 0
    return f"0 to {highest}" if highest else "0, 1 or 2"


_FEWER: Final = (
    f"an edit's records hold one frame (or gzip member) each, and at most {MAX_SPLIT_FRAMES} "
    "more among them (split tool results); send them as toolref.edits.isolated.pack writes "
    "them, or the request whole"
)


def _malformed(what: str) -> MalformedBodyError:
    return MalformedBodyError(
        f"the edit's inline records cannot be read: {what}; send them as "
        "toolref.edits.isolated.pack writes them, or the request whole"
    )
