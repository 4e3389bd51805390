"""The WebSocket driver (`toolref.websocket.driver.Socket`, the gateway's socket to a
provider, the relay's to the gateway) against a peer that sends pings and reads nothing,
over a real loopback socket.

Found in review: each ping read was answered by a pong written straight to the transport,
whatever it already held, so such a peer grew the driver's write buffer by what it sent
(16 MiB of pings: about 15 MiB of pongs held). Now a pong is written only while the buffer
has room under its high-water mark; past it, pings go unanswered (RFC 6455 5.5.3 lets a
later pong answer them) and the buffer stays bounded."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import socket
from typing import Final

from toolref.websocket.client import Closed, Message
from toolref.websocket.driver import connect

KiB: Final = 1024
PINGS: Final = 16 * 1024 * KiB  # bytes of pings the peer sends
BOUND: Final = 256 * KiB  # the high-water mark (64 KiB) with margin; all answered: ~16 MiB
GUID: Final = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


async def test_pings_from_a_peer_that_reads_nothing_leave_the_buffer_bounded() -> None:
    flooded, done = asyncio.Event(), asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        key = next(
            line.split(b":", 1)[1].strip()
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"sec-websocket-key:")
        )
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n"
        )
        chunk = (b"\x89\x7d" + b"p" * 125) * 512  # pings, unmasked as a server sends them
        with contextlib.suppress(OSError):
            for _ in range(PINGS // len(chunk)):
                writer.write(chunk)
                await writer.drain()  # the driver reads them all: this never waits long
        flooded.set()
        await done.wait()  # reads nothing till the test ends
        writer.close()

    listening = socket.socket()
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * KiB)  # takes little
    listening.bind(("127.0.0.1", 0))
    server = await asyncio.start_server(serve, sock=listening)
    port = listening.getsockname()[1]
    opened = await connect(f"ws://127.0.0.1:{port}/v1/x", max_message=1 << 20, connect_timeout=5)
    transport = opened._writer.transport
    transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * KiB)
    receiving = asyncio.create_task(opened.receive())  # reads (and answers pings) meanwhile
    peak = 0
    try:
        while not flooded.is_set():
            peak = max(peak, transport.get_write_buffer_size())
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.1)
        peak = max(peak, transport.get_write_buffer_size())
        assert not receiving.done()  # no message, no close: the pings were all it got
    finally:
        receiving.cancel()
        with contextlib.suppress(BaseException):
            got = await receiving
            assert isinstance(got, Message | Closed)
        opened.abort()
        done.set()
        server.close()
        await server.wait_closed()
    assert peak < BOUND, f"{peak} bytes of pongs buffered for a peer that reads none"
