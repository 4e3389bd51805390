"""`Client`: one WebSocket connection's client side as pure protocol (over wsproto).

It turns what to do (the upgrade request, a message, a close) into bytes to write, and the
bytes read into events (`Accepted`, `Refused`, `Message`, `Closed`). Nothing here reads a
socket or a clock: the driver (`toolref.websocket.driver`) does the I/O, so the protocol is
tested byte for byte without one.

Bounds, each checked as the bytes arrive: a message is assembled from its frames up to
`max_message` bytes (UTF-8 bytes for text), past which the client closes with 1009 and
reports it, and held as those bytes (one buffer, whatever its frames: a message of many
small or empty frames once held an object per frame, about ten times its bytes, and empty
frames grew it without ever reaching the limit); the body of a refused upgrade is kept up
to `max_refusal` bytes, and the refusal is reported once those came (a body that never
ends is not read until the connect timeout). A ping is
answered with its pong (`outgoing`) while the pongs fit in `pong_room` bytes, which the
driver sets to what its write buffer has left under its high-water mark: past it, a ping
goes unanswered (a peer reading nothing would otherwise have its pongs held without bound;
RFC 6455 5.5.3 lets a later pong answer earlier pings). No extension is offered, so every
frame's payload is its message's bytes (no inflating on this side).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

Headers = tuple[tuple[bytes, bytes], ...]

ABNORMAL: Final = 1006  # the connection ended without a close frame (never sent, RFC 6455)
TOO_LARGE: Final = 1009
REASON_BYTES: Final = 123  # a close frame's payload is 125 bytes: the code, then the reason
MAX_REFUSAL: Final = 64 * 1024  # bytes kept of a refused upgrade's body
MAX_HEAD: Final = 16 * 1024  # bytes of the upgrade's answer's head (h11's, under wsproto)


@dataclass(frozen=True, slots=True)
class Accepted:
    """The server switched protocols: its answer's headers, the subprotocol it chose."""

    headers: Headers
    subprotocol: str | None


@dataclass(frozen=True, slots=True)
class Refused:
    """The server answered the upgrade with a plain HTTP answer: its status, headers and
    body (the first `max_refusal` bytes of it)."""

    status: int
    headers: Headers
    body: bytes


@dataclass(frozen=True, slots=True)
class Message:
    """One whole message: `str` for a text message, `bytes` for a binary one."""

    data: str | bytes


@dataclass(frozen=True, slots=True)
class Closed:
    """The connection is over: the close code and reason the server sent (1006 when the
    connection ended without one), or the client's own (`by_us`: 1009 for a message over
    the limit, 1002 for a frame the protocol forbids)."""

    code: int
    reason: str = ""
    by_us: bool = False


Event = Accepted | Refused | Message | Closed


def close_reason(text: str) -> str:
    """`text` cut to what a close frame carries (`REASON_BYTES` of UTF-8, whole characters)."""
    data = text.encode()
    if len(data) <= REASON_BYTES:
        return text
    return data[: REASON_BYTES - 3].decode(errors="ignore") + "..."


class Client:
    """See the module docstring. `host`: the Host header (with its port when not the
    scheme's); `target`: path and query; `headers`: more request headers, in order."""

    def __init__(
        self,
        host: str,
        target: str,
        headers: Sequence[tuple[str, str]] = (),
        *,
        subprotocols: Sequence[str] = (),
        max_message: int,
        max_refusal: int = MAX_REFUSAL,
    ) -> None:
        self._ws = WSConnection(ConnectionType.CLIENT)
        self._request = Request(
            host=host,
            target=target,
            extra_headers=[(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers],
            subprotocols=list(subprotocols),
        )
        self.max_message = max_message
        self.max_refusal = max_refusal
        self._out = bytearray()
        self._held = bytearray()  # the message being assembled: its (UTF-8) bytes so far
        self._refused: RejectConnection | None = None
        self._refusal = bytearray()
        self.closed: Closed | None = None
        self.head_too_large = False  # the upgrade's answer's head ran past `MAX_HEAD`
        self.pong_room = sys.maxsize  # bytes of pongs `outgoing` may still take

    # --- what to send ---------------------------------------------------------------------

    def handshake(self) -> bytes:
        """The upgrade request's bytes."""
        return self._ws.send(self._request)

    @property
    def open(self) -> bool:
        """Whether a message sent now goes out (no close sent or received yet)."""
        return self._ws.state is ConnectionState.OPEN

    def send(self, data: str | bytes) -> bytes:
        """One whole message (text for `str`); b"" once the connection is closing."""
        if not self.open:
            return b""
        return self._ws.send(TextMessage(data) if isinstance(data, str) else BytesMessage(data))

    def close(self, code: int = 1000, reason: str = "") -> bytes:
        """The close frame (b"" when one was sent already, or the connection is over)."""
        if self._ws.state not in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            return b""
        if self.closed is None:
            self.closed = Closed(code, reason, by_us=True)
        return self._ws.send(CloseConnection(code, close_reason(reason)))

    def outgoing(self) -> bytes:
        """Bytes the protocol itself must send (pongs, the answer to a close), once."""
        data, self._out = bytes(self._out), bytearray()
        return data

    # --- what arrived ---------------------------------------------------------------------

    def receive(self, data: bytes) -> list[Event]:
        """The events `data` completes (b"": the connection ended). Linear in `data`."""
        if self.closed is not None and self._ws.state is ConnectionState.CLOSED:
            return []
        try:
            self._ws.receive_data(data if data else None)
        except RemoteProtocolError as exc:
            hint = exc.event_hint
            cause = exc.__context__  # h11's, in the handshake: 431 says its head limit
            if getattr(cause, "error_status_hint", None) == 431:
                self.head_too_large = True
            if isinstance(hint, CloseConnection):
                self._out += self._ws.send(hint)
                return self._end(Closed(hint.code, close_reason(str(exc)), by_us=True))
            return self._end(Closed(ABNORMAL, close_reason(str(exc)), by_us=True))
        except LocalProtocolError:  # bytes after the connection closed
            return []
        events: list[Event] = []
        for event in self._ws.events():
            found = self._event(event)
            if found is not None:
                events.append(found)
                if isinstance(found, Closed):
                    break
        if not data and self.closed is None:
            if self._refused is not None:  # the body ran to the connection's end
                events.append(self._refusal_event())
            events.append(self._end(Closed(ABNORMAL, "the connection ended"))[0])
        return events

    def _event(self, event: object) -> Event | None:
        if isinstance(event, AcceptConnection):
            return Accepted(tuple(event.extra_headers), event.subprotocol)
        if isinstance(event, RejectConnection):
            self._refused = event
            return None if event.has_body else self._refusal_event()
        if isinstance(event, RejectData):
            if self._refused is None:  # reported already (its body was past `max_refusal`)
                return None
            room = self.max_refusal - len(self._refusal)
            self._refusal += event.data[: max(room, 0)]
            full = len(event.data) >= room  # what is kept came: the rest is not waited for
            return self._refusal_event() if event.body_finished or full else None
        if isinstance(event, TextMessage):
            return self._part(event.data, event.message_finished)
        if isinstance(event, BytesMessage):
            return self._part(bytes(event.data), event.message_finished)
        if isinstance(event, Ping):
            pong = self._ws.send(event.response())
            if len(pong) <= self.pong_room:
                self._out += pong
                self.pong_room -= len(pong)
            return None
        if isinstance(event, CloseConnection):
            reason = event.reason or ""
            if self._ws.state is ConnectionState.OPEN:  # a frame that broke the protocol
                self._out += self.close(event.code, reason)
                return Closed(event.code, close_reason(reason), by_us=True)
            if self._ws.state is ConnectionState.REMOTE_CLOSING:
                self._out += self._ws.send(event.response())
            return self._end(Closed(event.code, reason))[0]
        return None  # a pong

    def _part(self, data: str | bytes, last: bool) -> Event | None:
        if self.closed is not None:  # closing: what still comes is not delivered
            return None
        self._held += data.encode() if isinstance(data, str) else data
        if len(self._held) > self.max_message:
            self._held = bytearray()
            reason = f"message over {self.max_message} bytes"
            self._out += self.close(TOO_LARGE, reason)
            return Closed(TOO_LARGE, reason, by_us=True)
        if not last:
            return None
        held, self._held = bytes(self._held), bytearray()  # a message's frames: one type
        return Message(held.decode() if isinstance(data, str) else held)

    def _refusal_event(self) -> Refused:
        refused = self._refused
        assert refused is not None
        self._refused = None
        return self._end_refused(
            Refused(refused.status_code, tuple(refused.headers), bytes(self._refusal))
        )

    def _end_refused(self, refused: Refused) -> Refused:
        self.closed = Closed(ABNORMAL, f"the upgrade was refused ({refused.status})")
        return refused

    def _end(self, closed: Closed) -> list[Event]:
        if self.closed is None:
            self.closed = closed
        return [closed]
