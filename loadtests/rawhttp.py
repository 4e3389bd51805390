"""A minimal HTTP/1.1 client over asyncio streams, for the gateway-speed bench: cheap enough
that 32 concurrent connections from one Python process do not make the client the bottleneck
(httpx costs about ten times as much per request), and timing to the answer's first body byte.

A connection is kept alive and reused; answers are read by `Content-Length` or chunked.
Requests are built once as bytes (`request`) and sent as they are (`Connection.send`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

_HEAD_LIMIT: Final = 64 * 1024  # bytes of an answer's head


@dataclass(frozen=True, slots=True)
class Answer:
    """One answer: its status and headers (lower-cased names), its body, and seconds from
    the request's first byte sent to the answer's first body byte and to its end."""

    status: int
    headers: dict[str, str]
    body: bytes
    first_byte: float
    total: float


def request(url: str, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    """The bytes of a POST of `body` to `url` (its host and path), framed by length."""
    parts = urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    lines = [f"POST {target} HTTP/1.1", f"host: {parts.netloc}", f"content-length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class Connection:
    """One kept-alive connection to `host:port`; `send` one request at a time."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    @classmethod
    def to(cls, url: str) -> Connection:
        parts = urlsplit(url)
        return cls(parts.hostname or "127.0.0.1", parts.port or 80)

    async def send(self, raw: bytes) -> Answer:
        """Send `raw` and read its answer; once more on a new connection when a kept-alive
        one was closed by the server while idle (nothing of an answer came back)."""
        if self._streams is not None:
            try:
                return await self._exchange(raw)
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                partial = getattr(exc, "partial", b"")
                await self.close()
                if partial:
                    raise
        return await self._exchange(raw)

    async def _exchange(self, raw: bytes) -> Answer:
        if self._streams is None:
            self._streams = await asyncio.open_connection(self.host, self.port, limit=_HEAD_LIMIT)
        reader, writer = self._streams
        started = time.perf_counter()
        writer.write(raw)
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, *lines = head[:-4].decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        status = int(status_line.split(" ", 2)[1])
        first = time.perf_counter() - started  # the head; the body follows at once or streams
        if "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = await _chunked(reader)
        else:  # read to the end: the connection is not reused
            body = await reader.read()
            headers["connection"] = "close"
        total = time.perf_counter() - started
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return Answer(status, headers, body, first, total)

    async def close(self) -> None:
        if self._streams is not None:
            writer = self._streams[1]
            self._streams = None
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


async def _chunked(reader: asyncio.StreamReader) -> bytes:
    pieces: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return b"".join(pieces)
        pieces.append(await reader.readexactly(size + 2))
        pieces[-1] = pieces[-1][:-2]
