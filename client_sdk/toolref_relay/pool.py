"""`Pool`: the relay's HTTP connections to the gateway (and the fallback).

Kept idle for less than the gateway keeps them (`toolref.wire.keepalive`): a turn written
on a connection the gateway closes at that moment for idleness would fail (a 502 for the
agent; a POST that may have reached the gateway is never sent twice): 4 s (`DEFAULT_SECONDS`)
until the gateway said its `keep_alive_seconds` (the start's check, `preflight`; its
capabilities asked at a turn, `capabilities`), then below it (`learnt`): a value below the
pool's makes a new connection pool for the requests after it, and the one before is closed
once the answers it streams ended (at most one per whole second below the default: a few).

A request whose body was read whole goes to httpcore with a stream that lets the body go
once it was written (`_Once`): httpcore keeps the request until its answer ends, and the
relay's turn gives its body's account back once its answer began (`app`), so a stream that
lasts minutes holds no body.

A request the gateway's close of an idle connection crossed (its keep-alive, a connection
limit, a stop: any moment) failed before any byte of an answer came: it is sent once more on
a new connection (`toolref.sending.kept` tells that failure apart), its body held until
then.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, Final

import httpx

from toolref.sending import kept
from toolref.wire import keepalive


class Pool(httpx.AsyncBaseTransport):
    """See the module docstring. `announced`: the gateway's `keep_alive_seconds`, when the
    start's check read them (None: not known yet). `keep`: the seconds an idle connection
    is kept now."""

    def __init__(self, announced: float | None = None) -> None:
        self.keep = keepalive.expiry(announced)
        self._pool = _direct(self.keep)
        self._streaming: dict[httpx.AsyncHTTPTransport, int] = {self._pool: 0}

    def learnt(self, announced: float | None) -> None:
        """The gateway closes a connection idle `announced` seconds (None: not said)."""
        keep = keepalive.expiry(announced)
        if keep >= self.keep:
            return
        before, self.keep = self._pool, keep
        self._pool = _direct(keep)
        self._streaming[self._pool] = 0
        if self._streaming[before] == 0:
            del self._streaming[before]
            # closed with no answer streaming: only idle connections to close
            _later(before.aclose())

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        pool = self._pool
        self._streaming[pool] += 1
        try:
            response = await _sent(pool, request)
        except BaseException:
            await self._ended(pool)
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)  # httpx's async transport's
        response.stream = _Ending(response.stream, lambda: self._ended(pool))
        return response

    async def _ended(self, pool: httpx.AsyncHTTPTransport) -> None:
        if pool not in self._streaming:  # closed already (`aclose`)
            return
        self._streaming[pool] -= 1
        if pool is not self._pool and self._streaming[pool] == 0:
            del self._streaming[pool]
            await pool.aclose()

    async def aclose(self) -> None:
        pools, self._streaming = list(self._streaming), {}
        for pool in pools:
            await pool.aclose()


def _direct(keep: float) -> httpx.AsyncHTTPTransport:
    """A pool reaching its hosts directly (`preflight.direct`), idle connections kept
    `keep` seconds, counted for `kept`."""
    return kept.counted(httpx.AsyncHTTPTransport(limits=httpx.Limits(keepalive_expiry=keep)))


async def _sent(pool: httpx.AsyncHTTPTransport, request: httpx.Request) -> httpx.Response:
    """`request`'s answer from `pool`; a request whose body was read whole (or has none)
    sent once more when a kept connection failed it before any byte of an answer came
    (`toolref.sending.kept`: the gateway closed that idle connection). A streaming body
    (a pass-through) went out as it came and is never sent twice."""
    try:
        body: bytes | None = request.content
    except httpx.RequestNotRead:  # streaming: nothing held whole
        body = None
    for last in (body is None, True):
        heard, token = kept.begun()
        try:
            return await pool.handle_async_request(_let_go(request, body))
        except kept.FAILURES:
            if last or not heard.unanswered_on_kept():
                raise
        finally:
            kept.ended(token)
    raise AssertionError("not reached: the last attempt returns or raises")


def _let_go(request: httpx.Request, body: bytes | None) -> httpx.Request:
    """`request`, its `body` (when read whole) in a stream that lets it go once written."""
    if not body:  # streaming (a pass-through), or none
        return request
    return httpx.Request(
        request.method,
        request.url,
        headers=request.headers,  # its Content-Length among them
        stream=_Once(body),
        extensions=request.extensions,
    )


class _Once(httpx.AsyncByteStream):
    """A body, held until it was handed on (once)."""

    def __init__(self, body: bytes) -> None:
        self._held = [body]

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while self._held:
            yield self._held.pop()


class _Ending(httpx.AsyncByteStream):
    """An answer's stream, `ended` awaited once when it is closed."""

    def __init__(self, inner: httpx.AsyncByteStream, ended: Callable[[], Awaitable[None]]):
        self._inner, self._ended = inner, ended
        self._told = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self._inner:
            yield piece

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            if not self._told:
                self._told = True
                await self._ended()


def _later(work: Coroutine[Any, Any, None]) -> None:
    task = asyncio.get_running_loop().create_task(work)
    _CLOSING.add(task)
    task.add_done_callback(_CLOSING.discard)


_CLOSING: Final[set[asyncio.Task[None]]] = set()  # pools closing, kept till they are
