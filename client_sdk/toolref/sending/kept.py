"""A request that a kept (idle, pooled) connection failed before any byte of its answer
came: sent once more, on a new connection.

A receiver may close an idle connection at any moment, not only when its keep-alive runs
out (`keepalive` keeps the sender's below it): the gateway closes the oldest idle one to
make room past `TOOLREF_MAX_CONNECTIONS`, and every idle one when it stops. A request
written as that close is on its way fails (`ReadError`, `RemoteProtocolError: Server
disconnected without sending a response`), and httpx never sends a POST twice. Such a
failure is told apart from a receiver that took the request and then failed by what this
module counts on the connection itself (`Counted`, below httpcore's pool): the request went
on a connection opened before it (no connect during it), and not one byte came back on it
from the request's first write to the failure. The receiver then closed an idle connection:
the toolref gateway answers every request its app took (a 503 problem+json for one a stop
cancelled), so a close with no byte means the app never saw it. Sent once more on a
connection opened for it (a fresh one cannot be in that race); any other failure is raised
as it was.

Counting is per request: `begun` puts a `Heard` in a context variable the request's task
carries through httpcore, which connects, writes and reads in the caller's task until the
answer's head came (the only part a retry concerns).
"""

from __future__ import annotations

import contextvars
from typing import Any, Final

import httpcore
import httpx

# The failures of a connection closed under a request (what httpx maps httpcore's to).
FAILURES: Final = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)


class Heard:
    """What one request's attempt did on its connection: opened one (`connected`), wrote
    (`wrote`), and the bytes read back since its first write (`bytes`)."""

    def __init__(self) -> None:
        self.connected = False
        self.wrote = False
        self.bytes = 0

    def unanswered_on_kept(self) -> bool:
        """The attempt went on a kept connection and nothing came back: a close of an idle
        connection crossed it (module docstring), safe to send once more."""
        return not self.connected and self.bytes == 0


_HEARD: Final[contextvars.ContextVar[Heard | None]] = contextvars.ContextVar(
    "toolref_kept_heard", default=None
)


def begun() -> tuple[Heard, contextvars.Token[Heard | None]]:
    """A new attempt's `Heard`, current in this task until `ended(token)`."""
    heard = Heard()
    return heard, _HEARD.set(heard)


def ended(token: contextvars.Token[Heard | None]) -> None:
    _HEARD.reset(token)


class _Stream(httpcore.AsyncNetworkStream):
    """A connection's stream, reporting its reads and writes to the current `Heard`."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        data = await self._inner.read(max_bytes, timeout)
        heard = _HEARD.get()
        if heard is not None and heard.wrote:
            heard.bytes += len(data)
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        heard = _HEARD.get()
        if heard is not None:
            heard.wrote = True
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore.AsyncNetworkStream:
        return _Stream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.AsyncNetworkBackend):
    """A network backend whose connections are `_Stream`s, each connect told to `Heard`."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
        self._inner = inner

    async def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        self._connected()
        return _Stream(await self._inner.connect_tcp(*args, **kwargs))

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        self._connected()
        return _Stream(await self._inner.connect_unix_socket(*args, **kwargs))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)

    @staticmethod
    def _connected() -> None:
        heard = _HEARD.get()
        if heard is not None:
            heard.connected = True


def counted(transport: httpx.AsyncHTTPTransport) -> httpx.AsyncHTTPTransport:
    """`transport`, its connections counted for `Heard` (its httpcore pool's network
    backend wrapped; before it made any connection). `test_kept_retry.py` fails should
    httpx or httpcore move the pool or its backend."""
    pool = transport._pool
    pool._network_backend = _Backend(pool._network_backend)
    return transport
