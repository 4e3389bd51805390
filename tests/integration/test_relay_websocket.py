"""The relay's WebSocket mode end to end over real sockets: an agent's socket (the
`toolref.websocket` client, as Codex opens it) -> the relay -> the service's gateway (on
the test engine) -> the fake provider's Responses WebSocket. Before WebSocket mode the
relay returned without accepting (uvicorn answered 500, and Codex retried seven times):
every test here failed."""

from __future__ import annotations

import asyncio
import json
import logging
import socket as sockets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from redis.asyncio import Redis

from tests.integration.test_gateway_websocket import (
    Targets,
    create,
    events_until_done,
    raw_upgrade,
    response_id,
)
from tests.support.fake_provider import FakeProvider, Reply
from tests.support.servers import serve
from toolref.websocket.client import Closed, Message
from toolref.websocket.driver import Refusal, Socket, connect
from toolref_relay import Relay, RelayConfig

from .relay_gateway import KEY, Scripted, gateway


def _model(api: str, body: dict[str, Any]) -> Reply:
    return Reply(text=f"seen {len(body['input'])} items", index=len(body["input"]))


@asynccontextmanager
async def relayed(
    redis: Redis, fake: FakeProvider, lines: list[str], **options: Any
) -> AsyncIterator[str]:
    async with gateway(redis, {"fake": fake.app}) as service:
        relay = Relay(RelayConfig(service.url, key=KEY, **options), report=lines.append)
        async with serve(relay) as url:
            yield url


async def agent_socket(relay_url: str, *headers: tuple[str, str]) -> Socket:
    return await connect(
        relay_url.replace("http://", "ws://") + "/llm/fake/v1/responses",
        [("Authorization", "Bearer sk-agent"), *headers],
        max_message=1 << 20,
        connect_timeout=10,
    )


def closed_port_url() -> str:
    with sockets.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


async def test_a_session_reaches_the_provider_byte_for_byte_and_streams_back_exactly(
    redis: Redis,
) -> None:
    fake, lines = FakeProvider(_model), list[str]()
    async with relayed(redis, fake, lines) as relay_url:
        socket = await agent_socket(relay_url, ("OpenAI-Beta", "responses_websockets=2026-02-06"))
        sent, received = [create(0, generate=False)], []
        await socket.send(sent[0])
        received += await events_until_done(socket)
        previous = response_id(received)
        for n in range(1, 6):
            sent.append(create(n, previous))
            await socket.send(sent[-1])
            turn = await events_until_done(socket)
            received += turn
            previous = response_id(turn)
        await socket.close()
        [log] = fake.sockets
        await asyncio.wait_for(log.ended.wait(), 10)
    assert log.received == [s.encode() for s in sent]  # the agent's bytes, in order
    assert [r.encode() for r in received] == log.sent  # the provider's events, in order
    headers = {k.lower(): v for k, v in log.headers}
    assert headers["authorization"] == "Bearer sk-agent"
    assert headers["openai-beta"] == "responses_websockets=2026-02-06"
    assert not any(k.startswith("toolref-") for k in headers)  # the key stayed at the gateway
    # One turn line per message; the later turns travel as a small part of their size.
    turns = [line for line in lines if " turn " in line]
    assert len(turns) == len(sent)
    ratios = [float(line.split("x  (its")[0].rsplit(" ", 1)[1]) for line in turns[2:]]
    assert all(ratio > 5 for ratio in ratios), turns


async def test_an_upstream_without_websockets_is_answered_426_at_once(redis: Redis) -> None:
    fake, lines = FakeProvider(_model, websockets=False), list[str]()
    async with relayed(redis, fake, lines) as relay_url:
        with pytest.raises(Refusal) as refused:
            await agent_socket(relay_url)
    assert refused.value.status == 426
    error = json.loads(refused.value.body)["error"]  # OpenAI's error shape
    assert error["code"] == "toolref_no_websocket"
    assert "426" in error["message"]
    assert any("WebSocket to the gateway" in line for line in lines)


@pytest.mark.parametrize("gateway_kind", ["old", "down"])
async def test_a_gateway_that_cannot_serve_a_websocket_is_answered_426(gateway_kind: str) -> None:
    """An old gateway (HTTP only: a plain app answers the upgrade 403) or none listening."""
    provider = Scripted()

    @asynccontextmanager
    async def gateway_url() -> AsyncIterator[str]:
        if gateway_kind == "down":
            yield closed_port_url()
            return
        async with serve(provider.app()) as url:
            yield url

    async with gateway_url() as url, serve(Relay(RelayConfig(url, key=KEY))) as relay_url:
        with pytest.raises(Refusal) as refused:
            await agent_socket(relay_url)
    assert refused.value.status == 426


async def test_the_agent_leaving_mid_answer_closes_the_providers_socket(redis: Redis) -> None:
    fake = FakeProvider(_model, delay=0.05)
    async with relayed(redis, fake, []) as relay_url:
        socket = await agent_socket(relay_url)
        await socket.send(create(0))
        first = await asyncio.wait_for(socket.receive(), 10)
        assert isinstance(first, Message)
        socket.abort()
        await asyncio.wait_for(fake.sockets[0].ended.wait(), 10)
    events = [json.loads(e)["type"] for e in fake.sockets[0].sent]
    assert "response.completed" not in events


async def test_a_message_over_the_relays_limit_closes_with_1009(redis: Redis) -> None:
    fake = FakeProvider(_model)
    limit = 4096
    async with relayed(
        redis, fake, [], max_body_bytes=limit, max_inflated_bytes=limit
    ) as relay_url:
        socket = await agent_socket(relay_url)
        await socket.send("x" * (limit + 1))
        closed = await asyncio.wait_for(socket.receive(), 10)
        await asyncio.wait_for(fake.sockets[0].ended.wait(), 10)
    assert isinstance(closed, Closed)
    assert closed.code == 1009
    assert fake.sockets[0].received == []


async def test_a_web_page_cannot_open_a_socket_through_the_relay(redis: Redis) -> None:
    fake = FakeProvider(_model)
    async with relayed(redis, fake, []) as relay_url:
        with pytest.raises(Refusal) as refused:
            await agent_socket(relay_url, ("Origin", "https://evil.example"))
    assert refused.value.status == 403
    assert fake.sockets == []


async def test_a_dot_segment_in_the_path_is_refused_400_not_sent_on(redis: Redis) -> None:
    """As over HTTP (`guard.path_refusal`): a path that could leave /llm/NAME/ is the
    agent's mistake, told as one, not a 426 that sends it to HTTP with the same path."""
    fake = FakeProvider(_model)
    async with relayed(redis, fake, []) as relay_url:
        with pytest.raises(Refusal) as refused:
            await connect(
                relay_url.replace("http://", "ws://") + "/llm/fake/v1/../v1/responses",
                max_message=1 << 20,
                connect_timeout=10,
            )
    assert refused.value.status == 400
    assert json.loads(refused.value.body)["error"]["code"] == "toolref_bad_path"
    assert fake.sockets == []


async def test_the_sessions_log_line_tells_its_bytes(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """The relay's line for a socket said "agent sent N bytes" with N its messages' count."""
    fake = FakeProvider(_model)
    caplog.set_level(logging.INFO, logger="toolref.relay")
    async with relayed(redis, fake, []) as relay_url:
        socket = await agent_socket(relay_url)
        sent = [create(0, generate=False)]
        await socket.send(sent[0])
        previous = response_id(await events_until_done(socket))
        sent.append(create(1, previous))
        await socket.send(sent[1])
        await events_until_done(socket)
        await socket.close()
        await asyncio.wait_for(fake.sockets[0].ended.wait(), 10)
        for _ in range(100):  # the relay's line once its bridge ended
            lines = [r.getMessage() for r in caplog.records if " -> fake 101" in r.getMessage()]
            if lines:
                break
            await asyncio.sleep(0.05)
    [line] = lines
    assert f"agent sent {sum(len(s.encode()) for s in sent)} bytes" in line


async def test_a_hash_in_the_agents_target_reaches_the_provider(redis: Redis) -> None:
    """The agent's path and query reach the gateway, and then the provider, as it sent them,
    a `#` included, as the gateway forwards one over HTTP (the relay's client dropped `#x`
    and the gateway's then sent `?a=1`)."""
    targets = Targets()
    async with gateway(redis, {"echo": targets.app()}) as service:
        relay = Relay(RelayConfig(service.url, key=KEY), report=lambda line: None)
        async with serve(relay) as relay_url:
            agent = await raw_upgrade(
                relay_url, "/llm/echo/v1/responses?a=1#x", receive_buffer=1 << 16
            )
            agent.close()
    assert targets.seen == [("websocket", b"/v1/responses?a=1#x")]


async def test_a_quota_refusing_the_gateways_socket_is_told_as_over_http(redis: Redis) -> None:
    """The gateway refuses the relay's socket 429 (the tenant's requests in flight: an open
    socket holds one): the agent's 426 and the relay's line say the gateway's own words, the
    limit and its setting, as the relay's answer over HTTP does (`problems`). Before, both
    said "answered 429" and nothing of why."""
    fake, lines = FakeProvider(_model), list[str]()
    async with gateway(redis, {"fake": fake.app}, gateway_tenant_requests_in_flight=1) as gw:
        relay = Relay(RelayConfig(gw.url, key=KEY), report=lines.append)
        async with serve(relay) as relay_url:
            first = await agent_socket(relay_url)  # holds the tenant's one request in flight
            with pytest.raises(Refusal) as refused:
                await agent_socket(relay_url)
            await first.close()
    assert refused.value.status == 426  # the agent goes on over HTTP at once
    error = json.loads(refused.value.body)["error"]
    assert error["code"] == "toolref_no_websocket"
    said = "TOOLREF_GATEWAY_TENANT_REQUESTS_IN_FLIGHT=1"
    assert f"toolref gateway {gw.url}: " in error["message"]
    assert said in error["message"]
    assert any(said in line and "429" in line for line in lines), lines
