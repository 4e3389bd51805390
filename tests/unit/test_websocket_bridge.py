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

    async def send(self, data: str | bytes) -> None:
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
