"""The receiver's cap on a channel's unanswered turns (`toolref.receiving.channel_server`,
twice `frames.MAX_STREAMS`, busy ones included), driven as an ASGI server drives it, and
what the sender makes of its close.

Before: the channel ended at the cap with no close frame (the sender saw the connection
drop, 1006, its turns failing with no reason), and the cap counted turns whose answer had
ended and whose app still ran its own work after it, which the sender no longer has in
flight."""

from __future__ import annotations

import asyncio
from typing import cast

import httpx
import pytest

from tests.unit.test_channel_link import Stub, turn
from tests.unit.test_channel_sides import HEADERS, Socket, serving
from toolref.asgi.scope import Message, Receive, Scope, Send
from toolref.sending.channel_link import Link
from toolref.websocket import channel as frames
from toolref.websocket.client import Closed
from toolref.websocket.driver import Socket as DriverSocket

_CAP = 2 * frames.MAX_STREAMS
_REASON = f"toolref: {_CAP} turns unanswered, their answers not read"


class Deaf(Socket):
    """A sender that reads no answer once `deaf` is set: each write waits on it for ever."""

    def __init__(self) -> None:
        super().__init__()
        self.deaf = False

    async def send(self, message: Message) -> None:
        if self.deaf and message["type"] == "websocket.send":
            await asyncio.Event().wait()
        await super().send(message)


def _closes(socket: Socket) -> list[Message]:
    return [m for m in socket.sent if m["type"] == "websocket.close"]


async def test_a_sender_that_reads_no_answer_has_its_channel_closed_saying_why() -> None:
    socket, started = Deaf(), list[Scope]()
    socket.deaf = True

    async def holding(scope: Scope, receive: Receive, send: Send) -> None:
        started.append(scope)
        await asyncio.Event().wait()

    task = await serving(socket, holding)
    sender = frames.Sender()
    for stream in range(_CAP + 10):
        socket.frame(sender.turn(stream, "/v1/messages", HEADERS, b"x" * 1000))
        await asyncio.sleep(0)  # each turn's task runs as far as it can
    await asyncio.wait_for(task, 10)
    assert len(started) == frames.MAX_STREAMS
    assert _closes(socket) == [{"type": "websocket.close", "code": 1008, "reason": _REASON}]
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert all(t.done() for t in left if "_served" in repr(t.get_coro()))


async def test_turns_past_their_end_do_not_count_toward_the_cap() -> None:
    """`MAX_STREAMS` turns answered whole, their apps still at their own work after it (a
    store's write, a count): those are no longer in the sender's flight, and turns it sends
    next, answered busy, are what the cap counts."""
    socket, release = Deaf(), asyncio.Event()

    async def after_its_end(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        await release.wait()  # its own work, after the answer

    task = await serving(socket, after_its_end)
    sender = frames.Sender()
    for stream in range(frames.MAX_STREAMS):
        socket.frame(sender.turn(stream, "/v1/messages", HEADERS, b"{}"))
        await asyncio.sleep(0)
    for _ in range(200):
        if sum(a.kind == frames.END for a in socket.answers()) == frames.MAX_STREAMS:
            break
        await asyncio.sleep(0.005)
    socket.deaf = True  # the next answers wait: busy turns pile up to the cap, not past it
    for stream in range(frames.MAX_STREAMS, frames.MAX_STREAMS + _CAP):
        socket.frame(sender.turn(stream, "/v1/messages", HEADERS, b"{}"))
        await asyncio.sleep(0)
    for _ in range(20):
        await asyncio.sleep(0)
    assert not task.done()  # before: ended once the turns past their end made up the cap
    assert _closes(socket) == []
    socket.frame(sender.turn(_CAP + frames.MAX_STREAMS, "/v1/messages", HEADERS, b"{}"))
    await asyncio.wait_for(task, 10)  # the cap's own turn: unanswered ones only
    assert _closes(socket) == [{"type": "websocket.close", "code": 1008, "reason": _REASON}]
    release.set()


async def test_the_sender_fails_its_turns_with_the_receivers_close_reason() -> None:
    """Not `frames.DRAINED`: the turns may have been served, so none goes over HTTP; the
    error says why the channel closed."""
    socket = Stub()
    link = Link(cast(DriverSocket, socket), lambda: 0.0)
    waiting = asyncio.create_task(link.send(turn()))
    await asyncio.sleep(0)
    socket.incoming.put_nowait(Closed(1008, _REASON))
    with pytest.raises(httpx.RemoteProtocolError, match=f"the channel closed \\(1008 {_REASON}\\)"):
        await asyncio.wait_for(waiting, 5)
    assert link.failed
