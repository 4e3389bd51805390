"""A compressed body of many tiny zstd frames or gzip members is refused past a bound, not
inflated one at a time.

Found: each frame (zstd, RFC 8878) or member (gzip, RFC 1952) costs a reader a step of its
own (a new inflater for gzip: about 1 us; a frame walked in Python: about 150 ns), so 32 MiB
of empty gzip members took the registry's REST reader 1.7 s of a worker's CPU, and whole
zstd bodies (`compression.inflate`: the relay's, the middleware's and the gateway's reader)
and an edit's records (many records of 1,024 frames each) took any number. The REST reader
already held zstd bodies to `MAX_FRAMES`; now every reader holds frames and members to it
(an edit's records together: one frame a record, and `MAX_FRAMES` more for split tool
results), and the senders split no more than that, so an honest edit is never refused.
"""

from __future__ import annotations

import gzip
from typing import Final

import pytest
import zstandard

from toolref.edits import isolated
from toolref.kit.varints import varint
from toolref.wire import compression
from toolref.wire.errors import MalformedBodyError
from toolref_server.http.inflater import Inflater

MIB: Final = 1024 * 1024
MOST: Final = compression.MAX_FRAMES


def frame(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(write_checksum=True).compress(data)


def member(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def test_the_registrys_reader_bounds_the_members_of_a_gzip_body() -> None:
    """`MAX_MEMBERS` members are read (back to back, as RFC 1952 allows); one more is
    refused as it comes, whatever the pieces it arrives in."""
    fits = member(b"x") * compression.MAX_MEMBERS
    inflater = Inflater("gzip", 10 * MIB)
    inflater.feed(fits)
    assert inflater.finish() == b"x" * compression.MAX_MEMBERS
    inflater = Inflater("gzip", 10 * MIB)
    for at in range(0, len(fits), 7):  # pieces of 7 bytes: members end inside and at them
        inflater.feed(fits[at : at + 7])
    with pytest.raises(MalformedBodyError, match=f"more than {MOST} gzip members"):
        inflater.feed(member(b"x"))


@pytest.mark.parametrize("empty", [False, True])
def test_whole_bodies_bound_their_frames_and_members(empty: bool) -> None:
    """`inflate` (zstd) and `inflate_gzip` take `MAX_FRAMES` frames (members), and refuse
    one more before inflating any (empty ones count the same)."""
    data = b"" if empty else b"x"
    assert compression.inflate(frame(data) * MOST, MIB) == data * MOST
    assert compression.inflate_gzip(member(data) * MOST, MIB) == data * MOST
    with pytest.raises(MalformedBodyError, match=f"more than {MOST} zstd frames"):
        compression.inflate(frame(data) * (MOST + 1), MIB)
    with pytest.raises(MalformedBodyError, match=f"more than {MOST} gzip members"):
        compression.inflate_gzip(member(data) * (MOST + 1), MIB)


def split_record(pieces: int, kind: int = isolated.ALONE) -> tuple[bytes, bytes]:
    """A segment of `pieces` pieces, and its record of a frame (member) per piece."""
    parts = [f"result {n}: some output\n".encode() for n in range(pieces)]
    make = frame if kind == isolated.ALONE else member
    frames = b"".join(make(part) for part in parts)
    return b"".join(parts), bytes([kind]) + varint(len(frames)) + frames


@pytest.mark.parametrize("kind", [isolated.ALONE, isolated.GZIP])
def test_an_edits_records_share_one_bound_of_frames(kind: int) -> None:
    """One frame a record, and `MAX_FRAMES` more among them all: records of many frames
    each, together past that, are refused (before, each record took any number)."""
    segment, record = split_record(MOST // 2 + 1, kind)
    assert isolated.unpack(record * 2, [len(segment)] * 2, None) == [segment] * 2
    with pytest.raises(MalformedBodyError, match="more than"):
        isolated.unpack(record * 3, [len(segment)] * 3, None)


def test_a_sender_splits_no_more_than_the_bound() -> None:
    """Segments whose tool results are more than the bound lets an edit split go as they
    are (raw: a size that depends on their bytes alone), and the receiver reads them."""
    parts = [f"result {n}: ".encode() + b"output of the tool\n" * 20 for n in range(700)]
    segment = b"".join(parts)
    offsets = [len(b"".join(parts[:n])) for n in range(1, len(parts))]
    splits = {0: offsets, 1: offsets}
    blob = isolated.pack([segment, segment], splits=splits)
    assert blob[0] == isolated.ALONE
    assert blob.endswith(bytes([isolated.RAW]) + segment)  # the second: past the bound
    assert isolated.unpack(blob, [len(segment)] * 2, None) == [segment, segment]
