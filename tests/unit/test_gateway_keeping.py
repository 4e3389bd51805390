"""The gateway's turn, ordered for the upstream: the recipe's keeping waits until the
restored body went upstream (`registry.edits.Keeping`, the forwarder's `SENT_KEY`), and the
upstream pool's readability probe asks the socket alone (`upstream_pool._Probed`)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpcore2

from toolref.asgi.budget import Budget
from toolref_server.gateway.forwarder import _sent_once
from toolref_server.gateway.upstream_pool import _Probed
from toolref_server.registry.edits import Keeping, keeping_done, kept


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_keeping_runs_nothing_before_it_is_started() -> None:
    ran: list[str] = []

    async def keep() -> str:
        ran.append("kept")
        return "a result a finished task would hold"

    keeping = Keeping(keep())
    await _turns()
    assert ran == []  # created first, it still waits for the body to go upstream
    keeping.start()
    await keeping_done(keeping)
    assert ran == ["kept"]
    assert keeping.task.result() is None  # the keep's result is dropped


async def test_kept_starts_a_keeping_never_started() -> None:
    """A request whose body never went upstream (the upstream unreachable, the client
    gone) still keeps its recipe: `kept`, in the forward's `finally`, starts it."""
    ran: list[str] = []

    async def keep() -> None:
        ran.append("kept")

    keeping = Keeping(keep())
    await kept(keeping, "tb_x")
    assert ran == ["kept"]


async def test_the_body_is_sent_before_sent_is_told() -> None:
    told: list[str] = []
    budget = Budget(1 << 20)
    with budget.account() as account:
        account.charge(3)
        pieces = _sent_once(b"abc", account, lambda: told.append("sent"))
        assert await pieces.__anext__() == b"abc"
        assert told == []  # the connection writes the piece before it asks for the next
        assert [p async for p in pieces] == []
        assert told == ["sent"]
        assert budget.in_flight == 0


class _Inner(httpcore2.AsyncNetworkStream):
    """A connected socket, counting the questions asked of it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.asked: list[str] = []

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        return None

    async def aclose(self) -> None:
        self.sock.close()

    def get_extra_info(self, info: str) -> Any:
        self.asked.append(info)
        return self.sock if info == "socket" else None


def test_the_readability_probe_asks_the_socket_alone() -> None:
    mine, theirs = socket.socketpair()
    try:
        inner = _Inner(mine)
        probed = _Probed(inner)
        assert [probed.get_extra_info("is_readable") for _ in range(100)] == [False] * 100
        theirs.send(b"bytes after the answer's end")
        assert probed.get_extra_info("is_readable") is True  # such a connection is closed
        assert inner.asked == ["socket"]  # looked up once, not once a probe
        assert probed.get_extra_info("socket") is mine
        probed.get_extra_info("server_addr")
        assert inner.asked == ["socket", "server_addr"]  # the rest is the inner stream's
    finally:
        mine.close()
        theirs.close()
