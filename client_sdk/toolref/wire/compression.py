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
"""

from __future__ import annotations

import zlib
from typing import Final, Protocol

import brotli
import zstandard

from toolref.wire.errors import (
    DecompressedTooLargeError,
    DictionaryMismatchError,
    MalformedBodyError,
)


class Meter(Protocol):
    """What inflated bytes are charged to before they are kept (a request's
    `toolref.asgi.budget.Account`)."""

    def charge(self, size: int) -> None: ...


def _charge(meter: Meter | None, size: int) -> None:
    if meter is not None:
        meter.charge(size)


_CHUNK: Final = 64 * 1024


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
    `decompress` to use over the frames of one call (one at a time)."""
    if not dictionary:
        return zstandard.ZstdDecompressor()
    return zstandard.ZstdDecompressor(dict_data=_dictionary(dictionary))


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
) -> bytes:
    """A plain zstd body (no dictionary), producing at most `limit` bytes, each chunk
    charged to `account` before it is kept. `using`: `decompressor()`, made once by the
    caller."""
    reader = (using or decompressor()).stream_reader(body, read_across_frames=True)
    parts: list[bytes] = []
    size = 0
    try:
        while chunk := reader.read(_CHUNK):
            size = _keep(parts, chunk, size, limit, account, "the zstd body")
    except zstandard.ZstdError as exc:
        raise MalformedBodyError(
            f"the zstd body is corrupt ({exc}); compress the whole body as one zstd stream, "
            "or send it uncompressed"
        ) from None
    return b"".join(parts)


def inflate_gzip(body: bytes, limit: int, account: Meter | None = None) -> bytes:
    """A gzip body (members back to back allowed, RFC 1952), producing at most `limit`
    bytes: each step asks for at most what is left under the limit, so a bomb stops one
    chunk past it. Each chunk is charged to `account` before it is kept. The body is
    handed to the inflater 64 KiB at a time: given all of it, each step of bounded output
    copied what was left of the input (`unconsumed_tail`: steps x input, half a second for
    16 MiB of zeros then random bytes). Linear in the body and the output."""
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
    cut short, are malformed. Linear in the stream and the output; the decoder's window is
    at most 16 MiB (24 bits without the large-window flag, which this decoder does not
    set)."""
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
