"""`bridge`: an accepted ASGI WebSocket and a `Socket` to the next hop, joined until either
ends: the relay's (agent -> gateway) and the gateway's (relay -> provider), written once.

Messages cross as they come, each whole, in order, one direction not waiting on the other.
The client's messages may be changed on the way (`inbound`: the relay compresses them, the
gateway restores them); the upstream's pass exactly as they came. Either side closing
closes the other with its code (1005 and 1006, which no close frame may carry, become
1000 and 1011). The bridge also ends a connection over its `lifetime` or `idle` (seconds
without a message either way: 1001), a client message over `max_message` bytes (1009;
the upstream's are bounded by its `Client` as they arrive), and one `inbound` refused (a
`ToolrefError`: 1009 for a limit, 1013 when the process is overloaded or the tenant at
its share, else 1007); a fault of the bridge's own closes both ends 1011 (logged), and a
bridge cancelled drops the upstream's connection. Each
message is charged to a fresh `account()` (the process's budget of bytes in flight) while
it is held. `on_sent` is told each client message's bytes as the client sent it and as
it went upstream, once it went (the relay's turn lines, the gateway's usage). Memory: one
message each way, at most, in hand, and one in the transport toward a side slow to read:
each direction sends before it reads the next message, so a side that reads nothing stops
the bridge reading the other side (its sends wait: backpressure reaches its socket), and
the other direction goes on (its own task). A side that takes nothing for `send_timeout`
seconds (`SEND_TIMEOUT`; the gateway's `TOOLREF_SEND_TIMEOUT`) ends the connection 1001
("unread"), both ends closed: the upstream's deadline restarts while it takes some of a
message; the client's server sends a message once the one before it is taken (down to its
low-water mark), so there it is the wait for that. Before, such a side held both ends, the
message and its user's slot until the idle limit, or for the lifetime while messages went
the other way. No close waits on a peer for ever: each side's is given at most
`toolref.websocket.driver.CLOSE_TIMEOUT` seconds, so a peer that reads nothing (its window
full) is let go then and the bridge returns, its user free to release what it holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Final, Protocol

from toolref.asgi.scope import Message, Receive, Send
from toolref.websocket import driver
from toolref.websocket.client import TOO_LARGE, Closed, close_reason
from toolref.websocket.driver import Socket
from toolref.wire.errors import (
    LimitExceededError,
    OverloadedError,
    QuotaExceededError,
    ToolrefError,
)

Inbound = Callable[[str | bytes], Awaitable[str | bytes]]
Sent = Callable[[int, int], None]  # (bytes as the client sent them, as sent upstream)

GOING_AWAY: Final = 1001
INVALID: Final = 1007
INTERNAL: Final = 1011
TRY_LATER: Final = 1013
_NOT_SENT: Final = {1005: 1000, 1006: INTERNAL}  # codes no close frame may carry
SEND_TIMEOUT: Final = 30.0  # seconds a side may take nothing of a message (see above)

log = logging.getLogger(__name__)


class Charge(Protocol):
    def charge(self, size: int) -> None: ...


@dataclass(frozen=True, slots=True)
class Limits:
    """max_message: bytes of one client message; idle, lifetime, send_timeout: seconds."""

    max_message: int
    idle: float
    lifetime: float
    send_timeout: float = SEND_TIMEOUT


@dataclass(frozen=True, slots=True)
class Ended:
    """How a bridged connection ended: `by` the "client", the "upstream", or the bridge
    ("idle", "lifetime", "refused": a message over the limit or one `inbound` refused;
    "unread": a side took nothing of a message for `send_timeout`, 1001;
    "fault": a failure of its own, 1011),
    with the close code and reason; the messages and bytes that crossed each way."""

    by: str
    code: int
    reason: str
    sent: int = 0  # client messages sent upstream
    sent_bytes: int = 0  # their bytes, as they travelled upstream
    received: int = 0  # upstream messages sent to the client


class _Stop(Exception):
    def __init__(self, by: str, code: int, reason: str) -> None:
        super().__init__(reason)
        self.by, self.code, self.reason = by, code, reason


def code_for(error: ToolrefError) -> int:
    """The close code a refused message ends its connection with."""
    if isinstance(error, LimitExceededError):
        return TOO_LARGE
    if isinstance(error, OverloadedError | QuotaExceededError):  # the budget, or a share
        return TRY_LATER
    return INVALID


def _size(data: str | bytes) -> int:
    return len(data.encode()) if isinstance(data, str) else len(data)


def _frame(data: str | bytes) -> Message:
    if isinstance(data, str):
        return {"type": "websocket.send", "text": data}
    return {"type": "websocket.send", "bytes": data}


async def bridge(
    receive: Receive,
    send: Send,
    upstream: Socket,
    limits: Limits,
    *,
    inbound: Inbound | None = None,
    account: Callable[[], AbstractContextManager[Charge]] | None = None,
    on_sent: Sent | None = None,
) -> Ended:
    """Join the accepted ASGI socket (`receive`, `send`) and `upstream` until one ends;
    both are closed when this returns (see the module docstring)."""
    joined = _Bridge(
        receive,
        send,
        upstream,
        limits,
        inbound=inbound,
        account=account or _no_account,
        on_sent=on_sent,
    )
    work = (joined.from_client, joined.from_upstream, joined.watch)
    tasks = [asyncio.create_task(one()) for one in work]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # this task cancelled (the server stopping): the upstream dropped
        upstream.abort()
        raise
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    ended = _outcome(next(iter(done)))
    await _close_both(ended, send, upstream)
    return Ended(
        ended.by, ended.code, ended.reason, joined.sent, joined.sent_bytes, joined.received
    )


class _Bridge:
    def __init__(
        self,
        receive: Receive,
        send: Send,
        upstream: Socket,
        limits: Limits,
        *,
        inbound: Inbound | None,
        account: Callable[[], AbstractContextManager[Charge]],
        on_sent: Sent | None,
    ) -> None:
        self.receive, self.send, self.upstream = receive, send, upstream
        self.limits, self.inbound, self.account = limits, inbound, account
        self.on_sent = on_sent
        self.sent = self.sent_bytes = self.received = 0
        self.last = time.monotonic()

    async def from_client(self) -> Ended:
        while True:
            message = await self.receive()
            if message["type"] == "websocket.disconnect":
                code = int(message.get("code", 1000))
                return Ended("client", code, str(message.get("reason") or ""))
            text = message.get("text")
            data: str | bytes = text if text is not None else message.get("bytes") or b""
            size = _size(data)
            if size > self.limits.max_message:
                raise _Stop("refused", TOO_LARGE, f"message over {self.limits.max_message} bytes")
            with self.account() as charged:
                try:  # past the budget: closed 1013, both ends, as any refusal
                    charged.charge(size)
                    if self.inbound is not None:
                        data = await self.inbound(data)
                        charged.charge(_size(data))
                except ToolrefError as exc:
                    raise _Stop("refused", code_for(exc), exc.detail) from None
                try:
                    await self.upstream.send(data, self.limits.send_timeout)
                except driver.Stalled:
                    raise self._unread("upstream") from None
            went = _size(data)
            self.sent += 1
            self.sent_bytes += went
            self.last = time.monotonic()
            if self.on_sent is not None:
                self.on_sent(size, went)

    async def from_upstream(self) -> Ended:
        while True:
            event = await self.upstream.receive()
            if isinstance(event, Closed):
                return Ended("upstream", event.code, event.reason)
            with self.account() as charged:
                try:
                    charged.charge(_size(event.data))
                except ToolrefError as exc:
                    raise _Stop("refused", code_for(exc), exc.detail) from None
                try:  # the server's send waits while the client's window is full
                    await asyncio.wait_for(self.send(_frame(event.data)), self.limits.send_timeout)
                except TimeoutError:
                    raise self._unread("client") from None
            self.received += 1
            self.last = time.monotonic()

    def _unread(self, side: str) -> _Stop:
        timeout = self.limits.send_timeout
        return _Stop("unread", GOING_AWAY, f"the {side} took nothing for {timeout:g}s")

    async def watch(self) -> Ended:
        limits, start = self.limits, time.monotonic()
        while True:
            now = time.monotonic()
            if now - start >= limits.lifetime:
                return Ended("lifetime", GOING_AWAY, f"open longer than {limits.lifetime:g}s")
            if now - self.last >= limits.idle:
                return Ended("idle", GOING_AWAY, f"no message for {limits.idle:g}s")
            due = min(start + limits.lifetime, self.last + limits.idle)
            await asyncio.sleep(max(due - now, 0.01))


def _outcome(task: asyncio.Task[Ended]) -> Ended:
    error = task.exception()
    if isinstance(error, _Stop):
        return Ended(error.by, error.code, error.reason)
    if isinstance(error, OSError | ConnectionError):
        return Ended("upstream", INTERNAL, f"the upstream connection failed ({error})")
    if error is not None:  # a fault: both ends closed 1011 all the same, none left open
        log.error("a WebSocket bridge failed; both ends closed 1011", exc_info=error)
        return Ended("fault", INTERNAL, "internal error")
    return task.result()


async def _close_both(ended: Ended, send: Send, upstream: Socket) -> None:
    """The close to each side, each waiting at most `driver.CLOSE_TIMEOUT` on a peer that
    reads nothing (`Socket.close` drops the upstream's connection then; the client's server
    drops its own once the bridge's user returns)."""
    code = _NOT_SENT.get(ended.code, ended.code)
    reason = close_reason(ended.reason)
    await upstream.close(code, reason)  # nothing more is sent once the upstream closed
    if ended.by != "client":
        await close_client(send, code, reason)


async def close_client(send: Send, code: int, reason: str = "") -> None:
    """`websocket.close` to an accepted ASGI socket's client, given at most
    `driver.CLOSE_TIMEOUT` seconds: the server's send waits while the client's window is
    full, and one that reads nothing would hold the caller (its slot in flight, its task,
    whatever it holds) for as long as it kept its connection open. A client gone already
    is nothing to close."""
    closing = send({"type": "websocket.close", "code": code, "reason": reason})
    try:
        await asyncio.wait_for(closing, driver.CLOSE_TIMEOUT)
    except TimeoutError:
        log.info(
            "a WebSocket client read nothing for %gs; its close (%d) was not sent",
            driver.CLOSE_TIMEOUT,
            code,
        )
    except Exception:  # the client may be gone already
        log.debug("a WebSocket client was gone before its close (%d)", code, exc_info=True)


class _Nothing:
    def charge(self, size: int) -> None:
        return None


@contextlib.contextmanager
def _no_account() -> Any:
    yield _Nothing()
