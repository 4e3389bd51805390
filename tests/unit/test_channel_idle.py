"""A channel's receiver closes it once idle (`channel_server`'s `idle_seconds`: the gateway's
TOOLREF_CHANNEL_IDLE_SECONDS, `ToolRefMiddleware(channel_idle_seconds=...)`): no turn in
flight and no frame received for that long. Before, the receiver had no idle timeout of its
own: a client that opened channels and sent nothing held a connection each for ever (with
one tenant, or none, bounded only by the worker's connections; `ToolRefMiddleware` had no
bound at all). The close is `frames.DRAINED` (1012, "every turn read was answered"), true of
an idle channel, which its sender takes as a clean close between turns.

Driven in process as an ASGI server drives it (`test_channel_sides.Socket`); end to end with
the real sender over real sockets in tests/integration/test_channel_idle.py."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import httpx
import pytest

from tests.unit.test_channel_sides import HEADERS, UPGRADE, Socket, answering, refuse, settled
from toolref import AsyncRegistryClient, ToolRefMiddleware
from toolref.asgi.scope import Message, Receive, Scope, Send
from toolref.receiving.channel_server import IDLE_SECONDS, serve_channel
from toolref.sending import channel_transport
from toolref.websocket import channel as frames

_GUARD = 10.0  # seconds: a failure guard only
_IDLE = 0.05


def _close(socket: Socket) -> Message:
    [close] = [m for m in socket.sent if m["type"] == "websocket.close"]
    return close


async def test_a_channel_idle_past_its_time_is_closed_drained() -> None:
    socket, seen = Socket(), list[Scope]()
    task = asyncio.create_task(
        serve_channel(
            UPGRADE, socket.receive, socket.send, answering(seen), refuse=refuse,
            idle_seconds=_IDLE,
        )
    )  # fmt: skip
    socket.frame(frames.Sender().turn(0, "/v1/messages", HEADERS, b"{}"))
    await settled(socket, 3)
    await asyncio.wait_for(task, _GUARD)  # ended by itself: no frame came after the turn
    assert [a.kind for a in socket.answers()] == [frames.HEAD, frames.PIECE, frames.END]
    close = _close(socket)
    assert (close["code"], close["reason"]) == frames.DRAINED


async def test_a_turn_in_flight_keeps_an_idle_channel_open_until_it_ends() -> None:
    """A model answering in silence for longer than the idle time is no idle channel: the
    time counts from the turn's end."""
    socket, seen, release = Socket(), list[Scope](), asyncio.Event()
    quick = answering(seen)

    async def slow(scope: Scope, receive: Receive, send: Send) -> None:
        await release.wait()
        await quick(scope, receive, send)

    task = asyncio.create_task(
        serve_channel(UPGRADE, socket.receive, socket.send, slow, refuse=refuse, idle_seconds=_IDLE)
    )
    socket.frame(frames.Sender().turn(0, "/v1/messages", HEADERS, b"{}"))
    await asyncio.sleep(_IDLE * 6)  # far past the idle time, the turn still served
    assert not socket.closed.is_set()
    release.set()
    await asyncio.wait_for(task, _GUARD)
    assert [a.kind for a in socket.answers()] == [frames.HEAD, frames.PIECE, frames.END]
    assert (_close(socket)["code"], _close(socket)["reason"]) == frames.DRAINED


async def test_a_sender_gone_before_the_idle_time_is_not_closed() -> None:
    socket = Socket()
    task = asyncio.create_task(
        serve_channel(
            UPGRADE, socket.receive, socket.send, answering([]), refuse=refuse,
            idle_seconds=_GUARD,
        )
    )  # fmt: skip
    socket.leave()
    await asyncio.wait_for(task, _GUARD)
    assert [m["type"] for m in socket.sent] == ["websocket.accept"]


def test_the_receivers_idle_time_is_past_the_senders() -> None:
    """The sender closes a channel idle `IDLE_SECONDS` itself before its next turn: the
    receiver's default waits well past it, so a sender's channel is never closed under it
    by this close but at its own idle."""
    assert IDLE_SECONDS == 300.0
    assert IDLE_SECONDS > 2 * channel_transport.IDLE_SECONDS


def _middleware(**options: Any) -> ToolRefMiddleware:
    registry = AsyncRegistryClient(
        "http://registry.test", transport=httpx.MockTransport(lambda r: httpx.Response(500))
    )
    return ToolRefMiddleware(answering([]), registry, channel_path="/v1/channel", **options)


async def test_the_middleware_closes_its_idle_channels_after_channel_idle_seconds() -> None:
    assert _middleware().channel_idle_seconds == IDLE_SECONDS
    middleware, socket = _middleware(channel_idle_seconds=_IDLE), Socket()
    await asyncio.wait_for(middleware(UPGRADE, socket.receive, socket.send), _GUARD)
    assert (_close(socket)["code"], _close(socket)["reason"]) == frames.DRAINED


@pytest.mark.parametrize(
    ("given", "error"),
    [(0, ValueError), (-1.0, ValueError), (math.nan, ValueError), (math.inf, ValueError),
     ("300", TypeError), (True, TypeError), (None, TypeError)],
)  # fmt: skip
def test_a_channel_idle_time_that_cannot_work_is_refused_where_given(
    given: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match="channel_idle_seconds"):
        _middleware(channel_idle_seconds=given)
