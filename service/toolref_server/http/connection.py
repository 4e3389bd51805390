"""The HTTP layer: uvicorn's h11 protocol with deadlines, a connection limit, and every
refusal as problem+json.

uvicorn as configured by default waits for a request's head and body as long as the client
likes, keeps any number of connections, and answers a malformed request in text/plain.
`Connection` subclasses its h11 protocol (`toolref-server serve` always runs it, whichever
HTTP parsers are installed; as `toolref.asgi.upgrade.GetUpgrades`, the relay's too: a
WebSocket upgrade only for a GET) and adds, per connection:

- **Head deadline.** The request line and headers must arrive within `header_timeout`
  seconds of the connection's start, or of the first byte of a later request. Past it: 408
  problem+json if part of a head came, a silent close if nothing did (an idle socket).
- **Body deadline.** A body has `body_timeout` seconds, plus 1/`body_min_rate` second per
  byte received, so a steady upload of any size goes through and a trickle is cut: 408 if no
  answer has started, else a close. Time during which the server itself stopped reading
  (the app had not asked for more yet) does not count, nor does a wait for `100-continue`.
- **Send deadline.** An answer the client leaves unread (the send buffer full, for
  `send_timeout` seconds) is dropped with its connection: it would hold the buffered answer
  and the descriptor for ever. So is a connection closed with part of an answer still
  buffered, `send_timeout` seconds after the close (a close waits for the buffer to drain).
- **Keep-alive.** A connection idle between requests is closed after `keep_alive` seconds.
- **Connection limit.** Past `max_connections` open connections in this process, a new one
  closes the oldest idle connection (one waiting for a request head) to make room; when
  every connection is busy, its requests are answered 503 `overloaded` (`/healthz` is
  still answered) and it is closed.
- **Refusals as problems.** A request h11 cannot parse is a 400 `malformed-request` (431
  `headers-too-large` past h11's 16 KiB head limit) in application/problem+json.
- **Framed twice.** A request with both `Content-Length` and `Transfer-Encoding` is read by
  its chunks (as h11 reads it) and its connection closed after the answer (RFC 9112 6.3: a
  proxy in front that framed it by `Content-Length` would see another request in it).

The limits come from the app: its lifespan publishes `ConnectionLimits` in the lifespan
state, which uvicorn hands to every protocol instance, so they are the app's own settings.
Beside this module: `connection_limits` (those limits, and which idle connection makes room
for a new one), `reading` (the timed flow control and the parser that report to the
deadlines), `unanswered` (problem+json for a request the app drops).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import socket
import sys
import termios
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final, cast

import h11
from h11._connection import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
from starlette.types import Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.server import ServerState

from toolref.asgi.upgrade import GetUpgrades
from toolref.wire.errors import (
    HeadersTooLargeError,
    MalformedRequestError,
    OverloadedError,
    RequestTimeoutError,
    ToolrefError,
)
from toolref.wire.numbers import whole_number
from toolref_server.http.connection_limits import (
    IdleConnections,
    idle_connections,
    published,
)
from toolref_server.http.problem import problem_message, problem_response
from toolref_server.http.reading import Parser, TimedFlow
from toolref_server.http.unanswered import answering_problems

if TYPE_CHECKING:
    from uvicorn._types import ASGI3Application

log = logging.getLogger(__name__)

HEALTH_PATH: Final = b"/healthz"
_MIN_REARM: Final = 0.1
_DEFAULT_NAMES: Final = frozenset({b"server", b"date"})  # what uvicorn adds to every answer


class Connection(GetUpgrades):
    """See the module docstring."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = limits = published(app_state, type(self).__name__)
        self.app = answering_problems(
            self.app, limits.retry_after, self._answer_head, self._cancelled
        )
        self.head_limit = config.h11_max_incomplete_event_size or DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
        self.parser = Parser(self, self.head_limit)
        self.conn = self.parser
        self.idle: IdleConnections = idle_connections(server_state)
        self.timed_flow: TimedFlow | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._send_timer: asyncio.TimerHandle | None = None
        self._drop_timer: asyncio.TimerHandle | None = None  # closed, the answer unsent
        # Reading a head: since the connection started (`_first_byte_due` False), or idle
        # between requests until a first byte comes (True); `_head_bytes` of it so far.
        self._reading_head = True
        self._first_byte_due = False
        self._head_bytes = 0
        # Reading a body, and answering a request (both start with its head).
        self._reading_body = False
        self._answering = False
        self._body_started = 0.0
        self._body_paused = 0.0
        self._body_received = 0
        self._body_declared: int | None = None
        self._framed_twice = False
        self._over_limit = False
        self._refusal: tuple[ToolrefError, str] | None = None

    @property
    def head_bytes(self) -> int:
        """Bytes of a request head received so far (0 when idle between requests)."""
        return self._head_bytes if self._reading_head else 0

    def unread_bytes(self) -> int:
        """Bytes the client sent that the server has not read yet (0 if unknown)."""
        sock = self.transport.get_extra_info("socket") if self.transport else None
        try:
            found = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0") if sock else b""
        except OSError:
            return 0
        return int.from_bytes(found, sys.byteorder) if found else 0

    def _answer_head(self, headers: Iterable[tuple[bytes, bytes]]) -> None:
        """Before an answer's head is sent: `_own_defaults`, and the answer to a request
        framed twice closes its connection."""
        headers = list(headers)
        self._own_defaults(headers)
        cycle = self.cycle
        if cycle is not None and self._framed_twice:
            cycle.keep_alive = False
            cycle.default_headers = [*cycle.default_headers, (b"connection", b"close")]

    def _cancelled(self) -> None:
        """A stop cancelled this connection's request, or the app cut its answer
        (`unanswered.AnswerCut`): the connection is closed, an answer under way ends short
        of its end (a chunked one without its last chunk: the client sees a cut, not an
        end), and uvicorn, told the client is gone, reports no unfinished answer as an
        error."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()

    def _own_defaults(self, headers: Iterable[tuple[bytes, bytes]]) -> None:
        """uvicorn's `server` and `date` left out of an answer that names its own (a
        provider's answer the gateway passes on): one of each, the provider's, where
        uvicorn sent both its own and the provider's."""
        cycle = self.cycle
        named = {bytes(name).lower() for name, _ in headers}
        if cycle is not None and not named.isdisjoint(_DEFAULT_NAMES):
            kept = [(k, v) for k, v in cycle.default_headers if k.lower() not in named]
            cycle.default_headers = kept

    # --- uvicorn's protocol interface -------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        _no_delay(transport)
        self.timed_flow = TimedFlow(transport)
        self.flow = self.timed_flow
        self.limits.metrics.connections_open.inc()
        if len(self.connections) > self.limits.max_connections:
            oldest = self.idle.oldest(other_than=self)
            if oldest is not None:
                oldest.evict()
            else:
                self._over_limit = True
        self._wait_for_head(self.limits.header_timeout, first_byte_due=False)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._send_timer is None:
            self._send_timer = self.loop.call_later(self.limits.send_timeout, self._unread)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _unread(self) -> None:
        """The client left its answer unread for the whole send timeout: drop the
        connection and the answer buffered for it (abort: a close would wait for the buffer
        to drain, which it never will), ending the request if it still waits to write."""
        self._send_timer = None
        if self.flow.write_paused:
            self.limits.metrics.connections_closed.labels("send-timeout").inc()
            self._cancel_timer()
            self.idle.discard(self)
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._send_timer, self._drop_timer):
            if timer is not None:
                timer.cancel()
        self._send_timer = self._drop_timer = None
        self._cancel_timer()
        self.idle.discard(self)
        self.limits.metrics.connections_open.dec()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._reading_head:
            if self._first_byte_due:
                self._first_byte_due = False
                self._arm(self.limits.header_timeout)
            self._head_bytes += len(data)
        super().data_received(data)

    def on_response_complete(self) -> None:
        self._answering = False
        if self._over_limit:
            self._close("over-limit")  # /healthz was answered; nothing else is
            return
        if not self._reading_body:
            self._wait_for_head(self.limits.keep_alive, first_byte_due=True)
        super().on_response_complete()
        self._unset_keepalive_if_required()  # the deadline above replaces uvicorn's timer
        if self.transport.is_closing():  # uvicorn closed it (`Connection: close`)
            self._drop_unsent()
        buffered = self.parser.trailing_data[0]
        if self._reading_head and self._first_byte_due and buffered:
            # Part of a pipelined request is here already: its head is due from now.
            self._first_byte_due = False
            self._head_bytes = len(buffered)
            self._arm(self.limits.header_timeout)

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        """The connection becomes a WebSocket (uvicorn's wsproto protocol takes the
        transport): a head refused (too large, over the connection limit) is answered as
        any request's; otherwise this protocol's deadlines end here, it leaves the idle set
        and the open-connection gauge (its `connection_lost` is never called now), and the
        WebSocket counts among the server's connections from here on."""
        if self._refusal is not None:
            error, reason = self._refusal
            self._refuse(error, reason)
            return
        self._cancel_timer()
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None
        self._reading_head = self._reading_body = self._answering = False
        self.idle.discard(self)
        self.limits.metrics.connections_open.dec()
        super().handle_websocket_upgrade(event)

    def send_400_response(self, msg: str) -> None:
        error = self.parser.error
        problem: ToolrefError
        if error is not None and error.error_status_hint == 431:
            problem = self._head_too_large()
        else:
            kind = str(error).split(":", 1)[0] if error is not None else msg
            problem = MalformedRequestError(
                f"the request is not valid HTTP/1.1 ({kind}); check the request line and "
                "the headers: a NUL, CR or LF inside a header value, a space or a control "
                "character in the path, or a malformed Content-Length are the usual causes"
            )
        log.debug("refused a malformed request: %s", problem.detail)
        self._refuse(problem, "malformed")

    # --- what the parser saw ------------------------------------------------------------

    def saw(self, event: Any) -> None:
        if isinstance(event, h11.Request):
            self._head_arrived(event)
        elif isinstance(event, h11.Data):
            self._body_received += len(event.data)
        elif isinstance(event, h11.EndOfMessage):
            self._reading_body = False
            self._cancel_timer()
            if not self._answering:  # answered before its body was all in
                self._wait_for_head(self.limits.keep_alive, first_byte_due=True)

    def _head_arrived(self, request: h11.Request) -> None:
        self._reading_head = False
        self.idle.discard(self)
        self._reading_body = self._answering = True
        self._body_started = time.monotonic()
        self._body_paused = self._paused()
        self._body_received = 0
        fields = dict(request.headers)
        declared = fields.get(b"content-length")
        self._framed_twice = declared is not None and b"transfer-encoding" in fields
        length = declared.decode("ascii") if declared and not self._framed_twice else ""
        self._body_declared = whole_number(length, 30) if length else None
        self._arm(self.limits.body_timeout)
        # h11 bounds a head only while it is incomplete: one that came whole in a single
        # read may be longer. Its size as sent, give or take the spaces around the colons:
        size = len(request.method) + len(request.target) + 12
        size += sum(len(name) + len(value) + 4 for name, value in request.headers)
        if size > self.head_limit:
            self._refusal = (self._head_too_large(), "malformed")
        elif self._over_limit and request.target.partition(b"?")[0] != HEALTH_PATH:
            self._refusal = (self._overloaded("every other connection is busy"), "over-limit")
        else:
            return
        self.app = cast("ASGI3Application", self._refuse_request)

    # --- deadlines ------------------------------------------------------------------------

    def _wait_for_head(self, seconds: float, *, first_byte_due: bool) -> None:
        self._reading_head, self._first_byte_due, self._head_bytes = True, first_byte_due, 0
        self.idle.add(self)
        self._arm(seconds)

    def _arm(self, seconds: float) -> None:
        self._cancel_timer()
        self._timer = self.loop.call_later(seconds, self._deadline)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _paused(self) -> float:
        return self.timed_flow.paused_seconds() if self.timed_flow is not None else 0.0

    def _deadline(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        if self._reading_body:
            self._check_body()
        elif self._reading_head:
            if self._head_bytes:
                self._refuse(
                    RequestTimeoutError(
                        f"the request line and headers did not arrive within "
                        f"{self.limits.header_timeout:g}s ({self._head_bytes} bytes came; "
                        "TOOLREF_HEADER_TIMEOUT); send the whole head at once, ended by an "
                        "empty line"
                    ),
                    "header-timeout",
                )
            else:
                self._close("idle" if self._first_byte_due else "header-timeout")

    def _check_body(self) -> None:
        now = time.monotonic()
        if self.cycle is not None and self.cycle.waiting_for_100_continue:
            # The client waits for our `100 Continue`: its time starts when that is sent.
            self._body_started, self._body_paused = now, self._paused()
            self._arm(self.limits.body_timeout)
            return
        active = now - self._body_started - (self._paused() - self._body_paused)
        allowed = self.limits.body_timeout + self._body_received / self.limits.body_min_rate
        if active < allowed:
            self._arm(max(allowed - active, _MIN_REARM))
            return
        if self.cycle is not None and self.cycle.response_started:
            self._close("body-timeout")  # answered already: too late for a problem
            return
        of = f" of the {self._body_declared} declared" if self._body_declared is not None else ""
        self._refuse(
            RequestTimeoutError(
                f"the request body arrived too slowly: {self._body_received}{of} bytes in "
                f"{active:.1f}s, where past its first {self.limits.body_timeout:g}s a body must "
                f"keep up {self.limits.body_min_rate} bytes per second (TOOLREF_BODY_TIMEOUT, "
                "TOOLREF_BODY_MIN_RATE); send the body at once, and as many bytes as "
                "Content-Length declares"
            ),
            "body-timeout",
        )

    # --- closing ------------------------------------------------------------------------

    def evict(self) -> None:
        """Close this idle connection to make room for a new one."""
        if self.head_bytes:
            self._refuse(self._overloaded("it waited longest for a request head"), "evicted")
        else:
            self._close("evicted")

    def _overloaded(self, why: str) -> OverloadedError:
        limit = self.limits.max_connections
        return OverloadedError(
            f"this server process has {len(self.connections)} connections open, over its "
            f"limit of {limit} (TOOLREF_MAX_CONNECTIONS), and this one was closed: {why}; "
            f"retry after {self.limits.retry_after}s on a new connection",
            retry_after=self.limits.retry_after,
            limit=limit,
        )

    def _head_too_large(self) -> HeadersTooLargeError:
        return HeadersTooLargeError(
            f"the request line and headers are longer than {self.head_limit} bytes, all this "
            "server reads; send fewer or shorter headers"
        )

    async def _refuse_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app for a request refused at its head (`_refusal`): answer, then close."""
        assert self._refusal is not None
        error, reason = self._refusal
        self.limits.metrics.connections_closed.labels(reason).inc()
        response = problem_response(error)
        response.headers["connection"] = "close"
        response.headers["toolref-protocol"] = "1"
        await response(scope, receive, send)

    def _refuse(self, error: ToolrefError, reason: str) -> None:
        """Answer `error` as problem+json and close; an answer the app may still try to
        send is dropped (its request reads as disconnected)."""
        if self.cycle is not None and not self.cycle.response_complete:
            if self.cycle.response_started:
                self._close(reason)
                return
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        self.transport.write(problem_message(error))
        self._close(reason)

    def _close(self, reason: str) -> None:
        self._cancel_timer()
        self.idle.discard(self)
        self._reading_head = self._reading_body = False
        if not self.transport.is_closing():
            self.limits.metrics.connections_closed.labels(reason).inc()
            self.transport.close()
        self._drop_unsent()

    def _drop_unsent(self) -> None:
        """A closed transport holding part of an answer stays open until the client reads
        it, which it may never do: give it `send_timeout` seconds, then drop it."""
        if self._drop_timer is None and self.transport.get_write_buffer_size():
            self._drop_timer = self.loop.call_later(self.limits.send_timeout, self._dropped)

    def _dropped(self) -> None:
        self._drop_timer = None
        self.transport.abort()  # counted closed already, by the reason it was closed for


def _no_delay(transport: asyncio.Transport) -> None:
    """TCP_NODELAY on the connection, whoever made its listening socket: uvicorn's own, bound
    without naming IPPROTO_TCP when it runs several workers, leaves it off, and an answer's
    head and body written apart then wait ~40 ms for the client's delayed ACK."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
