"""zstd, gzip and brotli bodies and frames: inflated within a limit, and zstd frames compressed
against a raw-content dictionary both sides hold (an unguarded edit's inline bytes against
its base's segments, `toolref.edits.wire` version 1).

A frame against a dictionary must carry its checksum: a dictionary that differs by one byte
would otherwise inflate to plausible wrong text, and the checksum turns that into a clear
400 (`dictionary-mismatch`) the sender answers by resending.

Plain gzip and zstd bodies inflate here too, in chunks of at most 64 KiB, each counted
against the body's limit and charged to the request's
`toolref.asgi.budget.Account` (when given)
before it is kept. No compressor or decompressor outlives its call: each is made per body
and referenced by nothing but the call's frame (no sink object refers back to it). A caller
inflating many small frames in one call (an edit's records, `toolref.edits.isolated`) makes
one (`decompressor`) and hands it to each: making one costs more than a small frame's
inflating.

A zstd body cut mid-frame is refused as truncated, never read as its prefix (with several
frames, the prefix can be valid JSON): zstandard's bounded decoders never say whether a
frame ended, so whole bodies are walked frame by frame first (`whole_frames`: the frames'
sizes read from their headers, in C), and a body arriving in pieces is undone by the
standard library's decoder (`compression.zstd`, 3.14; `backports.zstd` before), whose `eof`
says where each frame ends (`ZstdStream`).
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable
from typing import Final, Protocol

import brotli
import zstandard

from toolref.wire.errors import (
    DecompressedTooLargeError,
    DictionaryMismatchError,
    MalformedBodyError,
)

if sys.version_info >= (3, 14):
    from compression import zstd as stdzstd
else:  # the same module, backported (a dependency before 3.14)
    from backports import zstd as stdzstd


class Meter(Protocol):
    """What inflated bytes are charged to before they are kept (a request's
    `toolref.asgi.budget.Account`)."""

    def charge(self, size: int) -> None: ...


def _charge(meter: Meter | None, size: int) -> None:
    if meter is not None:
        meter.charge(size)


_CHUNK: Final = 64 * 1024
# The largest window a zstd frame may declare (RFC 9659 3: an encoder of the `zstd` content
# coding must not use more, so no valid body needs more). The decoder refuses a frame
# declaring more before allocating its window; zstd's own default most, 128 MiB, let a 1 MiB
# body make the decoder touch 64 MiB of window, charged to no budget.
MAX_WINDOW: Final = 8 * 1024 * 1024


# The smallest window a brotli stream may always declare (RFC 7932 9.1: WBITS 16; what the
# senders write, `toolref.edits.isolated.BROTLI_WINDOW`); a larger one only as large as
# twice the output read. The decoder fills its window before it hands out a byte, so a
# 200-byte stream declaring 16 MiB (WBITS 24) of a 10-byte segment cost 41 ms, charged to
# no budget and on the event loop (the work counted was the record's and the segment's).
MIN_BROTLI_WINDOW: Final = 1 << 16

# The most frames a zstd body arriving in pieces may hold (`ZstdStream`; RFC 8878 lets frames,
# skippable ones too, follow one another). Each costs a decoder of its own (9 us measured:
# made, fed, freed) and a copy of what is left of its 64 KiB piece: 1024 frames cost 9 ms
# (about 20 at most, each leaving 64 KiB), where 32 MiB of 9-byte frames would take 33 s.
# Encoders write one frame a body (the zstd CLI, Python's and Node's zstd), a few when
# bodies are joined: 1024 frames in a body at the 64 MiB inflated limit are frames of 64 KiB.
MAX_FRAMES: Final = 1024
# The most gzip members a body may hold (RFC 1952 lets members follow one another), for the
# same reason: each costs an inflater of its own (about 1 us: made, fed, freed), so 32 MiB
# of empty 20-byte members took 1.7 s. Encoders write one member a body (gzip, zlib, a
# browser's CompressionStream), a few when bodies are joined.
MAX_MEMBERS: Final = MAX_FRAMES


class Frames:
    """How many more zstd frames or gzip members may come: `most` for one body, or for an
    edit's records together (`toolref.edits.isolated.unpack`). Each frame or member takes
    one before it is inflated; past `most`, `MalformedBodyError` naming `fix`."""

    __slots__ = ("fix", "left", "most")

    def __init__(self, most: int = MAX_FRAMES, fix: str = "") -> None:
        self.most = self.left = most
        self.fix = fix

    def take(self, what: str, kind: str = "zstd frames") -> None:
        """One more frame (`kind`: what it is) of `what`; past the bound, refused."""
        self.left -= 1
        if self.left < 0:
            one = "frame" if kind.startswith("zstd") else "member"
            fix = self.fix or f"compress it as one {one} (or a few), or send it uncompressed"
            raise MalformedBodyError(f"{what} holds more than {self.most} {kind}; {fix}")


def zstd_problem(exc: Exception, what: str = "the zstd body") -> str:
    """What went wrong with a zstd body that failed to decode, and the fix."""
    if "too much memory" in str(exc):  # the frame's window is past MAX_WINDOW
        return (
            f"{what} declares a window over 8 MiB, the most of Content-Encoding: zstd "
            "(RFC 9659); compress it with a window of at most 8 MiB (no --long, no level "
            "above 19), or send it uncompressed"
        )
    reason = str(exc).rpartition("Zstd error message: ")[2]
    return (
        f"{what} is corrupt ({reason}); compress the whole body as one zstd stream, or send "
        "it uncompressed"
    )


def _truncated(what: str) -> MalformedBodyError:
    return MalformedBodyError(
        f"{what} ends before its zstd frame does (truncated); send the whole body"
    )


def whole_frames(
    body: bytes | memoryview, what: str = "the zstd body", frames: Frames | None = None
) -> int:
    """How many zstd frames `body` is, once it is known to be whole frames back to back
    (RFC 8878: skippable ones too), none cut short: each frame's size read from its header
    and block headers (`get_frame_size`, in C: about 80 ns a frame), nothing inflated.
    Linear in the body's frames and blocks, each taken from `frames` (by default
    `MAX_FRAMES` for the body); `MalformedBodyError` when cut short, not frames, or more
    than `frames` allows."""
    if not body:
        return 0
    frames = Frames() if frames is None else frames
    try:
        frames.take(what)
        at = stdzstd.get_frame_size(body)  # most bodies are one frame: no view made
        count = 1
        view = memoryview(body)
        while at < len(view):
            frames.take(what)
            at += stdzstd.get_frame_size(view[at:])
            count += 1
    except stdzstd.ZstdError as exc:
        if "Src size is incorrect" in str(exc):
            raise _truncated(what) from None
        raise MalformedBodyError(zstd_problem(exc, what)) from None
    return count


# Output a step: the decoder's first output block (CPython's `_BlocksOutputBuffer`, 32 KiB),
# so a step's bytes are handed over as written; a 64 KiB step joins two blocks, a copy
# (3-5% of inflating a 16 MiB body).
_STEP: Final = 32 * 1024
_WINDOW: Final[dict[int, int]] = {
    stdzstd.DecompressionParameter.window_log_max: MAX_WINDOW.bit_length() - 1
}


class ZstdStream:
    """A zstd body undone as it arrives, frame after frame (RFC 8878: skippable ones too),
    each step's output at most 32 KiB, handed to `keep` (which counts it against the body's
    limit and raises past it). `finish` refuses a body that ends inside a frame; past
    `MAX_FRAMES` frames, or a window past `MAX_WINDOW`, `MalformedBodyError` as it comes.
    One decoder a frame (the standard library's cannot start over; its `eof` says where a
    frame ends), fed pieces of at most 64 KiB, so what a frame's end leaves of one (copied
    for the next frame) is at most that. Linear in the body and the output; `MAX_FRAMES`
    bounds what the frames cost."""

    __slots__ = ("_decoder", "_frames", "what")

    def __init__(self, what: str = "the zstd body") -> None:
        self._decoder: stdzstd.ZstdDecompressor | None = None
        self._frames = 0
        self.what = what

    def feed(self, data: bytes | memoryview, keep: Callable[[bytes], object]) -> None:
        """`data`, the body's next bytes, undone into `keep`."""
        view = memoryview(data)
        try:
            for at in range(0, len(view), _CHUNK):
                self._piece(view[at : at + _CHUNK], keep)
        except stdzstd.ZstdError as exc:
            raise MalformedBodyError(zstd_problem(exc, self.what)) from None

    def _piece(self, data: bytes | memoryview, keep: Callable[[bytes], object]) -> None:
        while data:
            decoder = self._decoder
            if decoder is None:
                self._frames += 1
                if self._frames > MAX_FRAMES:
                    raise MalformedBodyError(
                        f"{self.what} holds more than {MAX_FRAMES} zstd frames; compress it "
                        "as one frame (or a few), or send it uncompressed"
                    )
                decoder = self._decoder = stdzstd.ZstdDecompressor(options=_WINDOW)
            out = decoder.decompress(data, _STEP)
            while out:
                keep(out)
                more = not decoder.eof and not decoder.needs_input  # held back: the bound
                out = decoder.decompress(b"", _STEP) if more else b""
            if not decoder.eof:
                return  # this piece used up inside the frame
            data = decoder.unused_data  # the next frame's bytes, if any
            self._decoder = None

    def finish(self) -> None:
        """The body ended: `MalformedBodyError` when it ended inside a frame."""
        if self._decoder is not None:
            raise _truncated(self.what)


def _keep(  # noqa: PLR0917  (an inflater's state, passed on)
    parts: list[bytes], chunk: bytes, size: int, limit: int, meter: Meter | None, what: str
) -> int:
    """`chunk` of what `what` inflates to, kept in `parts` once it is within `limit` and
    charged to `meter`; the size inflated so far."""
    size += len(chunk)
    if size > limit:
        raise DecompressedTooLargeError(
            f"{what} inflates past the limit of {limit} bytes; send fewer messages", limit=limit
        )
    _charge(meter, len(chunk))
    parts.append(chunk)
    return size


def _dictionary(data: bytes) -> zstandard.ZstdCompressionDict:
    return zstandard.ZstdCompressionDict(data, dict_type=zstandard.DICT_TYPE_RAWCONTENT)


def decompressor(dictionary: bytes = b"") -> zstandard.ZstdDecompressor:
    """A zstd decompressor, against raw-content `dictionary` when given, for `inflate` and
    `decompress` to use over the frames of one call (one at a time); a frame declaring a
    window past `MAX_WINDOW` fails before its window is allocated."""
    if not dictionary:
        return zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW)
    return zstandard.ZstdDecompressor(dict_data=_dictionary(dictionary), max_window_size=MAX_WINDOW)


def compress(body: bytes, dictionary: bytes, level: int) -> bytes:
    """`body` as one zstd frame, with checksum, against raw-content `dictionary`."""
    compressor = zstandard.ZstdCompressor(
        level=level, dict_data=_dictionary(dictionary), write_checksum=True
    )
    return compressor.compress(body)


def _fix(name: str) -> str:
    return (
        f"compress the body with the dictionary of {name} as one zstd frame with its size "
        "and checksum, or send it without Content-Encoding"
    )


def check_frame(body: bytes, limit: int, name: str) -> int:
    """The size `body` (compressed against the dictionary of `name`) declares, once it is
    known to be at most `limit` and the frame carries a checksum: checked before the
    dictionary is built, so a body over the limit costs no work."""
    return frame_size(body, limit, _fix(name))


def frame_size(frame: bytes, limit: int, fix: str, less: str = "send fewer messages") -> int:
    """The size a zstd `frame` declares, at most `limit`, with a checksum declared too (a
    wrong dictionary is then told apart), checked before any byte is inflated; `fix`: what
    the sender should do when the frame is not one (`DictionaryMismatchError`); `less`:
    when it declares more than `limit` (`DecompressedTooLargeError`)."""
    try:
        params = zstandard.get_frame_parameters(frame)
    except zstandard.ZstdError as exc:
        raise DictionaryMismatchError(f"the body is not a zstd frame ({exc}); {fix}") from None
    if not params.has_checksum or params.content_size == zstandard.CONTENTSIZE_UNKNOWN:
        raise DictionaryMismatchError(
            f"the zstd frame does not declare its size and checksum, without which a wrong "
            f"dictionary could not be told apart; {fix}"
        )
    if params.content_size > limit:
        raise DecompressedTooLargeError(
            f"the zstd frame inflates to {params.content_size} bytes, over the limit of "
            f"{limit}; {less}",
            limit=limit,
        )
    size: int = params.content_size
    return size


def decompress(
    body: bytes,
    dictionary: bytes,
    limit: int,
    name: str,
    account: Meter | None = None,
    *,
    using: zstandard.ZstdDecompressor | None = None,
) -> bytes:
    """Inflate a body compressed by `compress` against `dictionary` (the dictionary of
    `name`, named in errors). The frame must declare its size, at most `limit` (see
    `check_frame`), charged to `account` before inflating; it must be whole, alone, and
    match its checksum. `using`: `decompressor(dictionary)`, made once by the caller."""
    size = check_frame(body, limit, name)
    _charge(account, size)
    inflater = (using or decompressor(dictionary)).decompressobj()
    try:
        data = inflater.decompress(body)
    except zstandard.ZstdError as exc:
        raise DictionaryMismatchError(
            f"the zstd body does not inflate with the dictionary of {name} ({exc}); {_fix(name)}"
        ) from None
    if not inflater.eof or inflater.unused_data or len(data) != size:
        raise DictionaryMismatchError(
            "the zstd body is not one whole frame (cut short, or followed by more bytes); "
            f"{_fix(name)}"
        )
    return data


def inflate(
    body: bytes,
    limit: int,
    account: Meter | None = None,
    *,
    using: zstandard.ZstdDecompressor | None = None,
    frames: Frames | None = None,
) -> bytes:
    """A plain zstd body (no dictionary), producing at most `limit` bytes, each chunk
    charged to `account` before it is kept. `using`: `decompressor()`, made once by the
    caller. Whole frames only (`whole_frames`, walked before any is inflated): a body cut
    mid-frame is refused, not read as its prefix. At most `frames` allows (by default
    `MAX_FRAMES`; an edit's records share one bound, a split record holding a frame a
    piece): the walk takes one Python step a frame (150 ns; before the bound, 64 MiB of
    10-byte frames took 1.35 s)."""
    whole_frames(body, frames=frames)
    reader = (using or decompressor()).stream_reader(body, read_across_frames=True)
    parts: list[bytes] = []
    size = 0
    try:
        while chunk := reader.read(_CHUNK):
            size = _keep(parts, chunk, size, limit, account, "the zstd body")
    except zstandard.ZstdError as exc:
        raise MalformedBodyError(zstd_problem(exc)) from None
    return b"".join(parts)


def inflate_gzip(
    body: bytes, limit: int, account: Meter | None = None, *, members: Frames | None = None
) -> bytes:
    """A gzip body (members back to back allowed, RFC 1952: at most `members` allows, by
    default `MAX_MEMBERS`), producing at most `limit` bytes: each step asks for at most
    what is left under the limit, so a bomb stops one chunk past it. Each chunk is charged
    to `account` before it is kept. The body is handed to the inflater 64 KiB at a time:
    given all of it, each step of bounded output copied what was left of the input
    (`unconsumed_tail`: steps x input, half a second for 16 MiB of zeros then random
    bytes). Linear in the body and the output."""
    members = Frames(MAX_MEMBERS) if members is None else members
    members.take("the gzip body", "gzip members")
    inflater = zlib.decompressobj(wbits=31)
    view = memoryview(body)
    parts: list[bytes] = []
    size = given = 0
    data: bytes | memoryview = b""
    try:
        while True:
            if not data and given < len(body):
                data = view[given : given + _CHUNK]
                given += len(data)
            out = inflater.decompress(data, min(limit - size + 1, _CHUNK))
            size = _keep(parts, out, size, limit, account, "the gzip body")
            data = inflater.unconsumed_tail
            if inflater.eof:
                data = inflater.unused_data + data
                if not data and given >= len(body):
                    break
                members.take("the gzip body", "gzip members")
                inflater = zlib.decompressobj(wbits=31)
            elif not data and not out and given >= len(body):
                raise MalformedBodyError(
                    "the gzip body ends before its stream does (truncated); send the whole body"
                )
    except zlib.error as exc:
        raise MalformedBodyError(
            f"the gzip body is corrupt ({exc}); compress the whole body as one gzip stream, "
            "or send it uncompressed"
        ) from None
    return b"".join(parts)


def inflate_brotli(stream: bytes, limit: int, account: Meter | None = None) -> bytes:
    """One brotli stream (RFC 7932; its built-in dictionary only) producing at most `limit`
    bytes: the decoder's output grows by at most one chunk past what is left under the
    limit per step, so a bomb stops there; each chunk is charged to `account` before it is
    kept. The stream is handed to the decoder a chunk at a time: given all of it, the
    binding copies what it has not consumed at each step of bounded output (steps x input,
    seconds for a body of zeros then metadata). Bytes after the stream's end, or a stream
    cut short, are malformed. Linear in the stream and the output: the decoder fills its
    window before its first output, so a stream may declare at most `MIN_BROTLI_WINDOW`
    or twice `limit` (and never past 16 MiB, 24 bits: this decoder sets no large-window
    flag)."""
    bits = brotli_window_bits(stream)
    if bits is not None and 1 << bits > max(MIN_BROTLI_WINDOW, 2 * limit):
        raise MalformedBodyError(
            f"the brotli stream declares a window of 2^{bits} bytes for at most {limit} bytes "
            f"of output; compress with a window of at most 2^16 (lgwin=16) or twice the "
            "output's size"
        )
    decoder = brotli.Decompressor()
    view = memoryview(stream)
    parts: list[bytes] = []
    size = given = 0
    try:
        while not decoder.is_finished():
            data = view[given : given + _CHUNK] if decoder.can_accept_more_data() else view[:0]
            given += len(data)
            out = decoder.process(data, output_buffer_limit=min(limit - size + 1, _CHUNK))
            size = _keep(parts, out, size, limit, account, "the brotli stream")
            stuck = not data and (given == len(stream) or not decoder.can_accept_more_data())
            if not out and stuck and not decoder.is_finished():
                raise MalformedBodyError(
                    "the brotli stream ends before it does (truncated); send the whole stream"
                )
    except brotli.error as exc:
        raise MalformedBodyError(
            f"the brotli stream is corrupt ({exc}), or bytes follow its end; send one whole "
            "stream per record"
        ) from None
    if given < len(stream):
        raise MalformedBodyError(
            "bytes follow the brotli stream's end; send one whole stream per record"
        )
    return b"".join(parts)


def brotli_window_bits(stream: bytes) -> int | None:
    """The window a brotli stream declares, in bits (RFC 7932 9.1: its first 1, 4 or 7 bits,
    least significant first); None where it declares none this decoder reads (an empty
    stream; the large-window extension's mark), which the decoder refuses. O(1)."""
    if not stream:
        return None
    first = stream[0]
    if not first & 1:
        return 16
    if n := first >> 1 & 7:
        return 17 + n
    m = first >> 4 & 7
    if m == 1:
        return None
    return 8 + m if m else 17
