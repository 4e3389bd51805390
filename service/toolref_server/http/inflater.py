"""A request body inflated as it arrives: gzip or zstd undone chunk by chunk, within the
body's limit and the process's budget of bodies in flight (`toolref.asgi.budget`).

Each chunk of output (at most `OUT_CHUNK` bytes) is counted against the limit and charged to
the request's account before it is kept, so a bomb stops one chunk past the limit, and a
request past the budget at once. A body that ends inside its gzip member or zstd frame is
refused as truncated. Nothing here outlives the request: no object refers back to a
decompressor (see `Kept`).
"""

from __future__ import annotations

import zlib
from typing import Any, Final

from toolref.asgi.budget import Account, charge
from toolref.wire.compression import MAX_MEMBERS, Frames, ZstdStream
from toolref.wire.errors import MalformedBodyError

OUT_CHUNK: Final = 64 * 1024


class TooLarge(Exception):
    """The body inflates past its limit (the reader says which, and what to do)."""


class Kept:
    """Where inflated output goes: its chunks, counted against the body's limit and charged
    to the request's account before each is kept. It holds no reference to a decoder or the
    `Inflater`: once, the sink of zstandard's stream writer, whose C object the cyclic
    collector does not track, it made a cycle (writer -> sink -> writer) that was never
    freed (every zstd body leaked whole)."""

    __slots__ = ("__weakref__", "account", "limit", "parts", "size")

    def __init__(self, limit: int, account: Account | None) -> None:
        self.limit = limit
        self.account = account
        self.parts: list[bytes] = []
        self.size = 0

    def keep(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise TooLarge
        charge(self.account, len(data))
        self.parts.append(data)


class Inflater:
    """Incremental decompression that refuses to produce more than `limit` bytes, charging
    each chunk of output (at most 64 KiB) to `account` before keeping it. Nothing here
    outlives the request: the decompressor is referenced by this object alone. A zstd body
    may hold at most `compression.MAX_FRAMES` frames, and must end where a frame does; a
    gzip body at most `compression.MAX_MEMBERS` members (each costs an inflater of its own:
    before, 32 MiB of empty members took 1.7 s), and must end where one does."""

    def __init__(self, encoding: str, limit: int, account: Account | None = None) -> None:
        self.kept = Kept(limit, account)
        self.encoding = encoding
        self._gzip: Any = None
        self._zstd: ZstdStream | None = None
        self._members = Frames(MAX_MEMBERS)
        if encoding == "gzip":
            self._members.take("the gzip body", "gzip members")
            self._gzip = zlib.decompressobj(wbits=31)
        else:
            # A frame declaring a window past 8 MiB (RFC 9659) fails before it is allocated.
            self._zstd = ZstdStream()

    def feed(self, data: bytes) -> None:
        if self._zstd is not None:
            self._zstd.feed(data, self.kept.keep)  # MalformedBodyError when corrupt
            return
        try:
            self._feed_gzip(data)
        except zlib.error as exc:
            raise MalformedBodyError(
                f"the {self.encoding} body is corrupt ({exc}); compress the whole body "
                f"as one {self.encoding} stream, or send it uncompressed"
            ) from None

    def _feed_gzip(self, data: bytes) -> None:
        """`data` in pieces of at most OUT_CHUNK: given a larger one, each bounded step
        would copy what is left of it (`unconsumed_tail`: steps x input)."""
        view = memoryview(data)
        for at in range(0, len(data), OUT_CHUNK):
            self._feed_gzip_piece(view[at : at + OUT_CHUNK])

    def _feed_gzip_piece(self, data: bytes | memoryview) -> None:
        kept = self.kept
        while True:
            # Small steps: one huge step would briefly hold twice its output while resizing.
            step = min(kept.limit - kept.size + 1, OUT_CHUNK)
            out = self._gzip.decompress(data, step)
            kept.keep(out)
            data = self._gzip.unconsumed_tail
            if self._gzip.eof:
                # gzip allows several members back to back (RFC 1952).
                data = self._gzip.unused_data + data
                if not data:
                    return
                self._members.take("the gzip body", "gzip members")
                self._gzip = zlib.decompressobj(wbits=31)
            elif not data and len(out) < step:
                return  # input used up and no output held back

    def finish(self) -> bytes:
        if self._gzip is not None and not self._gzip.eof:
            raise MalformedBodyError(
                "the gzip body ends before its stream does (truncated); send the whole body"
            )
        if self._zstd is not None:
            self._zstd.finish()  # MalformedBodyError when cut mid-frame
        parts, self.kept.parts = self.kept.parts, []
        return b"".join(parts)
