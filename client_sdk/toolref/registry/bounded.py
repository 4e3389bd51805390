"""Reading an HTTP answer whole, bounded in bytes and in time for the whole read, whatever
its pace: a problem a sender reads to decide what it does next (`read_problem`: left a
stream past `MAX_PROBLEM_BYTES` or `PROBLEM_READ_S`, every byte it had kept), and an answer
read whole to be understood (`read_within`: the registry client's, the relay's start check,
`toolref doctor`; None past its bounds, the connection closed). A body that trickles or
never ends costs neither memory nor a hang. The bytes are counted as they came and as
they decode (`Content-Encoding`, `toolref.registry.decoded`): a small body that inflates
past the bound is over it too, stopped before httpx decodes it. On `httpx.Response`s and `httpx2`'s
(`toolref.registry.packages`). One home: the registry client and every sender read through
it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final

import httpx

from toolref.registry.decoded import Decoded
from toolref.registry.packages import NOT_READ, AsyncByteStream2, SyncByteStream2

# A problem document toolref writes is < 2 KiB. Counted as it came and as it decodes
# (`Content-Encoding`, `toolref.registry.decoded`): a small gzip bomb is over it too.
MAX_PROBLEM_BYTES: Final = 64 * 1024
# The longest the SDK reads one refusal's body to tell what it is, in seconds, the whole read
# whatever its pace (JS's `PROBLEM_READ_MS`): past it the body is handed on as it comes, or
# closed when the exchange drops it. Async: exactly this; sync: checked between two reads,
# so at most this plus one read timeout (httpx's, per read: 5 s unless the client sets one).
PROBLEM_READ_S: Final = 5.0


def read_problem(response: Any, within: float | None = None, most: int | None = None) -> None:
    """`response` read whole when its body is at most `most` bytes (`MAX_PROBLEM_BYTES`:
    toolref's problems are < 2 KiB) and comes within `within` seconds (`PROBLEM_READ_S`, the
    whole read whatever its pace: checked between two reads, so at most that plus one read
    timeout); else it is left a stream holding every byte it had (no problem of toolref's:
    the exchange hands it on, or closes it), at most that much read of it. One read or left
    already: as it is."""
    most = MAX_PROBLEM_BYTES if most is None else most
    if _declared(response, most) is False or _done(response):
        return
    late = time.monotonic() + (PROBLEM_READ_S if within is None else within)
    pieces: list[bytes] = []
    size = 0  # a running total: a stream of tiny pieces costs one step each
    decoded = Decoded(response.headers, most)  # what httpx's read would decode it to
    rest: Iterator[bytes] = iter(response.stream)
    for piece in rest:
        pieces.append(piece)
        size += len(piece)
        if size > most or not decoded.feed(piece) or time.monotonic() >= late:
            break
    else:
        response.stream = _Replayed(_whole(pieces), iter(()), response.stream)
        response.read()
        return
    response.stream = _Replayed(pieces, rest, response.stream, left=True)


async def aread_problem(
    response: Any, within: float | None = None, most: int | None = None
) -> None:
    """Async `read_problem`, the deadline exact: a read pending at it is handed on with the
    stream (its bytes first of the rest), or cancelled when the stream is closed; one
    cancelled or failed (the caller's task cancelled) is cancelled and awaited."""
    most = MAX_PROBLEM_BYTES if most is None else most
    if _declared(response, most) is False or _done(response):
        return
    loop = asyncio.get_running_loop()
    late = loop.time() + (PROBLEM_READ_S if within is None else within)
    pieces: list[bytes] = []
    size = 0
    decoded = Decoded(response.headers, most)
    rest: AsyncIterator[bytes] = aiter(response.stream)
    pending: asyncio.Future[bytes | None] | None = None
    try:
        while size <= most and not decoded.over:
            pending = asyncio.ensure_future(_piece(rest))
            await asyncio.wait((pending,), timeout=max(late - loop.time(), 0))
            if not pending.done():
                break  # late: handed on with the read still pending
            piece = pending.result()
            pending = None
            if piece is None:
                response.stream = _Replayed(_whole(pieces), _none(), response.stream)
                await response.aread()
                return
            pieces.append(piece)
            size += len(piece)
            decoded.feed(piece)
    except BaseException:
        await _cancelled(pending)
        raise
    response.stream = _Replayed(pieces, rest, response.stream, left=True, pending=pending)


def _whole(pieces: list[bytes]) -> list[bytes]:
    """A body read whole (at most the read's bound) as one piece, for httpx to decode: httpx
    0.28.1's zstd decoder takes a frame ending where a piece does for the body's end, and
    fails the next piece (`DecodingError`: "cannot use a decompressobj multiple times"),
    where RFC 8878 lets frames follow one another (a proxy's). In one piece a frame ends
    inside it, and that decoder reads on. One copy of at most the bound, which httpx's own
    read makes anyway."""
    return [b"".join(pieces)] if len(pieces) > 1 else pieces


def _done(response: Any) -> bool:
    """`response` read whole already, or left a stream by `read_problem` (not read twice)."""
    stream = getattr(response, "stream", None)
    return is_read(response) or (isinstance(stream, _Replayed) and stream.left)


async def _piece(stream: AsyncIterator[bytes]) -> bytes | None:
    """The next piece of `stream`; None at its end."""
    return await anext(stream, None)


async def _cancelled(pending: asyncio.Future[bytes | None] | None) -> None:
    """`pending` (a read of a stream) cancelled and ended, whatever it raised."""
    if pending is None:
        return
    pending.cancel()
    await asyncio.wait((pending,))
    if not pending.cancelled():
        pending.exception()  # retrieved: a read that failed as it was cancelled


async def aread_within(response: Any, within: float, most: int) -> bytes | None:
    """The body of `response` (streamed, not read yet) when it is at most `most` bytes and
    comes within `within` seconds of its head, the whole read whatever its pace
    (`aread_problem`); else None, the response closed, at most `most` bytes read of it. For
    an answer read whole to be understood (a relay's start check, `toolref doctor`, the
    registry client): an endless or trickled body costs neither memory nor a hang."""
    try:
        await aread_problem(response, within, most)
        if is_read(response):
            return bytes(response.content)
    finally:
        await response.aclose()
    return None


def read_within(response: Any, within: float, most: int) -> bytes | None:
    """Sync `aread_within` (`read_problem`: at most `within` plus one read timeout)."""
    try:
        read_problem(response, within, most)
        if is_read(response):
            return bytes(response.content)
    finally:
        response.close()
    return None


def _declared(response: Any, most: int) -> bool | None:
    """Whether the body's `Content-Length` is within `most`; None: none said."""
    length = response.headers.get("content-length", "").strip()
    return int(length) <= most if length.isdigit() else None


async def _none() -> AsyncIterator[bytes]:
    return
    yield b""  # pragma: no cover - makes this an async generator


def is_read(response: httpx.Response) -> bool:
    """The answer was read whole (a streamed answer not yet read is not); an `httpx` or an
    `httpx2` one."""
    try:
        response.content  # noqa: B018 - raises until the body has been read whole
    except NOT_READ:
        return False
    return True


class _Replayed(httpx.SyncByteStream, httpx.AsyncByteStream, SyncByteStream2, AsyncByteStream2):
    """A response stream of which `pieces` were read: they, then what `pending` (a read of
    it begun) gives, then the `rest` of it. `left`: left a stream by `read_problem` (too
    long, or late). Closed, a read still pending is cancelled first."""

    def __init__(
        self,
        pieces: list[bytes],
        rest: Any,
        stream: Any,
        *,
        left: bool = False,
        pending: asyncio.Future[bytes | None] | None = None,
    ) -> None:
        self.pieces, self.rest, self.stream = pieces, rest, stream
        self.left, self.pending = left, pending

    def __iter__(self) -> Iterator[bytes]:
        yield from self.pieces
        yield from self.rest

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece
        if self.pending is not None:
            pending, self.pending = self.pending, None
            begun = await pending
            if begun is None:
                return
            yield begun
        async for piece in self.rest:
            yield piece

    def close(self) -> None:
        self.stream.close()

    async def aclose(self) -> None:
        pending, self.pending = self.pending, None
        await _cancelled(pending)
        await self.stream.aclose()
