"""`connect` and `Socket`: the sans-I/O `Client` over an asyncio stream (TCP, TLS for
`wss://`/`https://`).

`connect` opens the connection and sends the upgrade within `connect_timeout` seconds, or raises
`Unreachable` (no connection, no answer in time, or the connection ended first) or
`Refusal` (the server answered with a plain HTTP status: its status, headers and body).
The socket then sends whole messages and receives them one at a time (`receive`: a
`Message`, then, once, the `Closed` that ends the connection); pings are answered as they
come while the transport's buffer has room under its high-water mark (a peer that sends
pings and reads nothing leaves the rest unanswered: the buffer stays within the mark).
Reads take at most `READ` bytes at a time, and a message is held only up to the client's
`max_message`. A send waits while the peer is slow to read (the transport's buffer
past its high-water mark: one message, and 64 KiB); given `stall` seconds, it raises
`Stalled` once the peer took nothing of it for that long (a peer reading at any pace goes
on).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl as ssl_module
from collections import deque
from collections.abc import Sequence
from typing import Final
from urllib.parse import urlsplit

from toolref.websocket.client import (
    ABNORMAL,
    MAX_HEAD,
    Accepted,
    Client,
    Closed,
    Event,
    Message,
    Refused,
)

READ: Final = 64 * 1024  # bytes read from the socket at a time
CLOSE_TIMEOUT: Final = 5.0  # seconds a closing write may wait on a peer that reads nothing
_SCHEMES: Final = {"ws": False, "http": False, "wss": True, "https": True}


class Unreachable(Exception):
    """The WebSocket could not be opened: no connection, or no answer to the upgrade."""


class Stalled(Exception):
    """The peer took nothing of a message for the `stall` seconds its send was given."""


class Refusal(Exception):
    """The server answered the upgrade with a plain HTTP answer (not 101)."""

    def __init__(self, refused: Refused) -> None:
        super().__init__(f"the upgrade was answered {refused.status}")
        self.status = refused.status
        self.headers = refused.headers
        self.body = refused.body


async def connect(
    url: str,
    headers: Sequence[tuple[str, str]] = (),
    *,
    max_message: int,
    connect_timeout: float,
    subprotocols: Sequence[str] = (),
    ssl: ssl_module.SSLContext | None = None,
) -> Socket:
    """A WebSocket to `url` (`ws://`, `wss://`; `http(s)://` as their equivalents), its
    upgrade request carrying `headers` after the handshake's own. Its target is the URL's
    path and query exactly as written, a `#` and what follows it included: a WebSocket URL
    has no fragment (RFC 6455 3), and a server takes a `#` in a target, so a gateway
    forwarding one sends it on, as its HTTP forwarder does (read as a fragment, it was
    dropped: the upstream got another query, or none)."""
    parts = urlsplit(url, allow_fragments=False)
    if parts.scheme not in _SCHEMES or not parts.hostname:
        raise ValueError(f"{url!r} is not a ws://, wss://, http:// or https:// URL")
    secure = _SCHEMES[parts.scheme]
    port = parts.port or (443 if secure else 80)
    host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    if ":" in parts.hostname:  # IPv6
        host = f"[{parts.hostname}]" + (f":{parts.port}" if parts.port else "")
    path = parts.path if parts.path.startswith("/") else "/" + parts.path  # "ws://h#x"
    target = path + (f"?{parts.query}" if parts.query else "")
    context = (ssl or ssl_module.create_default_context()) if secure else None
    loop = asyncio.get_running_loop()
    ends = loop.time() + connect_timeout  # the connection and the upgrade, both within it
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(parts.hostname, port, ssl=context, limit=READ), connect_timeout
        )
    except (OSError, TimeoutError, ssl_module.SSLError) as exc:
        raise Unreachable(f"cannot connect to {parts.hostname}:{port} ({_named(exc)})") from exc
    raw = writer.get_extra_info("socket")
    if raw is not None:
        with contextlib.suppress(OSError):
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client = Client(host, target, headers, subprotocols=subprotocols, max_message=max_message)
    opened = Socket(reader, writer, client)
    try:
        await asyncio.wait_for(opened.handshake(), max(ends - loop.time(), 0))
    except TimeoutError:
        opened.abort()
        raise Unreachable(f"no answer to the upgrade within {connect_timeout:g}s") from None
    except BaseException:
        opened.abort()
        raise
    return opened


def _named(exc: BaseException) -> str:
    return type(exc).__name__ + (f": {exc}" if str(exc) else "")


class Socket:
    """One open WebSocket; see the module docstring."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client: Client
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.client = client
        self._events: deque[Event] = deque()
        self.accepted = Accepted((), None)

    async def handshake(self) -> None:
        self._writer.write(self.client.handshake())
        while True:
            event = await self._next()
            if isinstance(event, Accepted):
                self.accepted = event
                return
            if isinstance(event, Refused):
                raise Refusal(event)
            if isinstance(event, Closed) and self.client.head_too_large:
                raise Unreachable(
                    f"the answer to the upgrade has a head over {MAX_HEAD} bytes, the most "
                    "this client reads; have the receiver (or a proxy before it) send fewer or "
                    "shorter headers on its 101 (long cookies, tokens), or send over HTTP "
                    "(the relay's --no-channel)"
                )
            if isinstance(event, Closed):
                raise Unreachable(f"the connection ended during the upgrade ({event.reason})")

    async def _next(self) -> Event:
        while not self._events:
            try:
                data = await self._reader.read(READ)
            except (OSError, ssl_module.SSLError):
                data = b""
            transport = self._writer.transport
            high = transport.get_write_buffer_limits()[1]
            self.client.pong_room = max(high - transport.get_write_buffer_size(), 0)
            self._events.extend(self.client.receive(data))
            pending = self.client.outgoing()
            if pending and not self._writer.is_closing():
                self._writer.write(pending)
            if not data and not self._events:
                self._events.append(self.client.closed or Closed(ABNORMAL))
        return self._events.popleft()

    async def receive(self) -> Message | Closed:
        """The next message, or the `Closed` ending the connection (then the transport is
        closed, and every later call returns the same `Closed`)."""
        if self._events and isinstance(self._events[0], Closed):
            return self._events[0]
        while True:
            event = await self._next()
            if isinstance(event, Message):
                return event
            if isinstance(event, Closed):
                self._events.appendleft(event)  # kept: what every later call returns
                await self._drain_quietly()
                self._writer.close()
                return event

    @property
    def peer_closed(self) -> Closed | None:
        """The close its peer sent, as soon as it is read (before `receive` returns it,
        which first waits for what is written to go); None: none read, or the close was
        this side's."""
        closed = self.client.closed
        return None if closed is None or closed.by_us else closed

    @property
    def open(self) -> bool:
        """Whether a message sent now goes out (`send` drops it once the connection is
        closing: a close sent or received, or the transport closed)."""
        return self.client.open and not self._writer.is_closing()

    async def send(self, data: str | bytes, stall: float | None = None) -> None:
        """One message (text for `str`); waits while the peer is slow to read, and with
        `stall`, raises `Stalled` once it took none of the bytes left for `stall`
        seconds."""
        frame = self.client.send(data)
        if frame and not self._writer.is_closing():
            self._writer.write(frame)
            if stall is None:
                await self._writer.drain()
            else:
                await self._drain_within(stall)

    async def _drain_within(self, stall: float) -> None:
        """`drain`, restarted for as long as each `stall` seconds the buffer shrank."""
        transport = self._writer.transport
        left = transport.get_write_buffer_size()
        while True:
            try:
                await asyncio.wait_for(self._writer.drain(), stall)
                return
            except TimeoutError:
                now = transport.get_write_buffer_size()
                if now >= left:
                    raise Stalled(f"the peer took nothing for {stall:g}s") from None
                left = now

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Send the close frame, then close the transport (the peer's answer is not
        waited for: nothing more is read from this socket). A peer that takes nothing
        within `CLOSE_TIMEOUT` seconds (a stalled one, its window full) is dropped."""
        frame = self.client.close(code, reason)
        if frame and not self._writer.is_closing():
            self._writer.write(frame)
            await self._drain_quietly()
        self._writer.close()

    def abort(self) -> None:
        """Drop the connection at once (no close frame)."""
        self._writer.transport.abort()

    async def _drain_quietly(self) -> None:
        """What is written taken by the peer, within `CLOSE_TIMEOUT`; else the connection
        dropped (a closing write never waits on a peer for ever)."""
        with contextlib.suppress(OSError, ConnectionError):
            try:
                await asyncio.wait_for(self._writer.drain(), CLOSE_TIMEOUT)
            except TimeoutError:
                self.abort()
