"""`PacedWebSocket`: uvicorn's wsproto WebSocket protocol with what it writes bounded, for a
client that reads nothing. The service (`toolref_server.http.websocket`, its send timeout
`TOOLREF_SEND_TIMEOUT`) and the relay (`with_send_timeout`: its `--send-timeout`,
`SEND_TIMEOUT` by default) serve WebSockets with it (`ws=` of their uvicorn configuration);
it needs uvicorn, which both install.

uvicorn's `WSProtocol` writes each ping's pong straight to the transport, and stops reading
only while the app has not taken a message: a client that sends pings and reads nothing
grows the write buffer by what it sends, until the idle limit. Its close
(`transport.close()`) waits for the write buffer to drain, which for a client keeping its
window at zero is never: the connection and its buffered bytes stay. Here, per connection:

- **Reading stops with writing.** While the write buffer is over its high-water mark
  (`pause_writing`), nothing more is read from the client; reading resumes with
  `resume_writing` (unless the app has not taken a message yet: uvicorn's own pause). The
  pings read meanwhile (the rest of the read that crossed the mark) are answered by one
  pong, the last one's, once writing resumes (RFC 6455 5.5.3 allows that).
- **Send deadline.** A write buffer over its mark that shrinks by nothing for
  `send_timeout` seconds drops the connection (abort; `dropped("send-timeout")`).
- **Close deadline.** A transport closed with bytes still buffered, that shrink by nothing
  for `send_timeout` seconds, is dropped (abort): a close alone waits for them for ever.
- **Graceful stop.** An app that registers "on_stop" in the scope's `STOP_EXTENSION`
  (the channel's receiver) is told of the server's stop instead of having its socket closed
  (1012) at once, and closes it itself once its work in flight is done (uvicorn's
  `timeout_graceful_shutdown` bounds that); any other socket is closed at once, as before.

Bound on what is buffered for one client: the high-water mark (64 KiB), one message the
app sends (its send waits below the mark), one pong, a close frame.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, cast

from uvicorn.config import Config
from uvicorn.protocols.websockets.wsproto_impl import WSProtocol
from uvicorn.server import ServerState
from wsproto.connection import ConnectionState
from wsproto.events import Ping, Pong

from toolref.asgi.scope import STOP_EXTENSION

if TYPE_CHECKING:
    from uvicorn._types import WebSocketEvent

SEND_TIMEOUT: Final = 30.0  # the relay's default; the service's is TOOLREF_SEND_TIMEOUT (30 s)


class PacedWebSocket(WSProtocol):
    """See the module docstring. `send_timeout`: seconds; `dropped`: told each drop."""

    send_timeout: float = SEND_TIMEOUT

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._held = False  # reading stopped while the write buffer is over its mark
        self._pong: Pong | None = None  # the pong owed for the last ping read while held
        self._deadline: asyncio.TimerHandle | None = None
        self._left = 0  # bytes buffered when the deadline was armed
        self._lost = False
        self.stop: dict[str, Any] = {}  # the app's "on_stop", where it drains its work

    def dropped(self, reason: str) -> None:
        """A connection dropped for `reason` ("send-timeout"); the service counts it."""

    # --- uvicorn's protocol interface -------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = cast(asyncio.Transport, _Closing(transport, self._closed))

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._disarm()
        super().connection_lost(exc)

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        extensions: Any = self.scope.setdefault("extensions", {})
        extensions[STOP_EXTENSION] = self.stop

    def shutdown(self) -> None:
        """The server stops: an app that drains its work (`STOP_EXTENSION`'s "on_stop")
        is told, and closes the socket itself once done (uvicorn's shutdown timeout bounds
        it); any other socket is closed (1012) at once, as uvicorn does."""
        on_stop = self.stop.get("on_stop")
        if on_stop is None or not self.handshake_complete or self.close_sent:
            super().shutdown()
            return
        self.stop.pop("on_stop")  # told once; a second stop closes at once
        on_stop()

    def pause_writing(self) -> None:
        super().pause_writing()
        if not self._held and not self.transport.is_closing():
            self._held = True
            self.transport.pause_reading()
        self._arm()

    def resume_writing(self) -> None:
        super().resume_writing()
        if not self.transport.is_closing():
            self._disarm()
        if not self._held:
            return
        self._held = False
        pong, self._pong = self._pong, None
        if pong is not None and self._answerable():
            self.transport.write(self.conn.send(pong))
        if not self.read_paused and not self.transport.is_closing():
            self.transport.resume_reading()

    def handle_ping(self, event: Ping) -> None:
        if self._held:
            self._pong = event.response()  # answered once writing resumes
        else:
            super().handle_ping(event)

    async def receive(self) -> WebSocketEvent:
        message = await super().receive()
        if self._held and not self.transport.is_closing():
            self.transport.pause_reading()  # uvicorn resumed it for the app: held still
        return message

    # --- the deadlines ------------------------------------------------------------------

    def _answerable(self) -> bool:
        closing = self.close_sent or self.transport.is_closing()
        return not closing and self.conn.state is ConnectionState.OPEN

    def _closed(self) -> None:
        """The transport was closed: its buffered bytes have `send_timeout` to go."""
        if not self._lost and self.transport.get_write_buffer_size():
            self._arm()

    def _arm(self) -> None:
        if self._deadline is None:
            self._left = self.transport.get_write_buffer_size()
            self._deadline = self.loop.call_later(self.send_timeout, self._check)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _check(self) -> None:
        """Re-armed while the buffer shrinks; dropped once it took nothing for the whole
        timeout (abort: a close would wait for the buffer to drain, which it never will)."""
        self._deadline = None
        size = self.transport.get_write_buffer_size()
        if self._lost or not size or not (self._held or self.transport.is_closing()):
            return
        if size < self._left:
            self._arm()
            return
        if not self.transport.is_closing():
            self.dropped("send-timeout")  # one closed already counts as closed
        self.transport.abort()


def with_send_timeout(seconds: float) -> type[PacedWebSocket]:
    """`PacedWebSocket` whose send timeout is `seconds` (the relay's `--send-timeout`; the
    service sets it from its published limits instead: `toolref_server.http.websocket`)."""

    class Timed(PacedWebSocket):
        send_timeout = seconds

    return Timed


class _Closing:
    """The transport, whose `close` also starts the close deadline (uvicorn closes it from
    many places; each goes through here)."""

    def __init__(self, transport: asyncio.Transport, closed: Callable[[], None]) -> None:
        self._transport = transport
        self._closed = closed

    def close(self) -> None:
        self._transport.close()
        self._closed()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
