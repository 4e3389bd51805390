"""Edits of version 7 (issue 39): a new segment alone as a zstd frame against the shipped
dictionary (kind 7, `toolref.edits.shipped`), read back within its length and checksum,
only where the edit's version says so; the size guard still holds (a segment's record
depends on its own bytes alone)."""

from __future__ import annotations

import pytest
import zstandard

from tests.unit.edits.test_brotli_records import record_kinds, text
from toolref.edits import compact, isolated, shipped, wire
from toolref.edits.edit import Inline, Keep, Op
from toolref.kit.varints import varint
from toolref.sending.said import Said
from toolref.wire import dictionaries
from toolref.wire.errors import DecompressedTooLargeError, MalformedBodyError

# What a tool result reads: code (the dictionary knows Python's and JSON's common strings).
CODE = (
    b'def handle(self, request):\\n    if request is None:\\n        raise ValueError(\\"no '
    b'request\\")\\n    result = self.cache.get(request.key)\\n    return result\\n'
)


def frame(data: bytes) -> bytes:
    """`data` as a sender writes it: level, checksum, no dictionary id (`shipped`)."""
    words = dictionaries.by_id(shipped.DICTIONARY.dict_id)
    compressor = zstandard.ZstdCompressor(
        level=shipped.LEVEL, dict_data=words, write_dict_id=False, write_checksum=True
    )
    return compressor.compress(data)


def record(made: bytes) -> bytes:
    return bytes([shipped.KIND]) + varint(len(made)) + made


def test_a_code_segment_travels_against_the_shipped_dictionary_where_the_version_allows() -> None:
    segments = [b"", b"x" * 10, CODE * 6, text(2, 60)]
    lengths = [len(s) for s in segments]
    before = isolated.pack(segments, with_brotli=True)
    packed = isolated.pack(segments, with_brotli=True, with_shipped=True)
    assert shipped.KIND in record_kinds(packed, lengths)
    assert shipped.KIND not in record_kinds(before, lengths)
    assert len(packed) < len(before)
    assert isolated.unpack(packed, lengths, None, with_brotli=True, with_shipped=True) == segments
    with pytest.raises(MalformedBodyError, match="known kind"):
        isolated.unpack(packed, lengths, None, runs=True, with_brotli=True)  # version 5, 6


def test_a_segment_costs_the_same_record_whatever_else_the_edit_holds() -> None:
    """The dictionary is the package's, the same for every conversation and tenant: a
    guess at a secret the edit (or the conversation) holds costs what it costs alone."""
    secret = b"token=" + text(9, 3) + CODE
    guess = b"token=" + text(9, 3) + CODE  # the right guess, in another segment
    wrong = b"token=" + text(10, 3) + CODE
    alone = isolated.pack([guess], with_brotli=True, with_shipped=True)
    beside = isolated.pack([secret, guess], with_brotli=True, with_shipped=True)
    assert beside.endswith(alone)
    assert len(beside) == len(isolated.pack([secret], with_brotli=True, with_shipped=True)) + len(
        alone
    )
    assert abs(len(alone) - len(isolated.pack([wrong], with_brotli=True, with_shipped=True))) <= 2


def test_the_split_pieces_of_one_message_go_each_alone_against_the_dictionary() -> None:
    first, second = CODE * 3, b"secret=" + CODE * 2
    data = first + second
    packed = isolated.pack([data], splits={0: [len(first)]}, with_shipped=True)
    assert record_kinds(packed, [len(data)]) == [shipped.KIND]
    assert packed == record(frame(first) + frame(second))
    assert isolated.unpack(packed, [len(data)], None, with_shipped=True) == [data]


def test_an_edit_tries_the_dictionary_on_its_segments_in_order_within_its_budget() -> None:
    big = CODE * (shipped.BUDGET // len(CODE) + 2)
    assert len(big) > shipped.BUDGET
    kinds = record_kinds(isolated.pack([big], with_shipped=True), [len(big)])
    assert kinds == [isolated.ALONE]
    small = CODE * 2
    first = big[: shipped.BUDGET - len(small) + 1]  # leaves too little for the next
    made = isolated.pack([first, small], with_shipped=True)
    assert record_kinds(made, [len(first), len(small)]) == [shipped.KIND, isolated.ALONE]


def test_bad_records_of_kind_7_are_refused_before_more_is_read() -> None:
    data = CODE * 4
    good = record(frame(data))
    assert isolated.unpack(good, [len(data)], None, with_shipped=True) == [data]
    bomb = record(frame(b"\x00" * (64 << 20)))  # 64 MiB in a few bytes
    assert len(bomb) < 4096
    with pytest.raises(DecompressedTooLargeError):
        isolated.unpack(bomb, [len(data)], None, with_shipped=True)
    checked = frame(data)
    cases = {
        "checksum": record(checked[:-1] + bytes([checked[-1] ^ 1])),
        "cut short": record(checked)[:-1],
        "truncated frame": record(checked[:-3]),
        "shorter than its op": record(frame(data[:-1])),
        "not zstd": record(b"\xff" * 12),
        "another dictionary": record(
            zstandard.ZstdCompressor(
                dict_data=zstandard.ZstdCompressionDict(
                    data[:300], dict_type=zstandard.DICT_TYPE_RAWCONTENT
                ),
                write_checksum=True,
            ).compress(data)
        ),
    }
    for name, bad in cases.items():
        with pytest.raises(MalformedBodyError):  # noqa: PT012 (the case named if it passes)
            isolated.unpack(bad, [len(data)], None, with_shipped=True)
            pytest.fail(name)


def test_version_7_edits_have_a_header_byte_of_their_own_and_read_back() -> None:
    base = "tb_" + "a" * 26
    ops: list[Op] = [Inline(b""), Keep(0, 3), Inline(CODE * 5)]
    made = wire.encode_isolated(base, ops, version=7)
    assert made[0] == 7
    header, blob = wire.read(made, 1 << 20)
    assert header.version == 7
    assert wire.inline(header, blob, b"", None) == [b"", CODE * 5]
    kinds = record_kinds(blob, header.lengths)
    assert kinds[-1] == shipped.KIND
    for version, byte in ((6, 5), (5, 5), (4, 4)):
        older = wire.encode_isolated(base, ops, version=version)
        assert older[0] == byte
        assert shipped.KIND not in record_kinds(wire.read(older, 1 << 20)[1], header.lengths)
    refused = bytes([5]) + made[1:]  # kind 7 in an edit that says version 5
    header, blob = wire.read(refused, 1 << 20)
    with pytest.raises(MalformedBodyError, match="known kind"):
        wire.inline(header, blob, b"", None)
    assert compact.VERSIONS == (4, 5, 7, 8)


def test_written_bytes_and_what_a_sender_steps_down_to() -> None:
    assert [wire.written_as(v) for v in (2, 3, 4, 5, 6, 7, 8)] == [2, 3, 4, 5, 5, 7, 8]
    said = Said()
    said.said(7, 0.0)
    said.said(6, 1.0)  # a replica of 6 beside one of 7: what both read
    assert said.version(2.0) == 6
    said = Said()
    said.said(5, 0.0)
    said.said(6, 1.0)  # 5 and 6 write the same bytes: 6 kept
    assert said.version(2.0) == 6
    said = Said()
    assert said.unreadable(7, 0.0)  # a rolled-back receiver of 6: 6 (5's bytes)
    assert said.version(0.0) == 6
    said = Said()
    assert said.unreadable(6, 0.0)  # 6 wrote 5's bytes: the one below is 4
    assert said.version(0.0) == 4


def test_a_frame_of_kind_7_must_declare_its_size_and_checksum() -> None:
    """A frame against another dictionary inflates without an error to other bytes: only
    its checksum tells (exactness). So each frame of a kind-7 record declares its size and
    checksum, as `shipped` writes them, and sizes that do not add up to the segment's
    length are refused before a byte is inflated; a skippable frame is none `pack` writes."""
    data = CODE * 4
    words = dictionaries.by_id(shipped.DICTIONARY.dict_id)
    other = zstandard.ZstdCompressionDict(
        CODE[:200] + b"x" * 100, dict_type=zstandard.DICT_TYPE_RAWCONTENT
    )
    unchecked = zstandard.ZstdCompressor(dict_data=other, write_checksum=False, write_dict_id=False)
    streamed = zstandard.ZstdCompressor(dict_data=words, write_checksum=True, write_dict_id=False)
    sizeless = streamed.compressobj()
    skippable = b"\x50\x2a\x4d\x18" + (4).to_bytes(4, "little") + b"abcd"
    cases = {
        "no checksum": record(unchecked.compress(data)),
        "no size": record(sizeless.compress(data) + sizeless.flush()),
        "skippable": record(skippable + frame(data)),
        "a split piece without checksum": record(
            frame(data[:100])
            + zstandard.ZstdCompressor(
                dict_data=words, write_checksum=False, write_dict_id=False
            ).compress(data[100:])
        ),
    }
    for name, bad in cases.items():
        with pytest.raises(MalformedBodyError, match="size and checksum"):  # noqa: PT012
            isolated.unpack(bad, [len(data)], None, with_shipped=True)
            pytest.fail(name)
    too_big = record(frame(data) + frame(data))  # declares twice the op's length
    with pytest.raises(DecompressedTooLargeError):
        isolated.unpack(too_big, [len(data)], None, with_shipped=True)
    split = record(frame(data[:100]) + frame(data[100:]))
    assert isolated.unpack(split, [len(data)], None, with_shipped=True) == [data]
