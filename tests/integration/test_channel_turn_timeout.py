"""One turn's read timeout on a channel shared with another turn, over real sockets (the
sender's `ChannelTransport`, a receiver served by uvicorn with `serve_channel`): the turn
that timed out fails `ReadTimeout` and is cancelled at the receiver (`{"c":1}`), the other
turn, whose caller is still reading its answer, goes on to its end, and the next turn opens
a new channel (the silent one takes no new turn) while the old one carries its last answer.
Before, the timeout dropped the whole channel: the other turn's answer broke off
(`RemoteProtocolError`) as soon as its caller read on."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from tests.support.servers import serve
from tests.unit.test_channel_sides import refuse
from toolref.asgi.scope import Receive, Scope, Send
from toolref.receiving.channel_server import serve_channel
from toolref.sending.channel_link import CARRIED
from toolref.sending.channel_transport import ChannelTransport

_GUARD = 10.0  # seconds: a failure guard only
_TIMEOUT = 0.2  # the hung turn's read timeout


class Receiver:
    """`/slow` answers a first piece, then the rest once `more` is set (a model reasoning in
    silence); `/hung` never answers, saying when it is cancelled; anything else answers at
    once. HTTP is never expected."""

    def __init__(self) -> None:
        self.more, self.cancelled = asyncio.Event(), asyncio.Event()
        self.channels = 0
        self.ended = 0  # channels whose `serve_channel` returned
        self.http: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return
        if scope["type"] == "websocket":
            self.channels += 1
            try:
                await serve_channel(scope, receive, send, self.turn, refuse=refuse)
            finally:
                self.ended += 1
            return
        self.http.append(scope["path"])
        await self.turn(scope, receive, send)

    async def turn(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        if scope["path"] == "/hung":
            try:
                await asyncio.Event().wait()
            finally:
                self.cancelled.set()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if scope["path"] == "/slow":
            await send({"type": "http.response.body", "body": b"first", "more_body": True})
            await self.more.wait()
            await send({"type": "http.response.body", "body": b"rest", "more_body": True})
        await send({"type": "http.response.body", "body": b"done"})


def _turn(url: str, path: str, read: float | None) -> httpx.Request:
    timeouts = {"connect": _GUARD, "read": read, "write": _GUARD, "pool": _GUARD}
    body = json.dumps({"path": path}).encode()
    return httpx.Request("POST", url + path, content=body, extensions={"timeout": timeouts})


async def _sent(transport: ChannelTransport, request: httpx.Request) -> Any:
    return await asyncio.wait_for(transport.handle_async_request(request), _GUARD)


async def test_a_turns_read_timeout_ends_that_turn_not_the_channels_other_turns() -> None:
    receiver, reports = Receiver(), list[str]()
    async with serve(receiver) as url:
        transport = ChannelTransport(
            httpx.AsyncHTTPTransport(), url, None, connect_timeout=_GUARD, report=reports.append
        )
        try:
            slow = await _sent(transport, _turn(url, "/slow", None))
            pieces = slow.stream.__aiter__()
            assert await asyncio.wait_for(anext(pieces), _GUARD) == b"first"
            # its caller does something else now: the channel is silent meanwhile
            hung = asyncio.create_task(_sent(transport, _turn(url, "/hung", _TIMEOUT)))
            try:
                await hung
                raise AssertionError("the hung turn was answered")
            except httpx.ReadTimeout:
                pass
            await asyncio.wait_for(receiver.cancelled.wait(), _GUARD)  # cancelled there
            receiver.more.set()
            rest = [piece async for piece in pieces]  # read on: whole, to its end
            assert rest == [b"rest", b"done"]
            await slow.aclose()
            quick = await _sent(transport, _turn(url, "/quick", None))
            assert await quick.aread() == b"done"
            assert quick.extensions.get(CARRIED) is True  # on a channel, not over HTTP
            assert receiver.channels == 2  # the silent one took no new turn
            for _ in range(400):  # the old one, its last answer read, is closed
                if receiver.ended:
                    break
                await asyncio.sleep(0.005)
            assert receiver.ended == 1
            assert receiver.http == []
            assert reports == []
        finally:
            await transport.aclose()
