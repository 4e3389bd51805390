"""The gateway's WebSocket bridge (`/llm/...` upgraded) when one side reads slowly or not
at all: what is held where, over real sockets (the service and the upstream under uvicorn,
in this process). Held bytes are measured with tracemalloc: everything Python allocates in
the process (the agent's client, the gateway, the upstream) while 64 messages of 1 MiB are
pushed at a side that reads nothing. Buffering them would hold 64 MiB; the bridge holds one
message each way (in hand, and in the transport toward the side that reads nothing), plus
a read's worth, the upstream's and the agent's own buffers about as much: under 16 MiB.

(a) the agent reads nothing: the bridge stops reading the upstream, whose sends then wait
    (backpressure reaches the provider's socket); (b) the upstream reads nothing: the
bridge stops reading the agent, whose sends wait; (c) either way the other direction goes
on (each has its own task); (d) a side that takes nothing for `TOOLREF_SEND_TIMEOUT`
seconds ends the socket (1001), both hops closed and the tenant's slot given back: before,
it held them until the idle limit (900 s), or for the socket's lifetime while messages
went the other way."""

from __future__ import annotations

import asyncio
import contextlib
import tracemalloc
from collections.abc import Callable
from typing import Final

from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.integration.relay_gateway import KEY, gateway
from tests.integration.test_gateway_websocket import masked_text, raw_upgrade
from toolref.websocket.client import Closed, Message
from toolref.websocket.driver import Refusal, Socket, connect
from toolref.wire.headers import KEY_HEADER

MiB: Final = 1 << 20
MESSAGES: Final = 64
HELD: Final = 16 * MiB  # the bound on what the process holds; buffering all would be 64 MiB
PATH: Final = "/llm/up/v1/stream"


class Upstream:
    """A provider's WebSocket: `flood` sends MESSAGES of 1 MiB once it got a first message
    and reads on beside it; `deaf` reads nothing after accepting (its window fills) until
    `speak` is set: then it sends one message and reads again. It counts what it sent and
    got, and `ended` is set once its connection is over."""

    def __init__(self, flood: bool) -> None:
        self.flood = flood
        self.sent = 0
        self.received: list[str] = []
        self.ended = asyncio.Event()
        self.speak = asyncio.Event()

    def app(self) -> Starlette:
        return Starlette(routes=[WebSocketRoute("/v1/stream", self._socket)])

    async def _socket(self, websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            if self.flood:
                self.received.append(await websocket.receive_text())
                await asyncio.gather(self._send_all(websocket), self._read_all(websocket))
            else:
                await self.speak.wait()
                await websocket.send_text("still here")
                await self._read_all(websocket)  # till it finds the connection gone
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass
        finally:
            self.ended.set()

    async def _send_all(self, websocket: WebSocket) -> None:
        for _ in range(MESSAGES):
            await websocket.send_bytes(b"x" * MiB)
            self.sent += 1

    async def _read_all(self, websocket: WebSocket) -> None:
        while True:
            self.received.append(await websocket.receive_text())


async def settled(count: Callable[[], int]) -> int:
    """`count()` once it stopped growing (unchanged over ten looks 0.2 s apart) or reached
    MESSAGES."""
    last, same = -1, 0
    while same < 10:
        await asyncio.sleep(0.2)
        now = count()
        if now >= MESSAGES:
            return now
        same = same + 1 if now == last else 0
        last = now
    return last


async def open_agent(url: str) -> Socket:
    return await connect(
        url.replace("http://", "ws://") + PATH,
        [(KEY_HEADER, KEY)],
        max_message=2 * MiB,
        connect_timeout=10,
    )


async def slot_comes_back(url: str) -> None:
    """The tenant's one gateway slot, held by the stalled socket, is free again."""
    for _ in range(200):
        try:
            again = await open_agent(url)
        except Refusal as exc:
            if exc.status != 429:
                raise
            await asyncio.sleep(0.1)
            continue
        again.abort()
        return
    raise AssertionError("the stalled socket kept the tenant's gateway slot")


async def test_an_agent_that_reads_nothing_stops_the_upstream_and_holds_little(
    redis: Redis,
) -> None:
    """(a) and (c): the upstream's sends wait once the bridge holds a message for the agent,
    the process holds under HELD, and the agent's next message reaches the upstream once
    the agent reads again."""
    upstream = Upstream(flood=True)
    async with gateway(redis, {"up": upstream.app()}) as service:
        agent = await raw_upgrade(service.url, PATH, receive_buffer=4096)
        loop = asyncio.get_running_loop()
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            await loop.sock_sendall(agent, masked_text("go"))
            sent = await settled(lambda: upstream.sent)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        try:
            assert sent < MESSAGES, "the gateway read every message the agent did not"
            assert peak < HELD, f"{peak / MiB:.1f} MiB held for an agent that reads nothing"
            await loop.sock_sendall(agent, masked_text("still here"))
            # The service reads no more of an agent that reads nothing (its pongs and
            # answers would pile up: `toolref.asgi.paced`); its message goes once it reads.
            for _ in range(200):
                if "still here" in upstream.received:
                    break
                with contextlib.suppress(BlockingIOError):
                    while agent.recv(1 << 20):
                        pass
                await asyncio.sleep(0.05)
            assert upstream.received == ["go", "still here"]
        finally:
            agent.close()


async def test_an_upstream_that_reads_nothing_stops_the_agent_and_holds_little(
    redis: Redis,
) -> None:
    """(b) and (c): the agent's sends wait once the bridge holds a message for the upstream,
    the process holds under HELD, and the upstream's message still reaches the agent."""
    upstream = Upstream(flood=False)
    async with gateway(redis, {"up": upstream.app()}) as service:
        agent = await open_agent(service.url)
        went = 0

        async def send_all() -> None:
            nonlocal went
            for _ in range(MESSAGES):
                await agent.send("y" * MiB)
                went += 1

        tracemalloc.start()
        sending = asyncio.create_task(send_all())
        try:
            tracemalloc.reset_peak()
            sent = await settled(lambda: went)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        try:
            assert sent < MESSAGES, "the gateway read every message the upstream did not"
            assert peak < HELD, f"{peak / MiB:.1f} MiB held for an upstream that reads nothing"
            upstream.speak.set()
            event = await asyncio.wait_for(agent.receive(), 10)
            assert isinstance(event, Message)
            assert event.data == "still here"
        finally:
            sending.cancel()
            with contextlib.suppress(BaseException):
                await sending
            agent.abort()


async def test_an_agent_that_reads_nothing_is_dropped_after_the_send_timeout(
    redis: Redis,
) -> None:
    """(d): the idle limit far off, an agent that reads nothing while the upstream streams
    is let go after the send timeout: the upstream's socket closed, the tenant's slot back
    (both were held until the idle limit)."""
    upstream = Upstream(flood=True)
    async with gateway(
        redis,
        {"up": upstream.app()},
        send_timeout=0.5,
        gateway_ws_idle_timeout=3600,
        gateway_tenant_requests_in_flight=1,
    ) as service:
        agent = await raw_upgrade(service.url, PATH, receive_buffer=4096)
        try:
            await asyncio.get_running_loop().sock_sendall(agent, masked_text("go"))
            await asyncio.wait_for(upstream.ended.wait(), 30)
            await slot_comes_back(service.url)
        finally:
            agent.close()
    assert upstream.sent < MESSAGES


async def test_an_upstream_that_reads_nothing_is_dropped_after_the_send_timeout(
    redis: Redis,
) -> None:
    """(d), the other way: an upstream that takes nothing of the agent's messages ends the
    socket after the send timeout; the agent gets 1001 and the slot comes back."""
    upstream = Upstream(flood=False)
    async with gateway(
        redis,
        {"up": upstream.app()},
        send_timeout=0.5,
        gateway_ws_idle_timeout=3600,
        gateway_tenant_requests_in_flight=1,
    ) as service:
        agent = await open_agent(service.url)

        async def send_all() -> None:
            with contextlib.suppress(OSError, ConnectionError):
                for _ in range(MESSAGES):
                    await agent.send("y" * MiB)

        sending = asyncio.create_task(send_all())
        try:
            closed = await asyncio.wait_for(agent.receive(), 30)
            assert isinstance(closed, Closed), closed
            assert closed.code == 1001
            assert "took nothing" in closed.reason
            upstream.speak.set()  # it reads again, and finds its connection gone
            await asyncio.wait_for(upstream.ended.wait(), 30)
            await slot_comes_back(service.url)
        finally:
            sending.cancel()
            with contextlib.suppress(BaseException):
                await sending
            agent.abort()


async def test_an_agent_that_reads_nothing_through_the_relay_is_dropped_after_its_option(
    redis: Redis,
) -> None:
    """Review (relay and start-up edges): the relay's WebSocket send timeout was a constant
    30 s; `toolref relay --send-timeout` (`RelayConfig.send_timeout`) sets it. The gateway's
    an hour off, an agent reading nothing through the relay while the upstream streams is
    let go after the relay's 0.5 s: the gateway socket, then the upstream's, closed."""
    from tests.support.servers import serve
    from toolref_relay import Relay, RelayConfig

    upstream = Upstream(flood=True)
    async with gateway(
        redis, {"up": upstream.app()}, send_timeout=3600, gateway_ws_idle_timeout=3600
    ) as service:
        relay = Relay(RelayConfig(service.url, key=KEY, send_timeout=0.5), report=lambda _: None)
        async with serve(relay) as relay_url:
            agent = await raw_upgrade(relay_url, PATH, receive_buffer=4096)
            try:
                await asyncio.get_running_loop().sock_sendall(agent, masked_text("go"))
                await asyncio.wait_for(upstream.ended.wait(), 10)  # the constant: 30 s
            finally:
                agent.close()
    assert upstream.sent < MESSAGES
