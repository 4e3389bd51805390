"""The relay's budget of bodies in flight (--max-inflated-in-flight) against answers that
stream for minutes (subagents in parallel), over real sockets, through the service's real
gateway on the test engine (over HTTP and over the channel).

A turn's body is charged until its answer began; the answer then streams holding no body.
Before, the body stayed charged until the answer ended: a few long streams filled the
budget, and the next turn was answered 503 though the relay held almost nothing.
"""

from __future__ import annotations

import asyncio
import gc
import json
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import httpx
import pytest
from redis.asyncio import Redis

from tests.integration.relay_gateway import KEY, MODEL, Scripted, gateway
from tests.support.servers import serve
from toolref_relay import Relay, RelayConfig

pytestmark = pytest.mark.engine

URL = "/llm/anthropic/v1/messages"
LIMIT = 8192  # --max-body-bytes and --max-inflated-bytes
IN_FLIGHT = 5 * LIMIT  # --max-inflated-in-flight
HELD = 6  # streams held at once: their bodies together are past IN_FLIGHT
GUARD = 30.0  # a net for a hang, not a timing check


def _body(n: int, stream: bool = True, lines: int = 400) -> bytes:
    """A turn of about 7 KB (`lines` of 17 bytes), its own conversation (`stream`: its
    answer streamed)."""
    text = f"conversation {n}: " + "tool output line\n" * lines
    turn = {
        "model": MODEL,
        "max_tokens": 16,
        "stream": stream,
        "messages": [{"role": "user", "content": text}],
    }
    return json.dumps(turn).encode()


@pytest.mark.parametrize("channel", [False, True])
async def test_held_streams_do_not_keep_their_bodies_charged(redis: Redis, channel: bool) -> None:
    assert HELD * len(_body(0)) > IN_FLIGHT > 2 * LIMIT
    gate = asyncio.Event()
    provider = Scripted(gate=gate)
    async with gateway(redis, {"anthropic": provider.app()}) as served:
        config = RelayConfig(
            served.url,
            key=KEY,
            channel=channel,
            max_body_bytes=LIMIT,
            max_inflated_bytes=LIMIT,
            max_inflated_in_flight=IN_FLIGHT,
        )
        relay = Relay(config, report=lambda line: None)
        async with serve(relay) as url, AsyncExitStack() as held:
            client = await held.enter_async_context(httpx.AsyncClient(base_url=url))
            headers = {"content-type": "application/json", "x-api-key": "sk-agent"}
            pieces: list[AsyncIterator[bytes]] = []
            for n in range(HELD):
                answer = await held.enter_async_context(
                    client.stream("POST", URL, content=_body(n), headers=headers)
                )
                assert answer.status_code == 200, await answer.aread()
                pieces.append(answer.aiter_raw())  # kept: one let go closes its stream
                async with asyncio.timeout(GUARD):  # its first event: the stream is on
                    assert b"message_start" in await anext(pieces[-1])
            assert relay.budget.in_flight == 0
            another = await client.post(URL, content=_body(HELD, stream=False), headers=headers)
            assert another.status_code == 200, another.text
            gate.set()
        assert relay.budget.in_flight == 0


BIG = 2 << 20  # bytes of a turn held below


@pytest.mark.parametrize("channel", [False, True])
async def test_held_streams_hold_no_body_in_memory(redis: Redis, channel: bool) -> None:
    """What `test_held_streams_do_not_keep_their_bodies_charged` gives back is let go too:
    while three answers stream, no block of a body's size the relay allocated is alive
    (traced: its allocation's stack passes through the relay). Before, the HTTP pool kept
    each request's body until its answer ended, and the channel's answer its request."""
    bodies = [_body(n, lines=BIG // 17) for n in range(3)]
    gate = asyncio.Event()
    provider = Scripted(gate=gate)
    async with gateway(redis, {"anthropic": provider.app()}) as served:
        limit = 2 * BIG
        config = RelayConfig(
            served.url, key=KEY, channel=channel, edits=False, max_body_bytes=limit
        )
        relay = Relay(config, report=lambda line: None)
        async with serve(relay) as url, AsyncExitStack() as held:
            client = await held.enter_async_context(httpx.AsyncClient(base_url=url))
            headers = {"content-type": "application/json", "x-api-key": "sk-agent"}
            pieces: list[AsyncIterator[bytes]] = []
            tracemalloc.start(64)
            try:
                for body in bodies:
                    answer = await held.enter_async_context(
                        client.stream("POST", URL, content=body, headers=headers)
                    )
                    assert answer.status_code == 200, await answer.aread()
                    pieces.append(answer.aiter_raw())
                    async with asyncio.timeout(GUARD):
                        assert b"message_start" in await anext(pieces[-1])
                gc.collect()
                snapshot = tracemalloc.take_snapshot()
            finally:
                tracemalloc.stop()
            kept = [
                trace
                for trace in snapshot.traces
                if trace.size >= BIG // 2
                and any("toolref_relay" in frame.filename for frame in trace.traceback)
            ]
            assert kept == [], [str(trace.traceback) for trace in kept]
            assert len(provider.received) == 3
            gate.set()
