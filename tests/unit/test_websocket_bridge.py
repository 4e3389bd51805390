"""The gateway's WebSocket bridge (`toolref.websocket.bridge`) past the bodies' budget:
a message the budget has no room for ends the connection 1013 at both ends, as any refusal
does (it escaped the bridge, which left the provider's socket open and the client without
a close frame)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any, cast

import pytest

from toolref.asgi.scope import Message
from toolref.websocket import bridge as bridging
from toolref.websocket.client import Closed
from toolref.websocket.client import Message as Frame
from toolref.websocket.driver import Socket
from toolref.wire.errors import OverloadedError


class Upstream:
    """The provider's side: what it was sent, whether it was closed, frames to give."""

    def __init__(self, frames: list[bytes]) -> None:
        self.sent: list[str | bytes] = []
        self.closed: tuple[int, str] | None = None
        self.frames = frames

    async def send(self, data: str | bytes, stall: float | None = None) -> None:
        self.sent.append(data)

    async def receive(self) -> Frame | Closed:
        if self.frames:
            return Frame(self.frames.pop(0))
        await asyncio.Event().wait()
        raise AssertionError

    async def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)


class Full:
    def charge(self, size: int) -> None:
        raise OverloadedError("the bodies in flight leave no room; retry", retry_after=1)


@contextlib.contextmanager
def full() -> Iterator[Full]:
    yield Full()


@pytest.mark.parametrize("side", ["client", "upstream"])
async def test_a_message_past_the_budget_closes_both_ends_1013(side: str) -> None:
    upstream = Upstream([b"from the provider"] if side == "upstream" else [])
    incoming: asyncio.Queue[Message] = asyncio.Queue()
    if side == "client":
        incoming.put_nowait({"type": "websocket.receive", "bytes": b"from the client"})
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    limits = bridging.Limits(max_message=1 << 20, idle=60, lifetime=600)
    ended = await asyncio.wait_for(
        bridging.bridge(
            incoming.get, send, cast(Socket, upstream), limits, account=cast(Any, full)
        ),
        5,
    )
    assert (ended.by, ended.code) == ("refused", bridging.TRY_LATER)
    assert upstream.closed is not None
    assert upstream.closed[0] == bridging.TRY_LATER
    assert sent[-1]["type"] == "websocket.close"
    assert sent[-1]["code"] == bridging.TRY_LATER
    assert upstream.sent == []  # nothing past the budget went on


async def _deaf_upstream() -> tuple[asyncio.Server, int]:
    """A WebSocket server that accepts the upgrade, then never reads again (a stalled
    provider: its receive window fills, and every write to it waits)."""
    import base64
    import hashlib

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        key = next(
            line.split(b":", 1)[1].strip()
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"sec-websocket-key:")
        )
        guid = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
        accept = base64.b64encode(hashlib.sha1(key + guid).digest())
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n"
        )
        await writer.drain()
        await asyncio.Event().wait()  # never reads

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_a_stalled_upstream_does_not_hold_the_bridge_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An upstream that stops reading: the idle limit ends the bridge, and its close frame,
    which that upstream never takes, is given up on after `CLOSE_TIMEOUT` and the
    connection dropped; the client gets its close (the bridge waited on the write for ever,
    holding the socket, its slot and the client open)."""
    from toolref.websocket import driver

    monkeypatch.setattr(driver, "CLOSE_TIMEOUT", 0.2)
    server, port = await _deaf_upstream()
    upstream = await driver.connect(
        f"ws://127.0.0.1:{port}/v1/responses", max_message=64 << 20, connect_timeout=5
    )
    incoming: asyncio.Queue[Message] = asyncio.Queue()
    big = "x" * (8 << 20)  # past what the kernel's buffers hold
    for _ in range(4):
        incoming.put_nowait({"type": "websocket.receive", "text": big})
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    limits = bridging.Limits(max_message=64 << 20, idle=0.3, lifetime=600)
    try:
        ended = await asyncio.wait_for(bridging.bridge(incoming.get, send, upstream, limits), 30)
    finally:
        server.close()
    assert (ended.by, ended.code) == ("idle", bridging.GOING_AWAY)
    assert sent[-1] == {"type": "websocket.close", "code": 1001, "reason": ended.reason}
    assert upstream._writer.transport.is_closing()


async def test_a_fault_of_the_bridge_closes_both_ends_1011() -> None:
    """A fault in restoring a client's message (not a refusal: a bug) closes the upstream's
    socket and the client's, 1011 (it escaped the bridge, which left the provider's socket
    open and the client without a close frame)."""
    upstream = Upstream([])
    incoming: asyncio.Queue[Message] = asyncio.Queue()
    incoming.put_nowait({"type": "websocket.receive", "bytes": b"\x03a frame"})
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def broken(message: str | bytes) -> str | bytes:
        raise IndexError("a fault injected")

    limits = bridging.Limits(max_message=1 << 20, idle=60, lifetime=600)
    ended = await asyncio.wait_for(
        bridging.bridge(incoming.get, send, cast(Socket, upstream), limits, inbound=broken), 5
    )
    assert (ended.by, ended.code) == ("fault", bridging.INTERNAL)
    assert upstream.closed == (bridging.INTERNAL, "internal error")
    assert sent[-1] == {"type": "websocket.close", "code": 1011, "reason": "internal error"}
    assert upstream.sent == []


async def test_a_client_that_reads_nothing_does_not_hold_the_bridge_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client that reads nothing: its server's `send` waits for a window that never
    opens (uvicorn's does), the close included. The idle limit ends the bridge, and the
    close to the client is given up on after `CLOSE_TIMEOUT`, so the bridge returns and its
    user frees what it holds (the gateway's slot, the relay's session); it waited for ever,
    for every user of the bridge (only the gateway bounded its own close)."""
    from toolref.websocket import driver

    monkeypatch.setattr(driver, "CLOSE_TIMEOUT", 0.2)
    upstream = Upstream([b"more than the client's window"])
    incoming: asyncio.Queue[Message] = asyncio.Queue()
    tried: list[Message] = []

    async def send(message: Message) -> None:  # the client's window is full
        tried.append(message)
        await asyncio.Event().wait()

    limits = bridging.Limits(max_message=1 << 20, idle=0.3, lifetime=600)
    ended = await asyncio.wait_for(
        bridging.bridge(incoming.get, send, cast(Socket, upstream), limits), 10
    )
    assert (ended.by, ended.code) == ("idle", bridging.GOING_AWAY)
    assert upstream.closed == (bridging.GOING_AWAY, ended.reason)
    assert tried[-1] == {"type": "websocket.close", "code": 1001, "reason": ended.reason}
    assert ended.received == 0  # the upstream's message never reached the client


async def test_a_side_that_takes_nothing_ends_the_bridge_after_the_send_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An upstream that reads nothing, the idle limit far off and the client still sending:
    after `send_timeout` seconds in which the upstream took none of a message the bridge
    ends 1001 ("unread"), both ends closed (it held them, the message and its user's slot,
    until the idle limit, or for the lifetime while the client kept sending). The relay's
    bridge and the gateway's alike."""
    from toolref.websocket import driver

    monkeypatch.setattr(driver, "CLOSE_TIMEOUT", 0.2)
    server, port = await _deaf_upstream()
    upstream = await driver.connect(
        f"ws://127.0.0.1:{port}/v1/responses", max_message=64 << 20, connect_timeout=5
    )
    incoming: asyncio.Queue[Message] = asyncio.Queue()
    for _ in range(4):
        incoming.put_nowait({"type": "websocket.receive", "text": "x" * (8 << 20)})
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    limits = bridging.Limits(max_message=64 << 20, idle=600, lifetime=600, send_timeout=0.3)
    try:
        ended = await asyncio.wait_for(bridging.bridge(incoming.get, send, upstream, limits), 30)
    finally:
        server.close()
    assert (ended.by, ended.code) == ("unread", bridging.GOING_AWAY)
    assert ended.reason == "the upstream took nothing for 0.3s"
    assert sent[-1] == {"type": "websocket.close", "code": 1001, "reason": ended.reason}
    assert upstream._writer.transport.is_closing()


async def test_a_client_that_reads_nothing_ends_the_bridge_after_the_send_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client whose server's send never returns (its window full), the idle limit far
    off: the bridge ends 1001 after `send_timeout`, the upstream closed with it."""
    from toolref.websocket import driver

    monkeypatch.setattr(driver, "CLOSE_TIMEOUT", 0.2)
    upstream = Upstream([b"more than the client's window"])
    incoming: asyncio.Queue[Message] = asyncio.Queue()

    async def send(message: Message) -> None:
        await asyncio.Event().wait()

    limits = bridging.Limits(max_message=1 << 20, idle=600, lifetime=600, send_timeout=0.3)
    ended = await asyncio.wait_for(
        bridging.bridge(incoming.get, send, cast(Socket, upstream), limits), 10
    )
    assert (ended.by, ended.code) == ("unread", bridging.GOING_AWAY)
    assert upstream.closed == (bridging.GOING_AWAY, "the client took nothing for 0.3s")


async def test_an_upstream_reading_slowly_is_not_cut_by_the_send_timeout() -> None:
    """The upstream's deadline restarts while it takes some: a message that takes it many
    times `stall` to read, read steadily, goes through (no `Stalled`)."""
    import base64
    import hashlib
    import socket as sockets

    from toolref.websocket import driver

    got = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal got
        head = await reader.readuntil(b"\r\n\r\n")
        key = next(
            line.split(b":", 1)[1].strip()
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"sec-websocket-key:")
        )
        accept = base64.b64encode(
            hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest()
        )
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n"
        )
        while data := await reader.read(32 * 1024):  # 32 KiB each 20 ms: slow, steady
            got += len(data)
            await asyncio.sleep(0.02)

    listening = sockets.create_server(("127.0.0.1", 0))
    listening.setsockopt(sockets.SOL_SOCKET, sockets.SO_RCVBUF, 32 * 1024)
    server = await asyncio.start_server(serve, sock=listening, limit=32 * 1024)
    upstream = await driver.connect(
        f"ws://127.0.0.1:{listening.getsockname()[1]}/", max_message=1 << 20, connect_timeout=5
    )
    raw = upstream._writer.get_extra_info("socket")
    raw.setsockopt(sockets.SOL_SOCKET, sockets.SO_SNDBUF, 32 * 1024)
    try:
        await asyncio.wait_for(upstream.send(b"z" * (8 << 20), 0.3), 120)
    finally:
        upstream.abort()
        server.close()
    assert got > 4 << 20  # most of it read by the time the send was done
