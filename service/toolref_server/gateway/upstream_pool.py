"""`UpstreamPool`: the gateway's HTTP/1.1 connections to one of its upstreams (each has its
own pool, so one that stalls never holds another's), shared by every tenant, each reused
only when its last answer ended exactly where its framing said.

It is httpcore2's connection pool (the maintained successor of httpcore, whose pool asked
every pooled connection whether it was idle or expired on every request: 41% of the
gateway's busy CPU under 32 connections, encode/httpcore#1035), sending exactly the
request it is given. httpx's client
is not used in front of it: the client adds headers the agent never sent (`Accept`,
`Accept-Encoding`, `User-Agent`, `Connection`), keeps the cookies of every answer for the
next request (whichever tenant sends it), normalizes and re-encodes paths, and logs each
URL at INFO with its query and credentials.

**Reuse.** httpcore2 returns an HTTP/1.1 connection to the pool once both sides of its h11
state machine are DONE, even when h11 still holds bytes the upstream sent past the answer's
end (`trailing_data`): those bytes would be read as the next request's answer, whoever
sends it. `_ExactHTTP11Connection` closes such a connection instead. Bytes that come after
the answer, while the connection is idle, make its socket readable, and httpcore2 closes a
readable idle connection rather than reuse it (`AsyncHTTP11Connection.has_expired`). Bytes
can also wait above the socket, where `poll` does not see them: anyio's read queue (its
read off the socket takes all there is, and hands on 64 KiB at most) and, over TLS, the
records read but not yet decrypted; `_Probed` counts those as readable too (`_held`).
`tests/adversarial/test_gateway_attacks.py` and `test_gateway_forwarding.py` pin these
against a real socket.

**Probes.** The pool still asks every idle connection whether its socket is readable each
time it assigns or releases one (two `poll` calls per idle connection per request), and
anyio answers `get_extra_info` by building a dict of every attribute of the socket (its
family, addresses, ...) for each question: a fifth of the gateway's busy CPU at 32
connections (`python -m loadtests.gateway_profile`). `_Probed` holds the socket (and the
buffers above it) once and asks `poll` alone; O(1) per probe, as before.
"""

from __future__ import annotations

import socket
import ssl
from collections import deque
from collections.abc import AsyncIterable, Callable
from dataclasses import dataclass
from typing import Final

import httpcore2
import httpx
from anyio.streams.tls import TLSStream
from httpcore2._utils import is_socket_readable

from toolref.wire import keepalive

# An idle connection is closed after this: below uvicorn's and Node's keep-alive (5 s; a
# backend's), so a request never meets the upstream's close of it (`toolref.wire.keepalive`).
_KEEP_ALIVE_SECONDS: Final = keepalive.DEFAULT_SECONDS


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds: to connect (and to wait for a pooled connection), and between two reads or
    writes."""

    connect: float
    read: float


class _ExactHTTP11Connection(httpcore2.AsyncHTTP11Connection):
    """Closed, not reused, when its answer left bytes unread past its end."""

    async def _response_closed(self) -> None:
        extra, closed = self._h11_state.trailing_data
        if extra or closed:
            async with self._state_lock:
                await self.aclose()
            return
        await super()._response_closed()


class _Probed(httpcore2.AsyncNetworkStream):
    """A connected stream whose socket is looked up once (module docstring, Probes)."""

    def __init__(self, stream: httpcore2.AsyncNetworkStream) -> None:
        self._stream = stream
        self._socket: socket.socket | None = stream.get_extra_info("socket")
        self._held = _held(stream)

    # The signatures are httpcore2's network stream's (its timeouts are arguments).
    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        return await self._stream.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        await self._stream.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore2.AsyncNetworkStream:
        return _Probed(await self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> object:
        if info == "is_readable":
            return self._held() or is_socket_readable(self._socket)
        if info == "socket":
            return self._socket
        return self._stream.get_extra_info(info)


def _held(stream: httpcore2.AsyncNetworkStream) -> Callable[[], bool]:
    """Whether bytes from the upstream wait above `stream`'s socket (module docstring,
    Reuse): httpcore2's anyio stream over asyncio, the gateway's; a stream of another make
    is asked nothing more than its socket, as httpcore2 asks it.
    `test_gateway_forwarding.py` fails should anyio's buffers move."""
    layer = getattr(stream, "_stream", None)  # httpcore2's AnyIOStream: anyio's stream
    tls = layer if isinstance(layer, TLSStream) else None
    if tls is not None:
        layer = tls.transport_stream
    queue = getattr(getattr(layer, "_protocol", None), "read_queue", None)
    held: deque[bytes] = queue if isinstance(queue, deque) else deque()
    if tls is None:
        return lambda: bool(held)
    records, ssl_object = tls._read_bio, tls._ssl_object
    return lambda: bool(held) or records.pending > 0 or ssl_object.pending() > 0


class _ExactConnection(httpcore2.AsyncHTTPConnection):
    """`AsyncHTTPConnection` (connect on first use) whose protocol is always
    `_ExactHTTP11Connection`."""

    async def handle_async_request(self, request: httpcore2.Request) -> httpcore2.Response:
        if self._connection is None:
            async with self._request_lock:
                if self._connection is None:
                    try:
                        stream = await self._connect(request)
                    except BaseException:
                        self._connect_failed = True
                        raise
                    self._connection = _ExactHTTP11Connection(
                        origin=self._origin,
                        stream=_Probed(stream),
                        keepalive_expiry=self._keepalive_expiry,
                    )
        return await super().handle_async_request(request)


class UpstreamPool(httpcore2.AsyncConnectionPool):
    """See the module docstring. `max_connections`: open at most, kept alive as many."""

    def __init__(
        self,
        *,
        max_connections: int,
        timeouts: Timeouts,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        # httpx's certificates (certifi), not the environment's: the upstreams are the
        # operator's (`ssl_context`: another, for tests). HTTP/1.1 only (the ALPN httpcore2
        # offers), which the check above needs.
        self._context = ssl_context or httpx.create_ssl_context(trust_env=False)
        super().__init__(
            ssl_context=self._context,
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=_KEEP_ALIVE_SECONDS,
            http1=True,
            http2=False,
        )
        self.timeouts = timeouts
        self.max_connections = max_connections

    def create_connection(self, origin: httpcore2.Origin) -> httpcore2.AsyncConnectionInterface:
        return _ExactConnection(
            origin=origin, ssl_context=self._context, keepalive_expiry=_KEEP_ALIVE_SECONDS
        )

    async def send(
        self,
        method: bytes,
        url: httpcore2.URL,
        headers: list[tuple[bytes, bytes]],
        content: bytes | AsyncIterable[bytes],
    ) -> httpcore2.Response:
        """The answer's head, its body still to read (`aiter_stream`, then `aclose`); the
        request is sent as given (its framing headers included)."""
        t = self.timeouts
        request = httpcore2.Request(
            method,
            url,
            headers=headers,
            content=content,
            extensions={
                "timeout": {
                    "connect": t.connect,
                    "pool": t.connect,
                    "read": t.read,
                    "write": t.read,
                }
            },
        )
        return await self.handle_async_request(request)
