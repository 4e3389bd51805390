"""`PlainTransport`: the asyncio registry client's HTTP/1.1 over plain `http://`, on asyncio
streams and h11, connections kept alive; anything else goes to httpx's own transport.

A chat backend's middleware makes one registry call per request (`POST /v1/edits:apply`),
so the client's own cost is on every request's clock. Measured on one connection here
(`make bench`'s chat-backend path; a microbenchmark of a 800-byte POST and 1 KB answer):
httpx's `AsyncHTTPTransport` (httpcore over anyio) costs about 600 us of CPU a request, h11
on asyncio streams about 200. The client's layers above the transport (timeouts, content
decoding, the `Response`) stay httpx's.

Scope: `http://` URLs only (TLS, proxies and HTTP/2 stay httpx's: `fallback`). Each request
takes an idle connection to its host or opens one; an answer read to its end gives the
connection back (at most `MAX_IDLE` kept per host, each at most `KEEP_ALIVE` seconds, and
only when nothing came past the answer); one that something came on while idle is not used.
A kept connection the server closed meanwhile fails before any byte of an answer came: the
request goes once more on a new one (the registry's calls are idempotent: an edit applied
twice keeps the same recipe; `session` retries them on any transport error anyway); once any
byte came, it is an error, never a resend.
Errors are httpx's (`ConnectError`, `ReadTimeout`, `RemoteProtocolError`, ...), so callers'
retries see what they saw before. Answers are read whole, the body handed to httpx as the
server encoded it: at most `MAX_ANSWER_BYTES` of it, and, from the answer's first byte, the
whole within the request's read timeout (not per read: a trickle would hold the caller for
ever); past either, `ReadError` or `ReadTimeout` and the connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Final

import h11
import httpx

from toolref.wire import keepalive

MAX_IDLE: Final = 16  # kept-alive connections per host
# Seconds a connection is kept idle: below the receivers' (`toolref.wire.keepalive`).
KEEP_ALIVE: Final = keepalive.DEFAULT_SECONDS

# The most of one answer's body read (the JS client's `maxAnswerBytes`): a registry's answers
# are bounded by its limits (32 MiB a body, 64 MiB inflated, by default), so this is twice
# the inflated default; past it a flood costs no more memory.
MAX_ANSWER_BYTES: Final = 128 * 2**20

_READ: Final = 1 << 16


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0

    def usable(self, now: float) -> bool:
        """Kept briefly, and nothing came while idle (no EOF, no byte: a server's `408`
        before it closes must not read as the next request's answer)."""
        unread = getattr(self.reader, "_buffer", b"")  # asyncio's own buffer (CPython)
        return now - self.idle_since < KEEP_ALIVE and not unread and not self.reader.at_eof()

    def close(self) -> None:
        self.writer.close()


class _Body(httpx.AsyncByteStream):
    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.data


class PlainTransport(httpx.AsyncBaseTransport):
    """See the module docstring."""

    def __init__(self, fallback: httpx.AsyncBaseTransport | None = None) -> None:
        limits = httpx.Limits(keepalive_expiry=KEEP_ALIVE)
        self.fallback = (
            fallback if fallback is not None else httpx.AsyncHTTPTransport(limits=limits)
        )
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http":
            return await self.fallback.handle_async_request(request)
        timeouts = request.extensions.get("timeout", {})
        key = (url.host, url.port or 80)
        content = await request.aread()
        for fresh in (False, True):
            connection = None if fresh else self._take(key)
            reused = connection is not None
            if connection is None:
                connection = await self._open(key, timeouts.get("connect"))  # seconds
            try:
                response = await self._exchange(connection, request, content, timeouts)
            except _Stale:
                connection.close()
                if reused:
                    continue  # a kept connection the server closed: once more, on a new one
                raise httpx.RemoteProtocolError("the server closed the connection") from None
            except BaseException:
                connection.close()
                raise
            self._give_back(key, connection)
            return response
        raise httpx.RemoteProtocolError("the server closed the connection")  # not reached

    async def aclose(self) -> None:
        self._closed = True  # a connection in use is closed when its answer ends
        idle = [connection for connections in self._idle.values() for connection in connections]
        self._idle.clear()
        for connection in idle:
            connection.close()
        for connection in idle:
            with contextlib.suppress(OSError):
                await connection.writer.wait_closed()
        await self.fallback.aclose()

    def _take(self, key: tuple[str, int]) -> _Connection | None:
        connections = self._idle.get(key)
        now = time.monotonic()
        while connections:
            connection = connections.pop()
            if connection.usable(now):
                return connection
            connection.close()
        return None

    def _give_back(self, key: tuple[str, int], connection: _Connection) -> None:
        state = connection.h11
        done = state.our_state is h11.DONE and state.their_state is h11.DONE
        if done and not state.trailing_data[0] and not self._closed:  # nothing past the answer
            state.start_next_cycle()
            connections = self._idle.setdefault(key, [])
            if len(connections) < MAX_IDLE:
                connection.idle_since = time.monotonic()
                connections.append(connection)
                return
        connection.close()

    async def _open(self, key: tuple[str, int], seconds: float | None) -> _Connection:
        try:
            async with asyncio.timeout(seconds):
                reader, writer = await asyncio.open_connection(*key, limit=_READ)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"connecting to {key[0]}:{key[1]} timed out") from exc
        except OSError as exc:
            raise httpx.ConnectError(f"cannot connect to {key[0]}:{key[1]}: {exc}") from exc
        return _Connection(reader, writer)

    async def _exchange(
        self,
        connection: _Connection,
        request: httpx.Request,
        content: bytes,
        timeouts: dict[str, float | None],
    ) -> httpx.Response:
        state = connection.h11
        head = h11.Request(
            method=request.method,
            target=request.url.raw_path,
            headers=list(request.headers.raw),
        )
        try:
            data = state.send(head) or b""
            if content:
                data += state.send(h11.Data(data=content)) or b""
            data += state.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError as exc:
            raise httpx.LocalProtocolError(str(exc)) from exc
        try:
            connection.writer.write(data)
            async with asyncio.timeout(timeouts.get("write")):
                await connection.writer.drain()
        except TimeoutError as exc:
            raise httpx.WriteTimeout("writing the request timed out") from exc
        except OSError as exc:
            raise _Stale() from exc
        started: h11.Response | None = None
        heard = False  # any byte of an answer: from then on the request is never resent
        body: list[bytes] = []
        size = 0
        late: float | None = None  # the answer whole by then, from its first byte
        whole = timeouts.get("read")
        while True:
            try:
                event = state.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc)) from exc
            if event is h11.NEED_DATA:
                chunk = await _read(connection, timeouts.get("read"), late, heard)
                if not chunk and not heard:
                    raise _Stale()
                if chunk and late is None and whole is not None:
                    late = asyncio.get_running_loop().time() + whole
                heard = heard or bool(chunk)
                state.receive_data(chunk)
            elif isinstance(event, h11.Response):
                started = event
            elif isinstance(event, h11.Data):
                body.append(bytes(event.data))
                size += len(event.data)
                if size > MAX_ANSWER_BYTES:
                    raise httpx.ReadError(f"the answer's body is over {MAX_ANSWER_BYTES} bytes")
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):  # (1xx answers: read past)
                raise httpx.RemoteProtocolError("the server closed the connection mid-answer")
        assert started is not None
        return httpx.Response(
            started.status_code,
            headers=[(bytes(k), bytes(v)) for k, v in started.headers.raw_items()],
            stream=_Body(b"".join(body)),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": bytes(started.reason)},
            request=request,
        )


async def _read(
    connection: _Connection, seconds: float | None, late: float | None, heard: bool
) -> bytes:
    """The next bytes of an answer, within `seconds` and by `late` (loop time; None: no
    deadline for the whole); httpx's errors, `_Stale` when the connection failed before
    any byte came (`heard`)."""
    try:
        async with asyncio.timeout(seconds) as within:
            if late is not None:
                within.reschedule(min(late, within.when() or late))
            return await connection.reader.read(_READ)
    except TimeoutError as exc:
        raise httpx.ReadTimeout(
            "reading the answer timed out (each read, and the whole "
            "from its first byte, within the read timeout)"
        ) from exc
    except OSError as exc:
        if not heard:
            raise _Stale() from exc
        raise httpx.ReadError(str(exc)) from exc


class _Stale(Exception):
    """A kept connection failed before any byte of an answer came."""
