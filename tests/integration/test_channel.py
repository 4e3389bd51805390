"""The channel (issue 39): the relay sends every turn over one WebSocket to the service's
real gateway (served by uvicorn, on the test engine), no HTTP head per turn; a provider
behind streams each answer (the only fake: what is outside the machine).

Every body reaches the provider byte for byte and every streamed answer the agent, turns
in flight at once are answered each on its own stream, and a gateway that refuses the
upgrade (an older one, a proxy without WebSockets) gets the same turns over HTTP.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.integration.test_answer_dictionary import Provider, replies, result, written_back
from tests.support.servers import serve, serve_all
from tests.unit.edits.agents import HEADERS
from toolref.asgi.scope import ASGIApp, Message, Receive, Scope, Send
from toolref.edits import compact
from toolref.websocket import channel as frames
from toolref_relay import Relay, RelayConfig
from toolref_relay.ledger import size
from toolref_server.app import create_app
from toolref_server.settings import Settings

pytestmark = pytest.mark.engine

KEY = "tenant-key-of-the-channel-tests"
MODEL = "scripted-1"


@dataclass
class Seen:
    """The gateway as served, counting what reached it: HTTP requests to `/llm/`, and
    WebSocket upgrades (refused when `refuse`, as a proxy without WebSockets would)."""

    app: ASGIApp
    refuse: bool = False
    http: list[str] = field(default_factory=list)
    sockets: int = 0
    frames: list[int] = field(default_factory=list)  # the bytes of each channel message
    messages: list[bytes] = field(default_factory=list)  # and the messages themselves

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            self.sockets += 1
            if self.refuse:
                await receive()
                await send({"type": "websocket.close", "code": 1008})
                return
            receive = self._framed(receive)
        elif scope["type"] == "http" and scope["path"].startswith("/llm/"):
            self.http.append(scope["path"])
        await self.app(scope, receive, send)

    def _framed(self, receive: Receive) -> Receive:
        async def framed() -> Message:
            message = await receive()
            if message["type"] == "websocket.receive":
                self.frames.append(len(message.get("bytes") or b""))
                self.messages.append(message.get("bytes") or b"")
            return message

        return framed


@asynccontextmanager
async def relayed(
    redis: Redis, provider: Provider, *, refuse: bool = False
) -> AsyncIterator[tuple[str, Seen, list[str]]]:
    async with serve_all(provider.app()) as [provider_url]:
        tenant = f"t={hashlib.sha256(KEY.encode()).hexdigest()}"
        config = Settings(
            redis_url="unused", upstreams=f"anthropic={provider_url}", api_keys=tenant
        )
        seen = Seen(create_app(config, redis=redis), refuse=refuse)
        async with serve_all(seen) as [url]:
            lines: list[str] = []
            relay = Relay(RelayConfig(url, key=KEY), report=lines.append)
            async with serve(relay) as relay_url:
                yield relay_url, seen, lines


async def converse(relay_url: str, provider: Provider, turns: int) -> list[bytes]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Build it. " * 60}]
    bodies = []
    async with httpx.AsyncClient(timeout=30) as agent:
        for n in range(turns):
            body = {"model": MODEL, "max_tokens": 512, "stream": True, "messages": messages}
            data = json.dumps(body).encode()
            bodies.append(data)
            url = relay_url + "/llm/anthropic/v1/messages"
            answer = await agent.post(url, content=data, headers=HEADERS)
            assert answer.status_code == 200, answer.text
            assert answer.content == provider.streamed[-1]  # the stream, byte for byte
            reply = provider.replies[n]
            back = written_back("messages", reply)
            messages = [*messages, back, result("messages", reply, n)]
    return bodies


async def test_every_turn_rides_the_channel_exactly(redis: Redis) -> None:
    provider = Provider(replies(8, 5))
    async with relayed(redis, provider) as (relay_url, seen, _):
        bodies = await converse(relay_url, provider, 8)
    assert provider.seen == bodies
    assert seen.sockets == 1  # one channel for the whole conversation
    assert seen.http == []  # no turn went over HTTP


async def test_a_turn_names_its_base_by_the_stream_that_made_it(redis: Redis) -> None:
    """Bases by stream (`toolref.websocket.bases`): each continuation turn's edit names the
    recipe its turn before made by one byte, not its 16-byte id, and the gateway writes the
    id back: every body still reaches the provider byte for byte."""
    provider = Provider(replies(6, 3))
    async with relayed(redis, provider) as (relay_url, seen, _):
        bodies = await converse(relay_url, provider, 6)
    assert provider.seen == bodies
    assert seen.http == []
    reader = frames.Receiver()  # the channel's memory of targets and headers, no bases
    read = [reader.turn(message) for message in seen.messages]
    turns = [turn for turn in read if isinstance(turn, frames.Turn)]
    assert len(turns) == 6
    named = [compact.named_back(turn.body) for turn in turns]
    assert named[0] is None  # the first: the whole request
    assert all(found is not None and found[0] == 1 for found in named[1:])  # the one before


async def test_turns_at_once_are_answered_each_on_its_own_stream(redis: Redis) -> None:
    provider = Provider(replies(6, 6))
    async with relayed(redis, provider) as (relay_url, seen, _):
        await converse(relay_url, provider, 1)  # the channel opened
        provider.seen.clear()
        bodies = [
            json.dumps({"model": MODEL, "stream": True, "max_tokens": 9, "messages": [
                {"role": "user", "content": f"conversation {n}: " + "go " * 200}
            ]}).encode()
            for n in range(5)
        ]  # fmt: skip
        async with httpx.AsyncClient(timeout=30) as agent:
            answers = await asyncio.gather(
                *(
                    agent.post(relay_url + "/llm/anthropic/v1/messages", content=b, headers=HEADERS)
                    for b in bodies
                )
            )
    assert all(a.status_code == 200 for a in answers)
    assert sorted(provider.seen) == sorted(bodies)
    assert all(a.content in provider.streamed for a in answers)  # each whole, none mixed
    assert seen.sockets == 1
    assert seen.http == []


async def test_a_gateway_that_refuses_the_channel_gets_every_turn_over_http(redis: Redis) -> None:
    provider = Provider(replies(5, 7))
    async with relayed(redis, provider, refuse=True) as (relay_url, seen, lines):
        bodies = await converse(relay_url, provider, 5)
    assert provider.seen == bodies
    assert seen.sockets == 1  # tried once, then HTTP for `retry_seconds`
    assert len(seen.http) == 5
    assert any("no channel to " in line and "over HTTP" in line for line in lines)


async def test_a_request_the_relay_streams_on_goes_over_http_beside_the_channel(
    redis: Redis,
) -> None:
    """A pass-through (not an LLM endpoint: its body streamed on as it comes) takes HTTP,
    while the channel is open."""
    provider = Provider(replies(3, 8))
    async with relayed(redis, provider) as (relay_url, seen, _):
        await converse(relay_url, provider, 1)
        async with httpx.AsyncClient(timeout=30) as agent:
            other = await agent.post(
                relay_url + "/llm/anthropic/v1/files", content=b"x" * 16000, headers=HEADERS
            )
    assert other.status_code == 200
    assert provider.seen[-1] == b"x" * 16000
    assert seen.sockets == 1
    assert seen.http == ["/llm/anthropic/v1/files"]


async def test_a_turn_over_the_channel_counts_its_frame_not_an_http_head(redis: Redis) -> None:
    """What the relay tells it sent for a turn (`Toolref-Savings`' `wire=`, the turn line;
    its counters add the same) is what went on the wire: over the channel, the turn's frame
    (no header lines: a WebSocket message's bytes). Before, each turn counted the HTTP head
    it did not send (about 250 bytes more each; the savings read smaller than they were)."""
    provider = Provider(replies(4, 9))
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Build it. " * 60}]
    told: list[int] = []
    async with (
        relayed(redis, provider) as (relay_url, seen, lines),
        httpx.AsyncClient(timeout=30) as agent,
    ):
        for n in range(4):
            body = {"model": MODEL, "max_tokens": 512, "stream": True, "messages": messages}
            answer = await agent.post(
                relay_url + "/llm/anthropic/v1/messages",
                content=json.dumps(body).encode(),
                headers=HEADERS,
            )
            assert answer.status_code == 200, answer.text
            savings = answer.headers["toolref-savings"]
            found = re.fullmatch(r"raw=(\d+), wire=(\d+), ratio=.*", savings)
            assert found is not None
            told.append(int(found[2]))
            reply = provider.replies[n]
            messages = [*messages, written_back("messages", reply), result("messages", reply, n)]
    assert seen.http == []  # every turn rode the channel
    assert told == seen.frames  # one frame a turn, its bytes
    turns = [line for line in lines if " turn " in line and "since the relay" not in line]
    for line, wire in zip(turns, told, strict=True):  # the turn lines tell the same
        assert f"sent {size(wire)}  " in line
