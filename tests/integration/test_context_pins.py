"""The stand-in a conversation sends is the store's (docs/context-editing.md), on any
replica, after the store lost it too: two real `toolref-server serve` processes (two
replicas, each its own memory) on the test engine, a model summarizer that writes a
different summary on every call (a stub of an OpenAI-compatible model), and a provider
that records every body.

Found in review: a replica sent the stand-ins it remembered without asking the store, so
after a flush (or the pins' expiry) one replica kept sending the bytes it remembered while
another made and pinned others: turns alternating between them rewrote the provider's
prompt cache on every turn. And a pin a replica remembered was never read again, so its
sliding lifetime was not renewed: it expired under a long conversation, which reopened
the same split.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.processes import Service
from tests.support.servers import serve_all
from toolref_server.app import create_app
from toolref_server.context import facts as facts_module
from toolref_server.embedded import free_port
from toolref_server.gateway import stand_ins as stand_ins_module
from toolref_server.settings import Settings

from ..conftest import ON_CLUSTER
from .test_context_editing import POLICY, body_of, context, conversation

pytestmark = pytest.mark.engine

PATH = "/llm/up/v1/chat/completions"
STAND_IN = "[toolref:"


@dataclass
class Provider:
    """The provider (records each body) and the summarizer's model (a new text each call)."""

    bodies: list[bytes] = field(default_factory=list)
    calls: itertools.count[int] = field(default_factory=itertools.count)

    def app(self) -> Starlette:
        async def record(request: Request) -> Response:
            self.bodies.append(await request.body())
            return JSONResponse({"ok": True})

        async def summarize(request: Request) -> Response:
            await request.body()
            text = f"summary number {next(self.calls)} of this result"
            message = {"role": "assistant", "content": text}
            return JSONResponse({"choices": [{"index": 0, "message": message}]})

        return Starlette(
            routes=[
                Route("/model/v1/chat/completions", summarize, methods=["POST"]),
                Route("/{path:path}", record, methods=["POST"]),
            ]
        )


def stand_ins(body: bytes) -> dict[str, str]:
    """The stand-in each replaced result of an OpenAI Chat body is sent as, by its call."""
    return {
        m["tool_call_id"]: m["content"]
        for m in json.loads(body)["messages"]
        if m.get("role") == "tool" and m["content"].startswith(STAND_IN)
    }


async def flush(redis: Redis) -> None:
    """FLUSHALL: on every primary of the cluster run."""
    if ON_CLUSTER:
        await cast(Any, redis).flushall(target_nodes="primaries")
    else:
        await redis.flushall()


@pytest.fixture
async def replicas(
    engine_url: str, redis: Redis, tmp_path: Path
) -> AsyncIterator[tuple[Provider, list[str]]]:
    """Two service processes on the test engine (the cluster, on the cluster run), the
    provider and the model one server."""
    provider = Provider()
    async with serve_all(provider.app()) as [url]:
        env = {
            "TOOLREF_REDIS_URL": engine_url,
            "TOOLREF_WORKERS": "1",
            "TOOLREF_UPSTREAMS": f"up={url}",
            "TOOLREF_LLM_BASE_URL": f"{url}/model/v1",
            "TOOLREF_LLM_MODEL": "stub",
            "TOOLREF_CONTEXT_SUMMARIZER": "openai-compatible",
            **{f"TOOLREF_{k.upper()}": str(v) for k, v in POLICY.items()},
        }
        services: list[Service] = []
        try:
            for name in ("one", "two"):
                services.append(
                    await asyncio.to_thread(Service, tmp_path / name, free_port(), **env)
                )
            yield provider, [s.url for s in services]
        finally:
            for service in services:
                await asyncio.to_thread(service.stop)


@pytest.mark.parametrize("first", [0, 1], ids=["remembering-first", "forgetting-first"])
async def test_after_a_flush_every_replica_sends_the_same_stand_ins_turn_after_turn(
    replicas: tuple[Provider, list[str]], redis: Redis, first: int
) -> None:
    """Turn 6 on replica one makes a batch (pinned); the store is flushed; the next turns
    alternate, starting with the replica that remembers the stand-ins (`remembering-first`:
    it pins them again, so none changes) or the one that never saw the conversation
    (`forgetting-first`: it makes them again, in other bytes, the model's summary being new
    each call). From that turn on, each result is sent in the same bytes on every turn,
    whichever replica sends it."""
    provider, urls = replicas
    messages = conversation("openai-chat", 14)
    async with httpx.AsyncClient(timeout=60) as client:

        async def turn(replica: int, turns: int) -> dict[str, int]:
            body = body_of("openai-chat", messages[: 1 + 2 * turns])
            answer = await client.post(urls[replica] + PATH, content=body)
            assert answer.status_code == 200, answer.text
            return context(answer)

        made = await turn(0, 6)
        assert made["cleared"] > 0, made
        assert made["rewrote"] == 1, made
        before = stand_ins(provider.bodies[-1])
        await flush(redis)
        told = [await turn((first + n) % 2, 7 + n) for n in range(6)]
    after = [stand_ins(body) for body in provider.bodies[1:]]
    assert all(after), "a turn after the flush sent no stand-in"
    if first == 0:  # pinned again as it was: the provider's cache holds through the flush
        assert {k: after[0][k] for k in before} == before
    else:  # made again by a model: other bytes, said
        assert all(after[0][k] != v for k, v in before.items())
        assert told[0]["rewrote"] == 1, told[0]
    for n in range(1, len(after)):
        for call, text in after[n - 1].items():
            assert after[n][call] == text, (n, call, after[n][call], text)
    told.insert(0, made)
    for n in range(1 + first, len(told)):  # no rewrite said but a new batch's
        assert told[n]["rewrote"] == int(told[n]["batches"] > told[n - 1]["batches"]), told


async def test_a_remembered_stand_in_s_pin_lives_on_while_its_conversation_does(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica that remembers a conversation's stand-ins renews their pins' lifetimes on
    the turns that send them (once a quarter of the lifetime went by since it last did,
    `stand_ins.RENEWED`): a pin near its end is given its whole lifetime again."""
    now = [1_000.0]
    monkeypatch.setattr(stand_ins_module, "clock", lambda: now[0])
    facts_module.forget()  # facts another test of this process left, read on its clock
    provider = Provider()
    messages = conversation("openai-chat", 10)
    async with serve_all(provider.app()) as [url]:
        settings = Settings(redis_url="unused", upstreams=f"up={url}", **POLICY)
        async with (
            serve_all(create_app(settings, redis=redis)) as [gateway],
            httpx.AsyncClient(timeout=30) as client,
        ):

            async def turn(turns: int) -> None:
                body = body_of("openai-chat", messages[: 1 + 2 * turns])
                answer = await client.post(gateway + PATH, content=body)
                assert answer.status_code == 200, answer.text

            await turn(6)
            pins = [key async for key in redis.scan_iter(match="*stand-in:*")]
            assert pins
            for key in pins:
                await redis.expire(key, 30)
            now[0] += 86_400  # the store's TTL later (the default: a day)
            await turn(7)
            lifetimes = [await redis.ttl(key) for key in pins]
    assert all(seconds > 30 for seconds in lifetimes), lifetimes
    assert stand_ins(provider.bodies[1]).items() >= stand_ins(provider.bodies[0]).items()
