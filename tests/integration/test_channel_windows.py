"""The channel's windows over real sockets: the sender's `ChannelTransport` (the relay's,
the SDK's) to a receiver served by uvicorn (`serve_channel`, as the gateway and
`ToolRefMiddleware` serve it). A caller that leaves a large streamed answer unread holds at
most a window of it in the sender's memory, the receiver's app waiting on its `send`; a
second turn on the same channel is answered whole meanwhile; read on, the first answer
arrives whole and in order. Before windows, the sender read the whole answer off the
socket into memory, however long its caller left it."""

from __future__ import annotations

import asyncio
import json

import httpx

from tests.support.servers import serve
from toolref.asgi.scope import ASGIApp, Receive, Scope, Send
from toolref.receiving.channel_server import serve_channel
from toolref.sending.channel_link import Link
from toolref.sending.channel_transport import ChannelTransport
from toolref.websocket import channel as frames
from toolref.wire.errors import ToolrefError

PIECE = 64 << 10
TOTAL = 8 * frames.WINDOW  # an answer of 8 windows, in 64 KiB pieces


class Streaming:
    """The receiver's app: `/big` streams `TOTAL` bytes, counting the bytes its `send`
    took; anything else answers at once."""

    def __init__(self) -> None:
        self.handed = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await serve_channel(scope, receive, send, self, refuse=_refuse)
            return
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if scope["path"] != "/big":
            await send({"type": "http.response.body", "body": b"small"})
            return
        for at in range(0, TOTAL, PIECE):
            piece = bytes([at // PIECE % 251]) * PIECE
            await send({"type": "http.response.body", "body": piece, "more_body": True})
            self.handed += PIECE
        await send({"type": "http.response.body", "body": b""})


def _refuse(error: ToolrefError) -> ASGIApp:
    async def refused(scope: Scope, receive: Receive, send: Send) -> None:
        body = json.dumps(error.to_problem()).encode()
        await send({"type": "http.response.start", "status": error.status, "headers": []})
        await send({"type": "http.response.body", "body": body})

    return refused


def held(link: Link) -> int:
    """Bytes of answers the sender holds unread (its queues)."""
    total = 0
    for state in link.streams.values():
        waiting: list[frames.Answered] = list(state.queue._queue)  # type: ignore[attr-defined]
        total += sum(len(found.data) for found in waiting)
    return total


async def test_an_answer_left_unread_holds_a_window_and_the_channel_goes_on() -> None:
    app = Streaming()
    async with serve(app) as url:
        transport = ChannelTransport(
            httpx.AsyncHTTPTransport(), url, None, connect_timeout=5.0, report=print
        )
        async with httpx.AsyncClient(transport=transport, base_url=url, timeout=30) as client:
            request = client.build_request("POST", "/big", content=b"{}")
            big = await client.send(request, stream=True)
            assert big.extensions.get("toolref.channel") is True  # it rode the channel
            link = transport._link
            assert link is not None
            assert link.window == frames.WINDOW
            pieces = big.aiter_raw()
            read = [await anext(pieces)]  # the caller reads one piece, then leaves it
            for _ in range(400):  # until the receiver's app waits on its send
                before = app.handed
                await asyncio.sleep(0.01)
                if app.handed == before and app.handed >= frames.WINDOW:
                    break
            # a window (and the piece read, and the one its `send` holds) at most
            assert app.handed <= 2 * frames.WINDOW + 2 * PIECE < TOTAL
            assert held(link) <= frames.WINDOW
            small = await client.post("/small", content=b"{}")  # the channel goes on
            assert small.content == b"small"
            assert small.extensions.get("toolref.channel") is True
            read += [piece async for piece in pieces]
            await big.aclose()
        expected = b"".join(bytes([i % 251]) * PIECE for i in range(TOTAL // PIECE))
        assert b"".join(read) == expected
