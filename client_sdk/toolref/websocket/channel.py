"""The channel's frames: turns and their answers on one WebSocket between a sender (the
relay, the SDK's `AsyncTransport`) and a receiver (the gateway, `ToolRefMiddleware`)
(issue 39: no HTTP head per turn). The sender's side is
`toolref.sending.channel_transport`, the receiver's `toolref.receiving.channel_server`.

Each WebSocket message (binary) is one frame. The sender's, one per request:

    varint(stream) varint(len(meta)) meta body

A turn the agent left is cancelled with a frame of that stream whose meta is `{"c":1}` and
whose body is empty (`Sender.cancel`): the receiver stops serving it, as when a client hangs
up. Where both sides keep windows (below), a frame whose meta is `{"w":N}` and whose body is
empty grants that stream N more bytes of its answer (`Sender.credit`). `meta` is what
changed since the channel's previous request (`Sender`, `Receiver` keep it): empty when the
target and the headers are the same, else a JSON object with `"p"` (the request's path and
query) and/or `"h"` (its headers as `[name, value]` pairs, in order, framing aside). `body`
is the request's body. So a turn of a conversation costs its edit and a few bytes: the
stream id, a zero, the WebSocket frame's own head. Where both sides name bases by stream
(`toolref.websocket.bases`, asked for and granted on the upgrade), an edit's base in
`body` is one byte, how many streams back the turn that made it went, not its 16-byte id.

The receiver's, for a stream, in order:

    varint(stream) 0x00 JSON {"s": status, "h": [[name, value], ...]}   the answer's head
    varint(stream) 0x01 bytes                                         a piece of its body
    varint(stream) 0x02                                               its end
    varint(stream) 0x03 reason                                        it broke off

Streams are answered concurrently; a stream's frames keep their order. Sans-I/O: bytes in,
bytes out; each read bounded by its frame (the WebSocket's message limit bounds that).

Windows (flow control per stream, as HTTP/2's): a sender that asks for them sends
`Toolref-Channel-Window: W` on the upgrade; a receiver that keeps them answers the upgrade
with the window it keeps (`window_granted`: W within `MIN_WINDOW`..`MAX_WINDOW`). Then the
receiver sends at most that many bytes of a stream's pieces beyond those the sender granted
back, and the sender grants them back as its caller reads them (half a window at a time).
So an answer its caller leaves unread holds at most a window in the sender's memory, and
waits at the receiver (which breaks it off after its send timeout, as HTTP drops a client
that reads nothing) without holding up the channel's other turns. Either side without it
(an older one) leaves both without windows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from toolref.kit.varints import read_varint, varint
from toolref.websocket.bases import ReceiverBases, SenderBases
from toolref.wire.headers import CHANNEL_HEADER

MAX_STREAMS: Final = 64  # turns served at once on one channel (a sender sends no more)
# Bytes of turns' bodies a receiver holds at once on one channel (each turn's frame is in
# memory whole while it is served); past them a turn is answered busy (below).
MAX_HELD_BYTES: Final = 64 << 20
# A request frame's meta at most (its target and headers: h11 takes a head of 64 KiB), and its
# headers at most: what changed is read, and a turn's scope is made from them, per frame.
MAX_META_BYTES: Final = 64 << 10
MAX_HEADERS: Final = 256
# A request larger than this is not sent on the channel but over HTTP: a WebSocket server's
# message limit (uvicorn's default 16 MiB, the gateway's `TOOLREF_WS_MAX_BYTES`) would close
# the channel, and every turn on it, for one large first turn.
MAX_FRAME_BYTES: Final = 8 << 20
# On the head of the answer to a turn the receiver had no room for (more than MAX_STREAMS in
# flight): nothing was done with it, and the sender sends it over HTTP instead.
BUSY: Final = (CHANNEL_HEADER, "busy")
# The close a receiver sends once its server stops and every turn it read has its answer
# ended, or once the channel sat idle with no turn in flight
# (`toolref.receiving.channel_server`): a turn its sender wrote that has no answer
# frame at this close was never read, and goes over HTTP (nothing was done with it). Any
# other close, uvicorn's own 1012 at a stop included, says nothing of what was read: a
# turn unanswered at it fails, as on a connection dropped.
DRAINED: Final = (1012, "toolref: every turn read was answered")
# Windows (the module docstring): the header asking for them on the upgrade and granting
# them on its answer; the window a sender asks for (bytes of one answer it holds unread at
# most: 1 MiB at 100 ms round trips still streams 10 MB/s), and the bounds a receiver keeps.
WINDOW_HEADER: Final = "toolref-channel-window"
WINDOW: Final = 1 << 20
MIN_WINDOW: Final = 64 << 10
MAX_WINDOW: Final = 16 << 20
HEAD: Final = 0
PIECE: Final = 1
END: Final = 2
BROKEN: Final = 3
Pairs = list[tuple[str, str]]


class FrameError(ValueError):
    """A frame that does not read: the channel is closed (1002), the sender reconnects."""


@dataclass(frozen=True, slots=True)
class Turn:
    """A request as the receiver reads it off the channel."""

    stream: int
    target: str  # path and query
    headers: Pairs
    body: bytes
    unheld: bool = False  # its edit names a base by a stream this side forgot (`bases`)


@dataclass(frozen=True, slots=True)
class Cancel:
    """The sender left stream `stream` (its caller did): stop serving it."""

    stream: int


@dataclass(frozen=True, slots=True)
class Credit:
    """The sender read `size` more bytes of stream `stream`'s answer: the receiver may send
    as many more (windows only)."""

    stream: int
    size: int


_CANCEL: Final = b'{"c":1}'
_CREDIT: Final = re.compile(rb'\{"w":([1-9][0-9]{0,9})\}')


@dataclass(frozen=True, slots=True)
class Answered:
    """A frame of an answer: its stream, its kind (HEAD, PIECE, END, BROKEN), its bytes."""

    stream: int
    kind: int
    data: bytes

    def head(self) -> tuple[int, Pairs]:
        """The status and headers of a HEAD frame; `FrameError` when it is not one."""
        if self.kind != HEAD:
            kind = self.kind
            raise FrameError(f"stream {self.stream}'s answer starts with kind {kind}, not its head")
        try:
            found = json.loads(self.data)
            status, headers = found["s"], [(str(k), str(v)) for k, v in found["h"]]
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise FrameError(f"an answer's head does not read ({type(exc).__name__})") from None
        if type(status) is not int or not 100 <= status <= 599:
            raise FrameError(f"an answer's status is {status!r}")
        return status, headers


class Sender:
    """The sender's side: a request as a frame, only what changed since the last one sent;
    with `bases`, an edit's base named by the stream that made it (`toolref.websocket.bases`)."""

    def __init__(self, bases: SenderBases | None = None) -> None:
        self.target: str | None = None
        self.headers: Pairs | None = None
        self.bases = bases

    def made(self, stream: int, status: int, headers: Pairs) -> None:
        """Stream `stream`'s answer head came (`bases` remembers the recipe it names)."""
        if self.bases is not None:
            self.bases.made(stream, status, headers)

    def turn(
        self, stream: int, target: str, headers: Sequence[tuple[str, str]], body: bytes
    ) -> bytes:
        meta: dict[str, object] = {}
        listed = [(k, v) for k, v in headers]
        if target != self.target:
            meta["p"] = self.target = target
        if listed != self.headers:
            self.headers = listed
            meta["h"] = [[k, v] for k, v in listed]
        said = json.dumps(meta, separators=(",", ":")).encode() if meta else b""
        if self.bases is not None:
            body = self.bases.written(stream, listed, body)
        return varint(stream) + varint(len(said)) + said + body

    @staticmethod
    def cancel(stream: int) -> bytes:
        return varint(stream) + varint(len(_CANCEL)) + _CANCEL

    @staticmethod
    def credit(stream: int, size: int) -> bytes:
        said = b'{"w":%d}' % size
        return varint(stream) + varint(len(said)) + said


class Receiver:
    """The receiver's side: frames read back into requests, with the channel's memory;
    with `bases`, an edit's base named by stream named by its id again."""

    def __init__(self, bases: ReceiverBases | None = None) -> None:
        self.target: str | None = None
        self.headers: Pairs | None = None
        self.bases = bases

    def made(self, stream: int, status: int, headers: Pairs) -> None:
        """Stream `stream`'s answer head went out (`bases` remembers the recipe it names)."""
        if self.bases is not None:
            self.bases.made(stream, status, headers)

    def turn(self, frame: bytes) -> Turn | Cancel | Credit:
        stream, at = read_varint(frame, 0)
        size, at = read_varint(frame, at)
        if stream is None or size is None or at + size > len(frame):
            raise FrameError("a request frame is cut short")
        if at + size == len(frame):  # no body: a cancel, a credit, or a turn's empty body
            meta = frame[at:]
            if meta == _CANCEL:
                return Cancel(stream)
            if (granted := _CREDIT.fullmatch(meta)) is not None:
                return Credit(stream, int(granted[1]))
        if size > MAX_META_BYTES:
            raise FrameError(f"a request frame's meta is {size} bytes, over {MAX_META_BYTES}")
        if size:
            try:
                meta = json.loads(frame[at : at + size])
                target = meta.get("p", self.target)
                headers = meta.get("h")
            except (ValueError, AttributeError, RecursionError) as exc:
                why = type(exc).__name__
                raise FrameError(f"a request frame's meta is not a JSON object ({why})") from None
            if headers is not None:
                try:
                    self.headers = [(str(k), str(v)) for k, v in headers]
                except (ValueError, TypeError) as exc:
                    raise FrameError(f"a request frame's headers do not read ({exc})") from None
                if len(self.headers) > MAX_HEADERS:
                    raise FrameError(f"a request frame names over {MAX_HEADERS} headers")
            if not isinstance(target, str) or not target.startswith("/"):
                raise FrameError(f"a request frame's target is {target!r}, not a path")
            self.target = target
        if self.target is None or self.headers is None:
            raise FrameError("the channel's first request frame names no target and headers")
        body = frame[at + size :]
        if self.bases is not None:
            read = self.bases.read(stream, self.headers, body)
            if read is None:
                return Turn(stream, self.target, self.headers, b"", unheld=True)
            body = read
        return Turn(stream, self.target, self.headers, body)


# What an HTTP/1.1 head may carry, as h11 (the relay's server, the gateway's server and its
# upstream client) reads and writes it: a header's name a token (RFC 9110 5.1), its value
# latin-1 characters but NUL and whitespace, with single runs of spaces or tabs between
# them (h11's `field_value`, a bytes pattern: DEL and other controls pass), a target the
# same without spaces. Over HTTP the server refuses any other head; a frame's is JSON,
# which can say anything, so the receiver checks it (`unsendable`).
_CHAR: Final = r"[^\x00\t\n\x0b\x0c\r \u0100-\U0010ffff]"
_TOKEN: Final = re.compile(r"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
_VALUE: Final = re.compile(rf"(?:{_CHAR}+(?:[ \t]+{_CHAR}+)*)?")
_TARGET: Final = re.compile(rf"/{_CHAR}*")
_OFF_VALUE: Final = re.compile(r"[\x00\n\x0b\x0c\r\u0100-\U0010ffff]")  # never in a value
_OFF: Final = re.compile(r"[\x00\t\n\x0b\x0c\r \u0100-\U0010ffff]")  # never in a target


def unsendable(turn: Turn) -> str | None:
    """What in `turn`'s target or headers no HTTP/1.1 request could carry (a NUL, a line
    break, a character past latin-1, a name that is no token), in words, or None; a value
    is never repeated (it may be a credential), only where it goes wrong. A receiver
    answers such a turn 400, as an HTTP server answers such a head: sent on as it is, the
    head fails where it is written (h11 refuses it at the upstream), and a character past
    latin-1 fails as the turn's scope is made. O(head)."""
    if not _TARGET.fullmatch(turn.target):
        return f"its target {_where(turn.target, _OFF)}"
    for name, value in turn.headers:
        if not _TOKEN.fullmatch(name):
            return f"its header name {name[:80]!r} is not a token"
        if not _VALUE.fullmatch(value):
            return f"its header {name}'s value {_where(value, _OFF_VALUE)}"
    return None


def _where(text: str, off: re.Pattern[str]) -> str:
    """Where `text` (a target, a header's value) holds a character `off` finds, or that it
    breaks the rule at its ends."""
    found = off.search(text)
    if found is None:
        return "has spaces or tabs at its ends"
    return f"holds U+{ord(found.group()):04X} at character {found.start()}"


def window_granted(asked: str | None) -> int | None:
    """The window a receiver keeps for a sender that asked for `asked` (the upgrade's
    `WINDOW_HEADER`; None: it asked for none, or not as a number of bytes)."""
    if asked is None or not asked.isascii() or not asked.isdigit() or len(asked) > 10:
        return None
    return min(max(int(asked), MIN_WINDOW), MAX_WINDOW)


def window_kept(headers: Sequence[tuple[bytes, bytes]]) -> int | None:
    """The window the receiver's answer to the upgrade (`headers`) grants: None where it
    keeps none (an older receiver), or names one beyond the bounds."""
    for name, value in headers:
        if name.lower() == WINDOW_HEADER.encode():
            text = value.decode("latin-1")
            granted = window_granted(text)
            return granted if granted is not None and str(granted) == text else None
    return None


def head(stream: int, status: int, headers: Sequence[tuple[str, str]]) -> bytes:
    said = json.dumps({"s": status, "h": [[k, v] for k, v in headers]}, separators=(",", ":"))
    return varint(stream) + bytes([HEAD]) + said.encode()


def piece(stream: int, data: bytes) -> bytes:
    return varint(stream) + bytes([PIECE]) + data


def end(stream: int) -> bytes:
    return varint(stream) + bytes([END])


def broken(stream: int, reason: str) -> bytes:
    return varint(stream) + bytes([BROKEN]) + reason.encode()


def answered(frame: str | bytes) -> Answered:
    """An answer frame read; `FrameError` when it does not read (a text message, too)."""
    if isinstance(frame, str):
        raise FrameError("a text message came where answer frames are binary")
    stream, at = read_varint(frame, 0)
    if stream is None or at >= len(frame) or frame[at] > BROKEN:
        raise FrameError("an answer frame does not read")
    return Answered(stream, frame[at], frame[at + 1 :])
