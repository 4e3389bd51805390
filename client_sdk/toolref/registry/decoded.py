"""What an answer's body decodes to, counted as its raw pieces come (`bounded`'s reads): the
content codings httpx and httpx2 undo (`Content-Encoding`: gzip, deflate, br, zstd, listed
in the order applied and undone last first; `identity` and others left as they are, as
httpx leaves them), each undone in steps of at most `STEP` bytes of output, nothing kept
but counts. A bounded read counts these decoded bytes against its limit as well as the
bytes as they came: before, a 64 KiB gzip refusal that inflates to gigabytes was within
`MAX_PROBLEM_BYTES` as it came, and httpx then decoded it whole. Now it stops one step past
the limit, before httpx decodes anything. Linear in the body and in what it decodes to, up
to the limit; every stage's output (a coding inside another's) is counted against the
limit too, since httpx holds each stage's output of a piece at once.

Each stage mirrors the decoder httpx uses, so httpx's own read of a body counted whole
fails where this failed (`broken`: a corrupt body, httpx's `DecodingError` then) and
decodes no more than was counted: gzip and zlib data after its stream's end are ignored;
`deflate` is zlib's format, else (its first piece failing) raw deflate; zstd frames back
to back are one body; bytes after a brotli stream fail. A stage's output before a failed
first `deflate` attempt stays counted: more, never less, than httpx holds.
"""

from __future__ import annotations

import zlib
from typing import Any, Final, Protocol

import brotli
import zstandard

# The most output of one decoding step, and the most input handed to a decoder at once
# (given more, each bounded step would copy what is left of it: steps x input).
STEP: Final = 64 * 1024
# The most codings undone (httpx2's `MultiDecoder.max_decode_links`, which refuses more):
# a body with more is over its limit, not decoded (each stage costs up to the limit).
MAX_CODINGS: Final = 5
_ERRORS: Final = (zlib.error, brotli.error, zstandard.ZstdError)


class _Over(Exception):
    """A stage's output went past the limit."""


class _Stage(Protocol):
    def push(self, data: bytes | memoryview) -> None: ...


class _Out:
    """Where a stage's output goes: counted against `most`, then pushed on to `after` (the
    next stage; None: the last). The zstd writer's sink, so it refers to nothing that
    refers back to the writer (the C writer is not tracked by the cyclic collector)."""

    __slots__ = ("after", "most", "size")

    def __init__(self, after: _Stage | None, most: int) -> None:
        self.after, self.most, self.size = after, most, 0

    def push(self, data: bytes | memoryview) -> None:
        if not data:
            return
        self.size += len(data)
        if self.size > self.most:
            raise _Over
        if self.after is not None:
            self.after.push(data)

    def write(self, data: bytes) -> int:  # the zstd stream writer's sink
        self.push(data)
        return len(data)


class _Zlib:
    """gzip (`wbits` 31) or zlib's format (15), or raw deflate (-15): one stream, what
    follows its end ignored (httpx's `GZipDecoder`, `DeflateDecoder`)."""

    def __init__(self, out: _Out, wbits: int) -> None:
        self.out = out
        self.inflater = zlib.decompressobj(wbits)

    def push(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        for at in range(0, len(view), STEP):
            piece: bytes | memoryview = view[at : at + STEP]
            while not self.inflater.eof:
                out = self.inflater.decompress(piece, STEP)
                self.out.push(out)
                piece = self.inflater.unconsumed_tail
                if not piece and len(out) < STEP:
                    break  # this piece used up, no output held back


class _Deflate(_Zlib):
    """`deflate`: zlib's format; raw deflate when its first piece fails as that."""

    def __init__(self, out: _Out) -> None:
        super().__init__(out, zlib.MAX_WBITS)
        self.first = True

    def push(self, data: bytes | memoryview) -> None:
        first, self.first = self.first, False
        try:
            super().push(data)
        except zlib.error:
            if not first:
                raise
            self.inflater = zlib.decompressobj(-zlib.MAX_WBITS)
            super().push(data)


class _Brotli:
    def __init__(self, out: _Out) -> None:
        self.out = out
        self.decoder = brotli.Decompressor()

    def push(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        given = 0
        while True:
            piece = view[given : given + STEP] if self.decoder.can_accept_more_data() else view[:0]
            given += len(piece)
            out = self.decoder.process(piece, output_buffer_limit=STEP)
            self.out.push(out)
            if not out and given >= len(view):
                return
            if not out and not piece:  # takes no input, gives no output: never seen
                raise _Over  # so not counted short: over, not read


class _Zstd:
    def __init__(self, out: _Out) -> None:
        self.writer: Any = zstandard.ZstdDecompressor().stream_writer(
            out,  # type: ignore[arg-type]  # duck-typed: the writer only calls write()
            write_size=STEP,
            write_return_read=True,
        )

    def push(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        for at in range(0, len(view), STEP):
            self.writer.write(view[at : at + STEP])


def _stage(coding: str, out: _Out) -> _Stage:
    if coding == "gzip":
        return _Zlib(out, zlib.MAX_WBITS | 16)
    if coding == "deflate":
        return _Deflate(out)
    if coding == "br":
        return _Brotli(out)
    return _Zstd(out)


_CODINGS: Final = frozenset({"gzip", "deflate", "br", "zstd"})


class Decoded:
    """The decoded size of a body with `headers` (an httpx or httpx2 `Headers`), fed its
    raw pieces in order: `feed` says whether it is still at most `most` bytes, at every
    stage. Past it, or past `MAX_CODINGS` codings, it is over for good; a body that fails
    to decode (`broken`) is counted no further (httpx's read fails at the same place)."""

    def __init__(self, headers: Any, most: int) -> None:
        codings = [
            coding.strip().lower()
            for coding in headers.get_list("content-encoding", split_commas=True)
        ]
        codings = [coding for coding in codings if coding in _CODINGS]
        self.over = len(codings) > MAX_CODINGS
        self.broken = False
        self._first: _Stage | None = None
        if not self.over:
            after: _Stage | None = None
            for coding in codings:  # applied first, undone last: nearest the end
                after = _stage(coding, _Out(after, most))
            self._first = after

    def feed(self, piece: bytes) -> bool:
        """`piece` (the next raw bytes) decoded and counted; whether the body is still
        within the limit."""
        if self.over or self.broken or self._first is None or not piece:
            return not self.over
        try:
            self._first.push(piece)
        except _Over:
            self.over = True
        except _ERRORS:
            self.broken = True  # httpx's decoder fails here too and decodes no further
        return not self.over
