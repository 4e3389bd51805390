"""Turns a channel's receiver never read, at its drained close (`frames.DRAINED`: every
turn it read was answered), over real sockets: each goes over HTTP, and the relay's wire
count (`Meter`) keeps the frame that went out for it. A raw server on loopback with a small
receive buffer stands for a receiver that stops reading part way through a large frame.

Before: the frame of a turn resent over HTTP was left out of the relay's wire bytes; a
large frame still being written as the drained close came failed `WriteTimeout` (the
channel dropped with it); and a turn unread at that close failed `RemoteProtocolError`
when the channel's owner closed it while its reader was still handling the close."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket as sockets
import struct
from collections.abc import AsyncIterator
from typing import Any

import httpx

from tests.adversarial.test_websocket_slow_server import Http, Talk, accept, frame, read_frame
from tests.integration.test_channel_drain import Stopping
from tests.support.servers import serve
from toolref.kit.varints import varint
from toolref.sending.channel_link import FRAMED
from toolref.sending.channel_transport import ChannelTransport
from toolref.websocket import channel as frames
from toolref_relay.calls import Meter, wire_size

_GUARD = 10.0  # seconds: a failure guard only
_BIG = 7 << 20  # a turn's body: past what the sender's and the server's buffers hold
_WRITE = 1.0  # the big turn's write timeout: the drained close comes well within it


def _turn(url: str, body: bytes, write: float = _GUARD) -> httpx.Request:
    timeouts = {"connect": _GUARD, "read": _GUARD, "write": write, "pool": _GUARD}
    return httpx.Request(
        "POST", url + "/v1/messages", content=body, extensions={"timeout": timeouts}
    )


async def _sent(send: Any, request: httpx.Request) -> Any:
    answer = await asyncio.wait_for(send.handle_async_request(request), _GUARD)
    await answer.aread()
    return answer


async def test_a_turn_resent_over_http_at_a_drained_close_counts_its_frame_on_the_wire() -> None:
    receiver = Stopping(*frames.DRAINED)  # answers its first turn, closes drained at the next
    async with serve(receiver) as url:
        transport = ChannelTransport(
            httpx.AsyncHTTPTransport(), url, None, connect_timeout=_GUARD, report=print
        )
        meter = Meter(transport)  # the relay's, over its pool
        try:
            first = await _sent(meter, _turn(url, b'{"turn": 1}'))
            assert first.content == b"channel"
            meter.sent = 0
            second = _turn(url, b'{"turn": 2}')
            answer = await _sent(meter, second)
        finally:
            await transport.aclose()
    assert answer.content == b"http"  # unread: resent over HTTP
    framed = len(varint(1) + varint(0) + second.content)  # its target, headers unchanged
    assert answer.extensions.get(FRAMED) == framed
    assert meter.sent == framed + wire_size(second)  # before: the HTTP request alone


@contextlib.asynccontextmanager
async def _server(talk: Talk) -> AsyncIterator[str]:
    """`talk` per connection on loopback, each connection's receive buffer small (so a
    large frame the server stops reading stays in the sender's buffers); its base URL."""
    listening = sockets.socket()
    listening.setsockopt(sockets.SOL_SOCKET, sockets.SO_RCVBUF, 16 << 10)
    listening.bind(("127.0.0.1", 0))
    tasks: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            await talk(reader, writer)
        writer.transport.abort()

    server = await asyncio.start_server(serve, sock=listening)
    try:
        yield f"http://127.0.0.1:{listening.getsockname()[1]}"
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await server.wait_closed()


def _stopping(unanswered: int) -> Talk:
    """A receiver that answers its first turn, reads `unanswered` more turns whole and
    answers none, reads the next frame's first bytes, then closes drained and reads
    nothing more (its stop came: those turns it did not read)."""

    async def talk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(accept(await reader.readuntil(b"\r\n\r\n")))
        await read_frame(reader)
        for data in (frames.head(0, 200, []), frames.piece(0, b"channel"), frames.end(0)):
            writer.write(frame(0x2, data))
        for _ in range(unanswered):
            await read_frame(reader)
        await reader.readexactly(2)  # the big frame's first bytes
        code, reason = frames.DRAINED
        writer.write(frame(0x8, struct.pack("!H", code) + reason.encode()))
        await asyncio.Event().wait()  # reads nothing more

    return talk


async def test_a_large_turn_being_written_at_a_drained_close_goes_over_http() -> None:
    async with _server(_stopping(unanswered=0)) as url:
        inner = Http()
        transport = ChannelTransport(inner, url, None, connect_timeout=_GUARD, report=print)
        try:
            assert (await _sent(transport, _turn(url, b"{}"))).content == b"channel"
            big = _turn(url, b"x" * _BIG, write=_WRITE)
            answer = await _sent(transport, big)  # before: WriteTimeout
        finally:
            await transport.aclose()
    assert answer.content == b"over http"
    assert inner.sent == [big]
    assert answer.extensions.get(FRAMED) == len(varint(1) + varint(0)) + _BIG


async def test_a_channel_closed_by_its_owner_as_a_drained_close_is_handled_sends_unread_turns_over_http() -> (  # noqa: E501
    None
):
    """The reader read the drained close and waits for the big frame to go (its close's
    answer is behind it) when the owner closes the channel: the turn the receiver never
    answered goes over HTTP, as the reader would have told it."""
    async with _server(_stopping(unanswered=1)) as url:
        inner = Http()
        transport = ChannelTransport(inner, url, None, connect_timeout=_GUARD, report=print)
        try:
            assert (await _sent(transport, _turn(url, b"{}"))).content == b"channel"
            link = transport._link
            assert link is not None
            unread = asyncio.create_task(_sent(transport, _turn(url, json.dumps([2]).encode())))
            await asyncio.sleep(0)  # written first
            big = asyncio.create_task(_sent(transport, _turn(url, b"x" * _BIG, write=_WRITE)))
            for _ in range(2000):  # the reader read the close
                if link.socket.peer_closed is not None:
                    break
                await asyncio.sleep(0.005)
            assert link.socket.peer_closed is not None
            assert not link.over  # its reader still handles it
            await transport.close_link()  # its owner closes it now
            answers = await asyncio.gather(unread, big, return_exceptions=True)
        finally:
            await transport.aclose()
    assert [getattr(a, "content", a) for a in answers] == [b"over http", b"over http"]
    assert len(inner.sent) == 2
