"""The sender's open channel (`toolref.sending.channel_link.Link`) against a stand-in
socket: a receiver that takes no frame fails the turns within their write timeout (the
channel dropped), a receiver's text message drops the channel, a turn whose channel is
closing goes over HTTP, and an answer that does not start with its head does not read."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import httpx
import pytest

from toolref.edits.wire import MEDIA_TYPE
from toolref.sending import channel_link
from toolref.sending.channel_link import Link
from toolref.websocket import channel as frames
from toolref.websocket.client import Accepted, Closed, Message
from toolref.websocket.driver import Socket


class Stub:
    """The sender's socket: frames it was given, messages to give, whether it was dropped."""

    def __init__(self, *, deaf: bool = False) -> None:
        self.deaf = deaf  # a receiver that takes no frame: each send waits until dropped
        self.open = True
        self.sent: list[str | bytes] = []
        self.incoming: asyncio.Queue[Message | Closed] = asyncio.Queue()
        self.dropped = asyncio.Event()
        self.accepted = Accepted((), None)  # an older receiver's answer: no windows
        self.peer_closed: Closed | None = None  # a close read, not yet received

    async def send(self, data: str | bytes) -> None:
        self.sent.append(data)
        if self.deaf:
            await self.dropped.wait()

    async def receive(self) -> Message | Closed:
        return await self.incoming.get()

    def abort(self) -> None:
        self.open = False
        self.dropped.set()
        self.incoming.put_nowait(Closed(1006))

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.abort()


def link(socket: Stub) -> Link:
    return Link(cast(Socket, socket), lambda: 0.0)


def turn(write: float | None = None) -> httpx.Request:
    timeouts = {"connect": 1.0, "read": 5.0, "write": write, "pool": 1.0}
    return httpx.Request(
        "POST",
        "http://127.0.0.1:9/v1/messages",
        content=b"{}",
        headers={"content-type": MEDIA_TYPE},
        extensions={"timeout": timeouts},
    )


async def test_a_receiver_that_takes_no_frame_fails_the_turns_within_their_write_timeout() -> None:
    """Its socket's window full, each write waits on it: the turn writing and the turns
    waiting their turn to write fail `WriteTimeout`, as over HTTP, and the channel is
    dropped (the next turn opens a new one), not every turn waiting for ever."""
    socket = Stub(deaf=True)
    channel = link(socket)
    sends = [channel.send(turn(write=0.05)) for _ in range(3)]
    found = await asyncio.wait_for(asyncio.gather(*sends, return_exceptions=True), 5)
    assert all(isinstance(error, httpx.WriteTimeout) for error in found), found
    assert socket.dropped.is_set()
    await asyncio.wait_for(channel.reader, 5)
    assert channel.closed


async def test_a_receivers_text_message_drops_the_channel() -> None:
    """Answer frames are binary: a text message (not a receiver of the channel) fails the
    turns in flight and drops the socket, which was left open (a connection leaked a
    channel)."""
    socket = Stub()
    channel = link(socket)
    waiting = asyncio.create_task(channel.send(turn()))
    await asyncio.sleep(0)
    socket.incoming.put_nowait(Message("hello"))
    with pytest.raises(httpx.RemoteProtocolError):
        await asyncio.wait_for(waiting, 5)
    assert socket.dropped.is_set()
    assert channel.closed


async def test_a_turn_whose_channel_is_closing_is_not_written() -> None:
    """The close came and the reader has not yet ended the channel: the turn would go to
    a socket that sends nothing, and fail; it is `Unsent` (over HTTP) instead."""
    socket = Stub()
    socket.open = False
    channel = link(socket)
    with pytest.raises(channel_link.Unsent):
        await asyncio.wait_for(channel.send(turn()), 5)
    assert socket.sent == []
    assert channel.streams == {}
    await channel.close()


def test_an_answer_that_does_not_start_with_its_head_does_not_read() -> None:
    """A piece whose bytes look like a head is no head: the answer would take its status
    and headers from the body, and drop the real head."""
    looks: Any = frames.Answered(0, frames.PIECE, b'{"s":200,"h":[]}')
    with pytest.raises(frames.FrameError, match="not its head"):
        looks.head()


async def test_a_channel_closed_by_its_owner_before_its_reader_ran_fails_the_turn_on_it() -> None:
    """Its owner closes the channel (`ChannelTransport.aclose`, `close_link`) in the tick it
    opened, a turn written on it already: the reader, cancelled before it ever ran, ends
    nothing, and the turn waited for an answer frame that never comes (for ever, with no
    read timeout). It fails at once, as any turn on a channel closed under it."""
    socket, opened = Stub(), list[Link]()

    async def owner_closes() -> None:  # ready before the channel opens: runs before its reader
        await opened[0].close()

    closing = asyncio.create_task(owner_closes())
    opened.append(channel := link(socket))
    timeouts = {"connect": 1.0, "read": None, "write": None, "pool": 1.0}
    request = turn()
    request.extensions["timeout"] = timeouts
    with pytest.raises(httpx.RemoteProtocolError, match="the channel closed"):
        async with asyncio.timeout(5):  # a failure guard only: before, it waited for ever
            await channel.send(request)  # in this task: written before `closing` runs
    await closing
    assert channel.streams == {}
