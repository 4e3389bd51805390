"""Faults under the relay's channel (issue 40): a channel turn's answer ends before its
recipe is kept and its answer written (`storage.under_way`), so what the store or the
gateway loses in that moment must cost the sender's next turn at most one resend, and the
provider must still get every body byte for byte. Real engines of their own, the service's
real gateway served by uvicorn, the relay in front, a provider behind that streams each
answer (the only fake: what is outside the machine).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import random
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from tests.integration.test_answer_dictionary import Provider, replies, result, written_back
from tests.integration.test_channel import KEY, MODEL, Seen
from tests.integration.test_channel_answer_end import writes_held
from tests.support.fake_provider import wire
from tests.support.servers import _config, serve, serve_all
from tests.unit.edits.agents import HEADERS
from toolref_relay import Relay, RelayConfig
from toolref_server.app import create_app
from toolref_server.embedded import free_port
from toolref_server.settings import Settings

from .support import Engines, engine_info, payload

pytestmark = pytest.mark.engine

_GUARD = 30.0  # seconds: a failure guard only
_PATH = "/llm/anthropic/v1/messages"


@dataclass
class Chat:
    """One agent's conversation through the relay: each turn the conversation so far, the
    provider's answer written back with its tool's result."""

    relay_url: str
    provider: Provider
    messages: list[dict[str, Any]] = field(
        default_factory=lambda: [{"role": "user", "content": "Build it. " * 60}]
    )
    bodies: list[bytes] = field(default_factory=list)

    async def turn(self, agent: httpx.AsyncClient) -> httpx.Response:
        n = len(self.bodies)
        body = {"model": MODEL, "max_tokens": 512, "stream": True, "messages": self.messages}
        data = json.dumps(body).encode()
        self.bodies.append(data)
        answer = await asyncio.wait_for(
            agent.post(self.relay_url + _PATH, content=data, headers=HEADERS), _GUARD
        )
        assert answer.status_code == 200, answer.text
        assert answer.content == self.provider.streamed[-1]
        reply = self.provider.replies[n]
        back = result("messages", reply, n)
        if n == 1 and reply.call is not None:  # a large tool result: a piece
            back["content"][0]["content"] = payload(0, n, 40_000)
        self.messages = [*self.messages, written_back("messages", reply), back]
        return answer


def _slug(app: Any, slug: str) -> int:
    return int(app.state.services.metrics.edits.labels(slug)._value.get())


async def _settled(app: Any) -> None:
    under_way = app.state.services.recipes.under_way
    async with asyncio.timeout(_GUARD):
        while tasks := set(under_way._tasks.values()):
            await asyncio.wait(tasks)


def _gateway(engine_url: str, provider_url: str, **settings: Any) -> Seen:
    """The service's app on the engine at `engine_url` (its own client, as a process opens
    it), the provider its upstream, counting what reaches it."""
    tenant = f"t={hashlib.sha256(KEY.encode()).hexdigest()}"
    config = Settings(
        redis_url=engine_url, upstreams=f"anthropic={provider_url}", api_keys=tenant, **settings
    )
    return Seen(create_app(config))


def _services(app: Any) -> Any:
    return app.state.services


async def test_a_store_killed_during_a_channel_turn_s_keep_costs_the_next_turn_nothing(
    engines: Engines, caplog: pytest.LogCaptureFixture
) -> None:
    """Turn 3's answer ends while its keep and its answer's write wait on a frozen engine,
    which is then killed and started again empty: turn 4 (its base never stored, held by
    this process still) is an edit of it, with no resend (before: refused
    `missing-history` once and resent); nothing is left under way, nothing logged as a
    crash, and the provider gets every body byte for byte."""
    engine = engines.start("engine", appendonly="no", save='""')
    provider = Provider(replies(6, 21))
    async with serve_all(provider.app()) as [provider_url]:
        seen = _gateway(engine.tcp_url, provider_url)
        async with serve(seen) as url:
            relay = Relay(RelayConfig(url, key=KEY), report=lambda _: None)
            async with serve(relay) as relay_url, httpx.AsyncClient(timeout=_GUARD) as agent:
                chat = Chat(relay_url, provider)
                for _ in range(2):
                    await chat.turn(agent)
                assert engine.pid is not None
                os.kill(engine.pid, signal.SIGSTOP)  # the writes wait on it ...
                await chat.turn(agent)  # answered; its keep and answer write under way
                Engines.kill(engine)  # ... and are lost with it
                await _settled(seen.app)
                Engines.restart(engine)
                for _ in range(3):
                    await chat.turn(agent)
            assert _slug(seen.app, "missing-history") == 0
            assert _slug(seen.app, "applied") == 6  # nothing resent
            assert not _services(seen.app).recipes.under_way._tasks
            assert seen.http == []  # every turn rode the channel
    assert provider.seen == chat.bodies
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@asynccontextmanager
async def _served_on(app: Any, port: int) -> AsyncIterator[str]:
    """`serve`, on `port` (a gateway restarted on the address the relay knows)."""
    config = _config(app)
    config.port = port
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
                raise AssertionError("uvicorn stopped before it started")
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def test_a_gateway_restarted_while_a_channel_turn_s_keeps_were_under_way(
    engines: Engines, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turn 3 (carrying a 40 KB tool result, a piece) is answered on the channel while its
    writes are held; that gateway process stops for good, its writes never done, and
    another starts on the same address and engine: the relay opens a new channel to it,
    turn 4 is refused `missing-history` once and resent with no base, the piece inline
    (its only holder dropped), and every body arrives byte for byte."""
    engine = engines.start("engine", appendonly="no", save='""')
    provider = Provider(replies(6, 22))
    port = free_port()
    async with serve_all(provider.app()) as [provider_url]:
        first = _gateway(engine.tcp_url, provider_url)
        relay = Relay(RelayConfig(f"http://127.0.0.1:{port}", key=KEY), report=lambda _: None)
        async with serve(relay) as relay_url, httpx.AsyncClient(timeout=_GUARD) as agent:
            chat = Chat(relay_url, provider)
            async with _served_on(first, port):
                for _ in range(2):
                    await chat.turn(agent)
                await _settled(first.app)
                with writes_held(monkeypatch) as (_, waiting):
                    await chat.turn(agent)  # answered, its writes held
                    assert waiting
                assert _services(first.app).recipes.under_way._tasks  # never to end
            monkeypatch.undo()  # the first process's writes never end; the second's do
            second = _gateway(engine.tcp_url, provider_url)
            async with _served_on(second, port):
                for _ in range(3):
                    await chat.turn(agent)
            assert _slug(second.app, "missing-history") == 1  # resent once
            assert _slug(second.app, "missing-pieces") == 0  # the piece sent inline
            assert _slug(second.app, "applied") == 3
            assert (second.sockets, second.http) == (1, [])  # a new channel
    assert provider.seen == chat.bodies


@dataclass
class Agents:
    """A provider for several conversations at once: each answer a tool call made from the
    conversation's number and turn (its first message names it; its turn is the number of
    answers it holds), so a resent turn gets the same answer; every body kept per
    conversation."""

    seen: dict[int, list[bytes]] = field(default_factory=dict)

    def app(self) -> Starlette:
        async def answer(request: Request) -> StreamingResponse:
            body = await request.body()
            messages = json.loads(body)["messages"]
            number = int(messages[0]["content"].split(":")[0].split()[-1])
            self.seen.setdefault(number, []).append(body)
            reply = self.reply(number, len(messages) // 2)
            frames = wire.frames("messages", reply, MODEL, 10, usage=False)

            async def events() -> AsyncIterator[bytes]:
                for frame in frames:
                    yield frame

            return StreamingResponse(events(), media_type="text/event-stream")

        return Starlette(routes=[Route("/{path:path}", answer, methods=["POST"])])

    @staticmethod
    def reply(number: int, turn: int) -> wire.Reply:
        rng = random.Random(f"{number}/{turn}")
        words = " ".join("".join(rng.choices("abcdefghij", k=6)) for _ in range(80))
        arguments = {"path": f"src/c{number}_{turn}.py", "content": f"# {words}\n"}
        return wire.Reply(call=wire.Call("write_file", arguments), index=turn)


def _tool_result(number: int, turn: int, reply: wire.Reply) -> dict[str, Any]:
    if turn % 2:  # a listing: text that compresses, a brotli record
        rng = random.Random(f"text {number}/{turn}")
        text = "\n".join(
            f"src/pkg_{rng.randrange(40)}/module_{rng.randrange(999)}.py: ok" for _ in range(120)
        )
    else:  # a large incompressible result: a piece
        text = payload(number, turn, 20_000 + (number * 7919 + turn * 104_729) % 30_000)
    block = {"type": "tool_result", "tool_use_id": f"toolu_e2e_{reply.index:03d}"}
    return {"role": "user", "content": [{**block, "content": text}]}


_UNCACHED = {"edit_cache_bytes": 0, "answer_cache_bytes": 0}  # as another replica would


@pytest.mark.parametrize("cached", [False, True])
async def test_eviction_under_a_long_channel_conversation_with_answers_and_brotli(
    engines: Engines, cached: bool
) -> None:
    """4 conversations x 20 turns through the relay's channel, every answer the next turn's
    dictionary, listings sent as brotli records and 20-50 KB results as pieces, on an
    engine of 2 MB that evicts (allkeys-lru): every turn 200, each applied once (misses
    resent by themselves), every body byte for byte at the provider; with the gateway's
    caches, and without (every read from the engine, as another replica would)."""
    engine = engines.start(
        "engine", appendonly="no", save='""', maxmemory="2mb",
        **{"maxmemory-policy": "allkeys-lru"},
    )  # fmt: skip
    agents = Agents()
    conversations, turns = 4, 20
    async with serve_all(agents.app()) as [provider_url]:
        seen = _gateway(engine.tcp_url, provider_url, **({} if cached else _UNCACHED))
        async with serve(seen) as url:
            relay = Relay(RelayConfig(url, key=KEY), report=lambda _: None)
            async with serve(relay) as relay_url, httpx.AsyncClient(timeout=_GUARD) as agent:
                sent: dict[int, list[bytes]] = {}

                async def chat(number: int) -> None:
                    messages: list[dict[str, Any]] = [_opening(number)]
                    for turn in range(turns):
                        sent.setdefault(number, []).append(await _sent(agent, relay_url, messages))
                        reply = Agents.reply(number, turn)
                        back = _tool_result(number, turn, reply)
                        messages = [*messages, written_back("messages", reply), back]

                await asyncio.gather(*(chat(n) for n in range(conversations)))
                await _settled(seen.app)
            stats = await engine_info(engine, "stats")
            assert _slug(seen.app, "applied") == conversations * turns  # each turn once
            misses = _slug(seen.app, "missing-history") + _slug(seen.app, "missing-pieces")
            assert (seen.sockets, seen.http) == (1, [])
    assert stats["evicted_keys"] > 0
    assert agents.seen == sent  # every body byte for byte, whatever was resent
    print(f"\nchannel eviction: {stats['evicted_keys']} keys evicted, {misses} misses resent")


async def test_a_store_back_after_failing_channel_keeps_serves_the_next_turns(
    engines: Engines,
) -> None:
    """Found: three conversations' background keeps failed with their engine (killed while
    they were under way), which opened the store's breaker; the engine was back at once,
    yet every next turn was answered 503 (the gateway held each base in no cache, and
    would keep no recipe after the answer while the breaker was open), and the agents saw
    it. Now a recipe whose keep failed stays in the process's cache, a turn is answered
    while the breaker is open (its keep left to fail or succeed after it), and every next
    turn is answered 200, exactly, with no resend."""
    engine = engines.start("engine", appendonly="no", save='""')
    agents = Agents()
    async with serve_all(agents.app()) as [provider_url]:
        seen = _gateway(engine.tcp_url, provider_url)
        async with serve(seen) as url:
            relay = Relay(RelayConfig(url, key=KEY), report=lambda _: None)
            async with serve(relay) as relay_url, httpx.AsyncClient(timeout=_GUARD) as agent:
                chats = [Talk(n) for n in range(3)]

                async def round_of_turns() -> None:
                    await asyncio.gather(*(chat.turn(agent, relay_url) for chat in chats))

                for _ in range(2):
                    await round_of_turns()
                assert engine.pid is not None
                os.kill(engine.pid, signal.SIGSTOP)  # the writes wait on it ...
                await round_of_turns()  # answered; their keeps and answers' writes under way
                Engines.kill(engine)  # ... and fail with it
                await _settled(seen.app)
                assert _services(seen.app).store.breaker.state.value == "open"
                Engines.restart(engine)  # back at once, empty
                for _ in range(2):
                    await round_of_turns()
            assert not _services(seen.app).recipes.under_way._tasks
            assert _slug(seen.app, "missing-history") == 0
    assert agents.seen == {chat.number: chat.sent for chat in chats}
    assert seen.http == []


@dataclass
class Talk:
    """One of `Agents`' conversations, turn by turn through the relay."""

    number: int
    sent: list[bytes] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)

    async def turn(self, agent: httpx.AsyncClient, relay_url: str) -> None:
        if not self.messages:
            self.messages = [_opening(self.number)]
        self.sent.append(await _sent(agent, relay_url, self.messages))
        turn = len(self.sent) - 1
        reply = Agents.reply(self.number, turn)
        self.messages = [
            *self.messages, written_back("messages", reply), _tool_result(self.number, turn, reply)
        ]  # fmt: skip


def _opening(number: int) -> dict[str, Any]:
    return {"role": "user", "content": f"conversation {number}: " + "go " * 200}


async def _sent(agent: httpx.AsyncClient, relay_url: str, messages: list[dict[str, Any]]) -> bytes:
    """A turn of `messages` through the relay, answered 200; the body the agent sent."""
    body = {"model": MODEL, "max_tokens": 512, "stream": True, "messages": messages}
    data = json.dumps(body).encode()
    answer = await asyncio.wait_for(
        agent.post(relay_url + _PATH, content=data, headers=HEADERS), _GUARD
    )
    assert answer.status_code == 200, answer.text
    return data


async def test_a_turn_the_store_down_refuses_goes_as_it_came(engines: Engines) -> None:
    """Found: with the engine down, a turn whose base the gateway's process did not hold
    (another replica's, say: no cache here) was answered 503 `store-unavailable`, and the
    relay handed that to the agent for every turn of the outage. Now the relay sends that
    turn as it came (the gateway forwards it without its store) and the turns after it too,
    for a pause, then edits again: every turn answered 200, every body byte for byte."""
    engine = engines.start("engine", appendonly="no", save='""')
    agents = Agents()
    lines: list[str] = []
    async with serve_all(agents.app()) as [provider_url]:
        seen = _gateway(engine.tcp_url, provider_url, **_UNCACHED)
        async with serve(seen) as url:
            relay = Relay(RelayConfig(url, key=KEY), report=lines.append)
            async with serve(relay) as relay_url, httpx.AsyncClient(timeout=_GUARD) as agent:
                chat = Talk(0)
                for _ in range(2):
                    await chat.turn(agent, relay_url)
                applied = _slug(seen.app, "applied")
                Engines.kill(engine)
                for _ in range(3):  # the first tried as an edit, refused; all go as they came
                    await chat.turn(agent, relay_url)
                assert _slug(seen.app, "applied") == applied
                assert _slug(seen.app, "store-unavailable") == 1  # one edit tried, then paused
                assert sum("store is unavailable" in line for line in lines) == 1
                Engines.restart(engine)
                relay.link.paused.until = 0.0  # the pause over (its length is its own test)
                await chat.turn(agent, relay_url)  # an edit again, its base lost: one resend
                assert _slug(seen.app, "applied") == applied + 1
    assert agents.seen == {0: chat.sent}
