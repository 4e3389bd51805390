"""A hop between the relay and the gateway that counts what crosses it: each request's bytes
as the relay wrote them (request line, headers and body, framing included), its answer's
status and problem type, and which gateway served it.

The relay is pointed at the hop (`--gateway <hop>`); the hop forwards each request as it
came to one of its gateways, in turn (no affinity: with several gateways a conversation's
turns alternate between them; a request outside any turn, `turn` -1, goes to the next one
without moving the rotation), on a kept-alive connection per gateway, or on a new one per
request (`fresh`: so that the kernel hands each request to whichever worker of a
multi-worker server accepts it first). Answers are read whole and written back framed by
length (timing is not this hop's concern).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Final

from loadtests.rawhttp import Answer, Connection
from toolref.edits.compact import MARKS
from toolref.edits.wire import MEDIA_TYPE
from toolref.kit.varints import read_varint

_LENGTH: Final = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.IGNORECASE)
_CHUNKED: Final = re.compile(rb"\r\ntransfer-encoding:\s*chunked", re.IGNORECASE)
_MEDIA: Final = re.compile(rb"\r\ncontent-type:\s*([^\r\n;]*)", re.IGNORECASE)
_DROP: Final = {"content-length", "transfer-encoding", "connection"}


@dataclass(frozen=True, slots=True)
class Sent:
    """One request the relay sent the gateway."""

    turn: int  # the bench's turn number when it crossed
    method: str
    target: str
    media: str  # its content-type
    wire: int  # bytes as written: request line, headers, body and its framing
    status: int
    problem: str  # the answer's problem type (application/problem+json), else ""
    gateway: int  # which of the hop's gateways served it
    channel: bool = False  # a turn on the channel (a WebSocket frame), not an HTTP request

    @property
    def llm(self) -> bool:
        return self.target.startswith("/llm/")


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """The head and the body of the next request, the body as it came (chunks and all)."""
    head = await reader.readuntil(b"\r\n\r\n")
    found = _LENGTH.search(head)
    if found:
        return head, await reader.readexactly(int(found.group(1)))
    if not _CHUNKED.search(head):
        return head, b""
    parts = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line[:-2].split(b";")[0], 16)
        parts.append(size_line)
        if size == 0:
            while True:
                line = await reader.readuntil(b"\r\n")
                parts.append(line)
                if line == b"\r\n":
                    return head, b"".join(parts)
        parts.append(await reader.readexactly(size + 2))


def problem_of(answer: Answer) -> str:
    if not answer.headers.get("content-type", "").startswith("application/problem+json"):
        return ""
    try:
        found = json.loads(answer.body)
    except ValueError:
        return "unreadable"
    kind = str(found.get("type", "")) if isinstance(found, dict) else ""
    return kind.rsplit("/", 1)[-1].rsplit(":", 1)[-1]  # .../problems/x or urn:...:x


@dataclass
class CountingHop:
    """relay -> hop -> gateways; see the module docstring."""

    gateways: list[str]
    fresh: bool = False
    turn: int = -1
    sent: list[Sent] = field(default_factory=list)
    _next: int = 0
    _kept: dict[int, Connection] = field(default_factory=dict)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one request at a time

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head, body = await read_request(reader)
                if _UPGRADE.search(head):  # the relay's channel: piped, each frame counted
                    await self._channel(head, reader, writer)
                    return
                async with self._lock:
                    index = self._next % len(self.gateways)
                    if self.turn >= 0:  # outside a turn (-1): the rotation does not move
                        self._next += 1
                    answer = await self._forward(index, head + body)
                method, target = head.split(b" ", 2)[:2]
                media = _MEDIA.search(head)
                self.sent.append(
                    Sent(
                        self.turn,
                        method.decode("latin-1"),
                        target.decode("latin-1"),
                        media.group(1).decode("latin-1").strip() if media else "",
                        len(head) + len(body),
                        answer.status,
                        problem_of(answer),
                        index,
                    )
                )
                kept = [f"{k}: {v}" for k, v in answer.headers.items() if k not in _DROP]
                kept.append(f"content-length: {len(answer.body)}")
                back = f"HTTP/1.1 {answer.status} X\r\n" + "\r\n".join(kept) + "\r\n\r\n"
                writer.write(back.encode("latin-1") + answer.body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:  # the run is over: end quietly
            pass
        finally:
            writer.close()

    async def _channel(
        self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """The relay's WebSocket channel (`toolref.websocket.channel`) to the next gateway,
        piped both ways: the upgrade counted as a request, then each turn's frame (its
        WebSocket head and mask included) as one, its status read off the answer's head."""
        index = self._next % len(self.gateways)
        host, port = self.gateways[index].removeprefix("http://").split(":")
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        up_writer.write(head)
        self.sent.append(Sent(self.turn, "GET", "/v1/channel", "", len(head), 101, "", index))
        pending: dict[int, int] = {}  # stream -> its index in `sent`, until its head comes
        target = [""]

        def counted(size: int, payload: bytes) -> None:
            stream, meta, body = _turn(payload)
            target[0] = str(meta.get("p") or target[0])
            compact = tuple(bytes([mark]) for mark in MARKS)  # a compact header's first byte
            edit = body.startswith((b'{"v":', *compact))
            media = MEDIA_TYPE if edit else "application/json"
            pending[stream] = len(self.sent)
            kind = "cancel" if meta.get("c") else media
            sent = Sent(self.turn, "POST", target[0], kind, size, 0, "", index, channel=True)
            self.sent.append(sent)

        def answered(_: int, payload: bytes) -> None:
            stream, at = read_varint(payload, 0)
            if stream in pending and payload[at : at + 1] == b"\x00":  # its head: the status
                status = int(json.loads(payload[at + 1 :])["s"])
                found = pending.pop(stream)
                self.sent[found] = replace(self.sent[found], status=status)

        await asyncio.gather(
            _piped(reader, up_writer, counted, upgraded=True),
            _piped(up_reader, writer, answered, upgraded=False),
            return_exceptions=True,
        )

    async def _forward(self, index: int, raw: bytes) -> Answer:
        if self.fresh:
            connection = Connection.to(self.gateways[index])
            try:
                return await connection.send(raw)
            finally:
                await connection.close()
        kept = self._kept.get(index)
        if kept is None:
            kept = self._kept[index] = Connection.to(self.gateways[index])
        return await kept.send(raw)

    async def close(self) -> None:
        for connection in self._kept.values():
            await connection.close()
        self._kept.clear()

    def of(self, turns: range) -> list[Sent]:
        """The requests that crossed during `turns`."""
        return [s for s in self.sent if s.turn in turns]


async def _piped(
    source: asyncio.StreamReader,
    sink: asyncio.StreamWriter,
    seen: Callable[[int, bytes], None],
    *,
    upgraded: bool,
) -> None:
    """Bytes from `source` to `sink` as they come, each data frame told to `seen` (its size
    and payload); `upgraded` False: the upgrade's answer comes first, passed on uncounted."""
    buffer = b""
    while data := await source.read(1 << 16):
        sink.write(data)
        await sink.drain()
        buffer += data
        if not upgraded:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                continue
            buffer, upgraded = buffer[end + 4 :], True
        while (found := _ws_frame(buffer)) is not None:
            size, payload, carries = found
            buffer = buffer[size:]
            if carries:  # pings, pongs and closes are the socket's, no turn's
                seen(size, payload)
    sink.close()


_UPGRADE: Final = re.compile(rb"\r\nupgrade:\s*websocket", re.IGNORECASE)


def _ws_frame(buffer: bytes) -> tuple[int, bytes, bool] | None:
    """The first whole WebSocket frame of `buffer`: its size in all, its payload (unmasked),
    whether it carries data (binary; not a ping, pong or close); None while it is not all
    there. One frame a message: the channel's peers send no fragments (wsproto writes a
    message as one frame)."""
    if len(buffer) < 2:
        return None
    length, at = buffer[1] & 0x7F, 2
    if length == 126:
        if len(buffer) < 4:
            return None
        length, at = int.from_bytes(buffer[2:4], "big"), 4
    elif length == 127:
        if len(buffer) < 10:
            return None
        length, at = int.from_bytes(buffer[2:10], "big"), 10
    key = b""
    if buffer[1] & 0x80:
        key, at = buffer[at : at + 4], at + 4
    if len(buffer) < at + length:
        return None
    payload = buffer[at : at + length]
    if key:
        payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return at + length, payload, buffer[0] & 0x0F == 0x2


def _turn(payload: bytes) -> tuple[int, dict[str, object], bytes]:
    stream, at = read_varint(payload, 0)
    size, at = read_varint(payload, at)
    assert stream is not None
    assert size is not None
    meta = json.loads(payload[at : at + size]) if size else {}
    return stream, meta, payload[at + size :]
