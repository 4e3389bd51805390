"""Edits of version 5 (issue 39): a new segment alone, or a run, as a brotli stream (kinds 5
and 6, `toolref.edits.isolated`), read back within its length, checked by its CRC-32, and
only where the edit's version says so."""

from __future__ import annotations

import random
import zlib

import brotli
import pytest

from toolref.edits import compact, isolated, wire
from toolref.edits.edit import Inline, Keep, Op
from toolref.kit.varints import varint
from toolref.wire.compression import MIN_BROTLI_WINDOW, brotli_window_bits, inflate_brotli
from toolref.wire.errors import DecompressedTooLargeError, MalformedBodyError

WORDS = [
    "self",
    "return",
    "def",
    "import",
    "value",
    "items",
    "config",
    "request",
    "None",
    "result",
    "error",
    "raise",
]


def text(seed: int, lines: int = 40) -> bytes:
    """Code-like text of new words each seed (what a tool result reads)."""
    rng = random.Random(seed)
    rows = (
        " ".join(rng.choice(WORDS) + str(rng.randrange(99)) for _ in range(6)) for _ in range(lines)
    )
    return "\n".join(rows).encode()


def record_kinds(packed: bytes, lengths: list[int]) -> list[int]:
    """The kind of each record of `packed` (a run counted once)."""
    kinds, at, index = [], 0, 0
    while index < len(lengths):
        kind = packed[at]
        kinds.append(kind)
        at += 1
        if kind == isolated.RAW:
            at, index = at + lengths[index], index + 1
            continue
        count = 1
        if kind in {isolated.JOINED, isolated.BROTLI_JOINED}:
            count, at = varint_at(packed, at)
        size, at = varint_at(packed, at)
        crc = isolated.CRC_BYTES if kind in {isolated.BROTLI, isolated.BROTLI_JOINED} else 0
        at, index = at + size + crc, index + count
    return kinds


def varint_at(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def test_brotli_records_are_smaller_and_read_back_only_where_the_version_allows() -> None:
    segments = [b"", b"x" * 10, text(1), text(2, 200)]
    lengths = [len(s) for s in segments]
    plain = isolated.pack(segments)
    packed = isolated.pack(segments, with_brotli=True)
    assert len(packed) < len(plain)  # brotli's public dictionary knows these words
    assert isolated.BROTLI in record_kinds(packed, lengths)
    assert isolated.BROTLI not in record_kinds(plain, lengths)
    assert isolated.unpack(packed, lengths, None, with_brotli=True) == segments
    with pytest.raises(MalformedBodyError, match="known kind"):
        isolated.unpack(packed, lengths, None, runs=True)  # version 3 or 4: no kind 5


def test_a_segment_costs_the_same_record_whatever_else_the_edit_holds() -> None:
    """The size guard holds with brotli: a record depends on its own segment's bytes only
    (the built-in dictionary is the format's, the same for everyone)."""
    secret = b"token=" + text(9, 3)
    guess = b"token=" + text(9, 3)  # the right guess, in another segment
    alone = isolated.pack([guess], with_brotli=True)
    beside = isolated.pack([secret, guess], with_brotli=True)
    assert beside.endswith(alone)
    assert len(beside) == len(isolated.pack([secret], with_brotli=True)) + len(alone)


def test_a_run_of_one_message_may_travel_as_one_brotli_stream() -> None:
    pieces = [text(3, 30), text(3, 31)[-500:], text(4, 30)]
    lengths = [len(p) for p in pieces]
    packed = isolated.pack(pieces, runs=[(0, 3)], with_brotli=True)
    kinds = record_kinds(packed, lengths)
    assert kinds == [isolated.BROTLI_JOINED]
    assert isolated.unpack(packed, lengths, None, runs=True, with_brotli=True) == pieces
    with pytest.raises(MalformedBodyError):
        isolated.unpack(packed, lengths, None, runs=True)


def test_an_edit_tries_brotli_on_its_segments_in_order_within_its_budget() -> None:
    """Brotli costs about four times zstd's CPU per byte, and the turn waits for it: an edit
    tries it on at most BROTLI_BUDGET bytes, segments first, in order, then runs."""
    big = text(5, 4000)
    assert len(big) > isolated.BROTLI_BUDGET
    packed = isolated.pack([big], with_brotli=True)
    assert record_kinds(packed, [len(big)]) == [isolated.ALONE]
    small = text(6)
    first = (text(7, 400) * 4)[: isolated.BROTLI_BUDGET - len(small) + 1]  # leaves too little
    kinds = record_kinds(isolated.pack([first, small], with_brotli=True), [len(first), len(small)])
    assert kinds == [isolated.BROTLI, isolated.ALONE]
    kinds = record_kinds(isolated.pack([small, first], with_brotli=True), [len(small), len(first)])
    assert kinds[0] == isolated.BROTLI
    pieces = [small, small]  # a run after segments that spent the budget: zstd only
    packed = isolated.pack([first, *pieces], runs=[(1, 2)], with_brotli=True)
    assert record_kinds(packed, [len(first), len(small), len(small)])[1:] in (
        [isolated.JOINED],
        [isolated.ALONE, isolated.ALONE],
    )


def brotli_record(data: bytes, *, crc: int | None = None, stream: bytes | None = None) -> bytes:
    made = brotli.compress(data, quality=5, lgwin=16) if stream is None else stream
    check = zlib.crc32(data) if crc is None else crc
    return bytes([isolated.BROTLI]) + varint(len(made)) + made + check.to_bytes(4, "big")


def test_bad_brotli_records_are_refused_before_more_is_read() -> None:
    data = text(6)
    good = brotli_record(data)
    assert isolated.unpack(good, [len(data)], None, with_brotli=True) == [data]
    bomb = brotli_record(b"\x00" * (64 << 20))  # 64 MiB of zeros in a few KiB (window 2^16)
    assert len(bomb) < 8 << 10
    with pytest.raises(DecompressedTooLargeError):
        isolated.unpack(bomb, [len(data)], None, with_brotli=True)
    stream = brotli.compress(data, lgwin=16)
    cases = {
        "crc": brotli_record(data, crc=zlib.crc32(data) ^ 1),
        "short": brotli_record(data)[:-1],
        "truncated stream": brotli_record(data, stream=stream[:-3]),
        "bytes after the stream": brotli_record(data, stream=stream + b"\x00"),
        "shorter than its op": brotli_record(data[:-1]),
        "not brotli": brotli_record(data, stream=b"\xff" * 12),
        # a window past what the segment needs: the decoder fills it before any output
        "window": brotli_record(data, stream=brotli.compress(data, quality=5, lgwin=24)),
    }
    for name, bad in cases.items():
        with pytest.raises(MalformedBodyError):  # noqa: PT012 (the case named if it passes)
            isolated.unpack(bad, [len(data)], None, with_brotli=True)
            pytest.fail(name)


def test_inflate_brotli_charges_each_chunk_and_stops_past_its_limit() -> None:
    charged: list[int] = []

    class Meter:
        def charge(self, size: int) -> None:
            charged.append(size)

    data = text(7, 3000)
    assert inflate_brotli(brotli.compress(data, lgwin=16), len(data), Meter()) == data
    assert sum(charged) == len(data)
    assert max(charged) <= 2 * (64 << 10)  # a step grows the output by one block at most past it
    with pytest.raises(DecompressedTooLargeError):
        inflate_brotli(brotli.compress(b"\x00" * (64 << 20), quality=5, lgwin=16), 1 << 20)
    with pytest.raises(MalformedBodyError):
        inflate_brotli(b"", 10)


@pytest.mark.parametrize("bits", range(10, 25))
def test_a_brotli_stream_may_declare_a_window_as_large_as_twice_its_output(bits: int) -> None:
    """The decoder fills its window before it hands out a byte: a 26-byte stream declaring
    16 MiB of a 10-byte segment cost 41 ms, charged to nothing (the work counted, the
    record's and the segment's bytes, kept it on the event loop). Its window is read from
    its first bits (RFC 7932 9.1) and refused past `MIN_BROTLI_WINDOW` or twice the output,
    before the decoder is made."""
    data = text(bits, 8)
    stream = brotli.compress(data, quality=5, lgwin=bits)
    assert brotli_window_bits(stream) == bits
    assert brotli_window_bits(brotli.compress(b"", lgwin=bits)) == bits
    for limit in (len(data), 1 << 16, 1 << 23):
        if 1 << bits <= max(MIN_BROTLI_WINDOW, 2 * limit):
            assert inflate_brotli(stream, limit) == data
        else:
            with pytest.raises(MalformedBodyError, match=f"window of 2\\^{bits}.*lgwin=16"):
                inflate_brotli(stream, limit)
    zeros = brotli.compress(b"\x00" * (20 << 20), quality=5, lgwin=24)
    with pytest.raises(MalformedBodyError, match="window"):
        inflate_brotli(zeros, 10)
    assert brotli_window_bits(b"") is None
    assert brotli_window_bits(bytes([0b0010001])) is None  # the large-window mark


def test_version_5_edits_have_a_header_byte_of_their_own() -> None:
    ops: list[Op] = [Inline(b""), Keep(1, 4), Inline(text(8))]
    base = "tb_" + "a" * 26
    five = wire.encode_isolated(base, ops, version=5)
    four = wire.encode_isolated(base, ops, version=4)
    assert five[:1] == b"\x05"
    assert four[:1] == compact.MARK
    assert len(five) < len(four)
    for body, version in ((five, 5), (four, 4)):
        header, blob = wire.read(body, 1 << 20)
        assert header.version == version
        assert wire.inline(header, blob, b"", None) == [b"", text(8)]
    # a version-4 header over kind-5 records: refused, not guessed
    header, _ = wire.read(four, 1 << 20)
    kind5 = bytes([isolated.RAW]) + isolated.pack([text(8)], with_brotli=True)
    assert kind5[1] == isolated.BROTLI
    with pytest.raises(MalformedBodyError):
        wire.inline(header, kind5, b"", None)
    with pytest.raises(ValueError, match="version 6"):
        compact.encode(base, [0], None, version=6)


def _metadata(size: int) -> bytes:
    """A brotli metadata block (RFC 7932 9.2: MNIBBLES 0, MSKIPBYTES 3), byte aligned,
    whose `size` bytes the decoder skips: input that produces no output."""
    bits = (3 << 1) | (3 << 4) | ((size - 1) << 6)
    return bits.to_bytes(4, "little") + b"\x00" * size


def _zeros_then_metadata(zeros: int, skipped: int) -> bytes:
    """A valid stream of `zeros` zero bytes (a few KiB of input), then `skipped` MiB of
    metadata, then an empty last meta-block: output first, most of the input after it."""
    made = brotli.Compressor(quality=5, lgwin=16)
    head: bytes = made.process(b"\x00" * zeros) + made.flush()  # flush: byte aligned after
    return head + b"".join(_metadata(1 << 20) for _ in range(skipped)) + b"\x03"


def test_inflate_brotli_hands_the_decoder_the_stream_a_chunk_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each step's work is bounded: given the whole stream at once, the binding copies the
    input it has not consumed at every step of bounded output (steps x input: a 32 MiB body
    of 64 MiB of zeros then metadata took ~10 s of CPU, 150 ms to decompress at once)."""
    handed: list[int] = []
    real = brotli.Decompressor

    class Spy:
        def __init__(self) -> None:
            self.inner = real()

        def process(self, data: bytes, output_buffer_limit: int) -> bytes:
            handed.append(len(data))
            out: bytes = self.inner.process(data, output_buffer_limit=output_buffer_limit)
            return out

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

    monkeypatch.setattr(brotli, "Decompressor", Spy)
    stream = _zeros_then_metadata(4 << 20, 2)
    assert inflate_brotli(stream, 4 << 20) == b"\x00" * (4 << 20)
    assert max(handed) <= 64 << 10
    assert sum(handed) == len(stream)  # each byte handed once
    for junk in (b"\x00", b"\x03" * 70_000):  # bytes after the end, past the first chunk too
        with pytest.raises(MalformedBodyError):
            inflate_brotli(stream + junk, 4 << 20)
    with pytest.raises(MalformedBodyError):  # cut short inside the metadata
        inflate_brotli(stream[: len(stream) - 100], 4 << 20)
    bomb = _zeros_then_metadata(8 << 20, 1)
    with pytest.raises(DecompressedTooLargeError):
        inflate_brotli(bomb, 1 << 20)


@pytest.mark.parametrize("version", [4, 5])
def test_a_json_header_line_of_a_compact_version_is_refused(version: int) -> None:
    """Versions 4 and 5 are written with a compact header only: a JSON line naming them (a
    version-5 record kind behind a JSON header, say) is refused, not read as version 3's."""
    line = b'{"v":%d,"b":null,"o":[5],"n":5}\n' % version
    with pytest.raises(MalformedBodyError, match="compact header"):
        wire.read(line + b"\x00hello", 1 << 20)
