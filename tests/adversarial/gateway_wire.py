"""The gateway over real sockets: the service served in process by uvicorn with the HTTP
layer `toolref-server serve` runs (`toolref_server.http.connection.Connection`), a raw HTTP/1.1
upstream that does what a test asks (plant bytes past an answer, hold a request, record
every byte and every hang-up), and a raw client that sends what no client library would
(dot segments, `%00`, both `Content-Length` and `Transfer-Encoding`).

Everything runs on the test's own event loop; the raw client uses asyncio streams, so it
never blocks the servers it talks to.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import h11
import uvicorn
from redis.asyncio import Redis

from toolref_server.app import create_app
from toolref_server.settings import Settings

HEAD_LIMIT = 65536


@dataclass
class Received:
    """One request as the upstream read it off the wire."""

    method: str
    target: str  # the request target, byte for byte (latin-1)
    headers: list[tuple[str, str]]  # in order, names as sent
    body: bytes = b""
    complete: bool = False  # its whole body arrived

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


@dataclass
class Link:
    """One connection to the upstream."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    requests: list[Received] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)  # the gateway hung up

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def until_closed(self) -> None:
        """Read (and drop) until the gateway closes the connection."""
        with contextlib.suppress(ConnectionError):
            while await self.reader.read(65536):
                pass
        self.closed.set()


# (link, request) -> keep the connection for another request?
Behaviour = Callable[[Link, Received], Awaitable[bool]]


def response(
    body: bytes = b'{"ok":true}', status: int = 200, headers: Sequence[tuple[str, str]] = ()
) -> bytes:
    lines = [f"HTTP/1.1 {status} X", "Content-Type: application/json", "X-Fake-Upstream: 1"]
    lines += [f"{name}: {value}" for name, value in headers]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


async def echo(link: Link, request: Received) -> bool:
    """Answer 200 with what was received (target, body length), keeping the connection."""
    summary = {"target": request.target, "bytes": len(request.body)}
    await link.write(response(json.dumps(summary).encode()))
    return True


class RawUpstream:
    """An HTTP/1.1 server on 127.0.0.1 answering each request with `behaviour`; it keeps
    every connection (`links`) and request (`requests`) it saw."""

    def __init__(self, behaviour: Behaviour = echo) -> None:
        self.behaviour = behaviour
        self.links: list[Link] = []
        self.requests: list[Received] = []
        self.heads = asyncio.Condition()  # notified on every request head read
        self._server: asyncio.Server | None = None
        self._url: str | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        assert self._url is not None, "not started"
        return self._url

    async def wait_for_requests(self, count: int, seconds: float = 10.0) -> None:
        async def reached() -> None:
            async with self.heads:
                await self.heads.wait_for(lambda: len(self.requests) >= count)

        await asyncio.wait_for(reached(), seconds)

    async def __aenter__(self) -> RawUpstream:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self._url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        link = Link(reader, writer)
        self.links.append(link)
        try:
            while True:
                request = await self._head(link)
                if request is None:
                    break
                await _read_body(link, request)
                if not request.complete or not await self.behaviour(link, request):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:  # the server stops: this connection ends with it
            pass
        finally:
            link.closed.set()
            writer.close()
            self._tasks.discard(task)

    async def _head(self, link: Link) -> Received | None:
        try:
            head = await link.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        line, *lines = head[:-4].decode("latin-1").split("\r\n")
        method, target, _ = line.split(" ", 2)
        headers = [(n.strip(), v.strip()) for n, _, v in (x.partition(":") for x in lines)]
        request = Received(method, target, headers)
        link.requests.append(request)
        async with self.heads:
            self.requests.append(request)
            self.heads.notify_all()
        return request


async def _read_body(link: Link, request: Received) -> None:
    chunked = (request.header("transfer-encoding") or "").lower() == "chunked"
    if chunked:
        while True:
            size = int((await link.reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
            if size == 0:
                await link.reader.readuntil(b"\r\n")
                break
            request.body += (await link.reader.readexactly(size + 2))[:-2]
    else:
        length = int(request.header("content-length") or "0")
        while len(request.body) < length:
            piece = await link.reader.read(length - len(request.body))
            if not piece:
                return
            request.body += piece
    request.complete = True


# --- the service ------------------------------------------------------------------------


@asynccontextmanager
async def serving(redis: Redis, **settings: Any) -> AsyncIterator[uvicorn.Server]:
    """The service (registry and gateway) on a real socket, with the HTTP layer of
    `toolref-server serve`; yields its uvicorn server (connections left open at the end are
    aborted: a test's unread answers do not hold the shutdown)."""
    app = create_app(Settings(**{"redis_url": "unused", **settings}), redis=redis)
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        http="toolref_server.http.connection:Connection",
        ws="toolref_server.http.websocket:WebSocket",  # as `toolref-server serve` runs it
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
                raise AssertionError("uvicorn stopped before it started")
            await asyncio.sleep(0.01)
        yield server
    finally:
        server.should_exit = True
        for connection in list(server.server_state.connections):
            connection.transport.abort()
        await task


@asynccontextmanager
async def gateway(redis: Redis, **settings: Any) -> AsyncIterator[str]:
    """`serving`, yielding the service's base URL."""
    async with serving(redis, **settings) as server:
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"


# --- the raw client ---------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def all(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def json(self) -> Any:
        return json.loads(self.body)


def request_bytes(
    method: str,
    target: str | bytes,
    headers: Sequence[tuple[str, str]] = (),
    body: bytes = b"",
    *,
    length: bool = True,
) -> bytes:
    """A request: `Host` first, then `headers`, then `Content-Length` (with `length`)."""
    raw_target = target if isinstance(target, bytes) else target.encode("latin-1")
    lines = [b"%s %s HTTP/1.1" % (method.encode(), raw_target), b"Host: 127.0.0.1"]
    lines += [f"{name}: {value}".encode() for name, value in headers]
    if length:
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def opened(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, _, port = url.removeprefix("http://").partition(":")
    return await asyncio.open_connection(host, int(port))


async def exchange(url: str, data: bytes, seconds: float = 20.0) -> Reply:
    """Send `data` on a new connection and read one answer (then close)."""
    reader, writer = await opened(url)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(read_reply(reader), seconds)
    finally:
        writer.close()


async def read_reply(reader: asyncio.StreamReader) -> Reply:
    head = await reader.readuntil(b"\r\n\r\n")
    line, *lines = head[:-4].decode("latin-1").split("\r\n")
    headers = [(n.strip(), v.strip()) for n, _, v in (x.partition(":") for x in lines)]
    reply = Reply(int(line.split()[1]), headers, b"")
    if (reply.header("transfer-encoding") or "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            reply.body += (await reader.readexactly(size + 2))[:-2]
    elif reply.header("content-length") is not None:
        reply.body = await reader.readexactly(int(reply.header("content-length") or "0"))
    else:
        reply.body = await reader.read()
    return reply


# --- a strict upstream ------------------------------------------------------------------


class StrictUpstream:
    """An upstream that reads with h11 (what a strict HTTP/1.1 server accepts) and answers
    every request 200 `{"ok":true}` (`X-Fake-Upstream: 1`), keep-alive: so an answer of
    another status, or without that header, is the gateway's own. What h11 refused of what
    the gateway sent is kept in `refused`; the request targets in `targets`."""

    def __init__(self) -> None:
        self.targets: list[bytes] = []
        self.refused: list[str] = []
        self._server: asyncio.Server | None = None
        self._url: str | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        assert self._url is not None, "not started"
        return self._url

    async def __aenter__(self) -> StrictUpstream:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self._url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        state = h11.Connection(h11.SERVER)
        method = b""
        try:
            while True:
                event = state.next_event()
                if event is h11.NEED_DATA:
                    state.receive_data(await reader.read(65536))
                elif isinstance(event, h11.Request):
                    method = event.method
                    self.targets.append(event.target)
                elif isinstance(event, h11.EndOfMessage):
                    writer.write(_answer(state, method))
                    await writer.drain()
                    state.start_next_cycle()
                elif isinstance(event, h11.ConnectionClosed):
                    break
        except h11.RemoteProtocolError as exc:
            if state.their_state is not h11.CLOSED and not reader.at_eof():
                self.refused.append(repr(exc))
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)


def _answer(state: h11.Connection, method: bytes) -> bytes:
    body = b'{"ok":true}'
    headers = [
        ("Content-Type", "application/json"),
        ("X-Fake-Upstream", "1"),
        ("Content-Length", str(len(body))),
    ]
    out = state.send(h11.Response(status_code=200, headers=headers)) or b""
    if method != b"HEAD":
        out += state.send(h11.Data(data=body)) or b""
    return out + (state.send(h11.EndOfMessage()) or b"")
