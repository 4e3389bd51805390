"""WebSocket turns counted as HTTP turns are: a Responses WebSocket session through the relay
and the gateway (the latest Codex's default transport) shows on the gateway's `/metrics`
and `/v1/savings` as requests and raw and wire bytes of its tenant and upstream, the same
numbers the relay's turn lines tell. Real sockets throughout: the service on the test
engine, the fake provider's Responses WebSocket, the relay, an agent's socket.

Before, the gateway counted no WebSocket message (the savings page said 13.1x of a session
whose relay said 8.7x), and the relay told a turn line for every message of any socket (a
Realtime API's audio chunks too): every test here failed.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.gateway_usage import Usage, from_metrics, from_savings
from tests.support.fake_provider import FakeProvider
from tests.support.servers import serve
from toolref.websocket.client import Closed, Message
from toolref.websocket.driver import Socket, connect
from toolref.websocket.frames import Encoder
from toolref.wire.headers import CONTEXT_EDITING_HEADER, KEY_HEADER
from toolref_relay import Relay, RelayConfig

from .relay_gateway import KEY, Recorded, gateway
from .test_gateway_websocket import _model, create, events_until_done, response_id

SCRAPER = "scraper-key-0003"  # the metrics key: /metrics and /v1/savings want it
TURNS = 5


def _size(data: str | bytes) -> int:
    return len(data.encode()) if isinstance(data, str) else len(data)


def _echo() -> Starlette:
    """An upstream WebSocket that is not an LLM endpoint's (as OpenAI's Realtime API, whose
    client streams audio in small messages): it echoes each message."""

    async def echo(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            while True:
                await websocket.send_text(await websocket.receive_text())
        except WebSocketDisconnect:
            return

    return Starlette(routes=[WebSocketRoute("/v1/realtime", echo)])


@asynccontextmanager
async def service(redis: Redis, fake: FakeProvider) -> AsyncIterator[Recorded]:
    """The gateway with `fake` (the Responses WebSocket) and `echo` (another WebSocket)."""
    scraper = hashlib.sha256(SCRAPER.encode()).hexdigest()
    async with gateway(redis, {"fake": fake.app, "echo": _echo()}, metrics_key=scraper) as found:
        yield found


async def session(socket: Socket) -> list[str]:
    """A prewarm and `TURNS - 1` turns continuing the one before; the messages sent."""
    sent = [create(0, generate=False)]
    await socket.send(sent[0])
    previous = response_id(await events_until_done(socket))
    for n in range(1, TURNS):
        sent.append(create(n, previous))
        await socket.send(sent[-1])
        previous = response_id(await events_until_done(socket))
    await socket.close()
    return sent


async def usage(url: str) -> tuple[Usage, dict[str, Usage]]:
    async with httpx.AsyncClient(base_url=url) as client:
        return await from_metrics(client, SCRAPER), await from_savings(client, SCRAPER)


def socket_url(base: str, path: str) -> str:
    return base.replace("http://", "ws://") + path


async def test_a_relayed_session_shows_its_turns_and_bytes_on_metrics_and_savings(
    redis: Redis,
) -> None:
    fake, lines = FakeProvider(_model), list[str]()
    async with service(redis, fake) as found:
        relay = Relay(RelayConfig(found.url, key=KEY), report=lines.append)
        async with serve(relay) as relay_url:
            socket = await connect(
                socket_url(relay_url, "/llm/fake/v1/responses"),
                [("Authorization", "Bearer sk-agent")],
                max_message=1 << 20,
                connect_timeout=10,
            )
            sent = await session(socket)
            await asyncio.wait_for(fake.sockets[0].ended.wait(), 10)
        metrics, savings = await usage(found.url)
    assert fake.sockets[0].received == [s.encode() for s in sent]
    # Each message is a request; raw: the agent's bytes (what the provider got); wire: the
    # frames the relay sent, each an edit of the one before (size-guarded: its default).
    encoder = Encoder()
    frames = [encoder.encode(message) for message in sent]
    raw, wire = sum(map(_size, sent)), sum(map(_size, frames))
    assert wire < raw / 2  # the later turns repeat the earlier ones' tools
    row = {"requests": TURNS, "resends": 0, "rawBytes": raw, "wireBytes": wire}
    assert metrics == {("t", "fake"): row}
    assert savings == {"hour": metrics, "day": metrics}
    # The relay told the same turns and bytes: one line each, and its session's sums.
    assert len([line for line in lines if " turn " in line]) == TURNS
    tally = relay.totals.all
    assert (tally.turns, tally.failed, tally.raw, tally.wire) == (TURNS, 0, raw, wire)


async def test_a_socket_straight_to_the_gateway_counts_its_messages_as_they_came(
    redis: Redis,
) -> None:
    """Without the relay's frames, a message's wire bytes are its raw bytes."""
    fake = FakeProvider(_model)
    async with service(redis, fake) as found:
        socket = await connect(
            socket_url(found.url, "/llm/fake/v1/responses"),
            [(KEY_HEADER, KEY), ("Authorization", "Bearer sk-agent")],
            max_message=1 << 20,
            connect_timeout=10,
        )
        sent = await session(socket)
        await asyncio.wait_for(fake.sockets[0].ended.wait(), 10)
        metrics, savings = await usage(found.url)
    size = sum(map(_size, sent))
    row = {"requests": TURNS, "resends": 0, "rawBytes": size, "wireBytes": size}
    assert metrics == {("t", "fake"): row}
    assert savings == {"hour": metrics, "day": metrics}


async def test_a_socket_that_is_no_llm_endpoint_counts_no_turn(redis: Redis) -> None:
    """A WebSocket elsewhere (a Realtime API's audio) carries no LLM turn: its messages are
    not requests, through the gateway as through the relay."""
    lines: list[str] = []
    async with service(redis, FakeProvider(_model)) as found:
        relay = Relay(RelayConfig(found.url, key=KEY), report=lines.append)
        async with serve(relay) as relay_url:
            socket = await connect(
                socket_url(relay_url, "/llm/echo/v1/realtime"),
                max_message=1 << 20,
                connect_timeout=10,
            )
            echoed: list[Message | Closed] = []
            for n in range(3):
                await socket.send(f"audio {n}")
                echoed.append(await asyncio.wait_for(socket.receive(), 10))
            await socket.close()
        metrics, savings = await usage(found.url)
    assert echoed == [Message(f"audio {n}") for n in range(3)]
    assert metrics == {}
    assert savings == {"hour": {}, "day": {}}
    assert relay.totals.all.turns == 0
    assert not [line for line in lines if " turn " in line]


async def socket_sessions(url: str) -> float:
    """`toolref_context_requests_total{outcome="socket"}` on the gateway's /metrics."""
    async with httpx.AsyncClient(base_url=url) as client:
        answer = await client.get("/metrics", headers={"Authorization": f"Bearer {SCRAPER}"})
    answer.raise_for_status()
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            if sample.name == "toolref_context_requests_total" and (
                sample.labels["outcome"] == "socket"
            ):
                return float(sample.value)
    return 0.0


@pytest.mark.parametrize(
    ("asked", "policy", "told"),
    [("on", "off", True), (None, "on", True), (None, "off", False), ("off", "on", False)],
)
async def test_context_editing_asked_of_a_socket_is_said_not_applied(
    redis: Redis,
    caplog: pytest.LogCaptureFixture,
    asked: str | None,
    policy: str,
    told: bool,
) -> None:
    """A session whose header or operator asks for context editing gets none over a
    WebSocket (docs/context-editing.md): before, nothing said so; now an info line and one
    count under `toolref_context_requests_total{outcome="socket"}`."""
    caplog.set_level(logging.INFO, logger="toolref.gateway")
    fake = FakeProvider(_model)
    scraper = hashlib.sha256(SCRAPER.encode()).hexdigest()
    headers = [(KEY_HEADER, KEY)] + ([(CONTEXT_EDITING_HEADER, asked)] if asked else [])
    async with gateway(
        redis, {"fake": fake.app}, metrics_key=scraper, context_editing=policy
    ) as found:
        socket = await connect(
            socket_url(found.url, "/llm/fake/v1/responses"),
            headers,
            max_message=1 << 20,
            connect_timeout=10,
        )
        await socket.send(create(0))
        await events_until_done(socket)
        await socket.close()
        await asyncio.wait_for(fake.sockets[0].ended.wait(), 10)
        counted = await socket_sessions(found.url)
    said = [
        r.getMessage() for r in caplog.records if "not applied over a WebSocket" in r.getMessage()
    ]
    assert counted == (1 if told else 0)
    assert len(said) == (1 if told else 0)
    if told:
        assert ("header" if asked else "policy") in said[0]


async def test_the_relay_asking_for_context_editing_is_said_not_applied(redis: Redis) -> None:
    """`toolref relay --context-editing`: its socket sessions carry the ask to the gateway
    (counted there) and the relay says the session gets none."""
    fake, lines = FakeProvider(_model), list[str]()
    async with service(redis, fake) as found:
        relay = Relay(RelayConfig(found.url, key=KEY, context_editing=True), report=lines.append)
        async with serve(relay) as relay_url:
            socket = await connect(
                socket_url(relay_url, "/llm/fake/v1/responses"),
                max_message=1 << 20,
                connect_timeout=10,
            )
            await socket.send(create(0))
            await events_until_done(socket)
            await socket.close()
            await asyncio.wait_for(fake.sockets[0].ended.wait(), 10)
        counted = await socket_sessions(found.url)
    assert counted == 1
    assert any("context editing" in line and "WebSocket" in line for line in lines), lines
