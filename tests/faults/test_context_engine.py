"""Context editing (issue 41) while the engine goes away: each turn's body goes on from the
one before, byte for byte, except on a turn whose answer says the provider's cache was
written again (`rewrote=1` in `Toolref-Context`, counted in `/metrics`), whatever the store
did meanwhile. A real engine of its own, the service's gateway served by uvicorn, a client
posting whole conversations turn by turn (as an agent does) and an upstream that keeps
every body it gets.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.integration.test_context_editing import Upstream, body_of, context, conversation
from tests.support.servers import serve_all
from toolref_server.app import create_app
from toolref_server.context import facts as facts_module
from toolref_server.settings import Settings

from .support import Engines

pytestmark = pytest.mark.engine

PATH = "/llm/up/v1/chat/completions"
# Small enough that a short conversation passes it; a batch every second turn (one result
# of 3 KB frees about 650 tokens: two are due before they free `clear_at_least`).
POLICY: dict[str, Any] = {
    "context_editing": "on",
    "context_trigger_tokens": 1_500,
    "context_keep": 2,
    "context_clear_at_least": 1_000,
    "context_rewrite_weight": 0.0,
}
FLUSHED = 9  # the turn before which the engine is flushed: no batch falls due on it


def goes_on(before: bytes, after: bytes) -> bool:
    """`after` holds `before` byte for byte, less its closing brackets (the provider's
    prompt cache holds)."""
    return after.startswith(before.rstrip(b"}\n ").rstrip(b"]\n "))


def rewrites(metrics: str) -> float:
    for line in metrics.splitlines():
        if line.startswith('toolref_context_requests_total{outcome="rewrote"}'):
            return float(line.split()[-1])
    return 0.0


async def test_a_batch_held_back_by_an_engine_down_is_a_rewrite_the_turn_it_is_sent(
    engines: Engines,
) -> None:
    """Found: the engine down on the turn a batch fell due held the batch back (its stand-ins
    could not be had: the turn went on from the one before, as documented); the engine back,
    the next turn replaced those results for the first time, so its body no longer went on
    from the one before and the provider wrote its cache again, yet it said `rewrote=0` and
    `/metrics` counted no rewrite. Now a turn that sends a stand-in it made (none was pinned)
    says so."""
    engine = engines.start("engine", appendonly="no", save='""')
    upstream = Upstream()
    messages = conversation("openai-chat", 14)
    told: list[dict[str, int]] = []
    async with serve_all(upstream.app()) as [upstream_url]:
        settings = Settings(
            redis_url=engine.tcp_url,
            upstreams=f"up={upstream_url}",
            redis_timeout=0.25,
            redis_connect_timeout=0.05,
            **POLICY,
        )
        facts_module.forget()
        async with (
            serve_all(create_app(settings)) as [url],
            httpx.AsyncClient(base_url=url, timeout=30) as client,
        ):

            async def turn(turns: int) -> None:
                body = body_of("openai-chat", messages[: 1 + 2 * turns])
                answer = await client.post(PATH, content=body)
                assert answer.status_code == 200, answer.text
                told.append(context(answer))

            turns = 1
            while not told or not told[-1]["rewrote"]:  # until a batch is made
                await turn(turns)
                turns += 1
            assert told[-1]["cleared"] > 0
            Engines.kill(engine)
            down = len(told)
            for _ in range(2):  # the next batch falls due: held back
                await turn(turns)
                turns += 1
            assert [t["cleared"] for t in told[down:]] == [told[down - 1]["cleared"]] * 2
            Engines.restart(engine)
            while turns <= 14:
                await turn(turns)
                turns += 1
            metrics = (await client.get("/metrics")).text
    sent = upstream.bodies
    assert told[-1]["cleared"] > told[down - 1]["cleared"]  # the held batch went, later
    for n in range(1, len(sent)):
        assert goes_on(sent[n - 1], sent[n]) != bool(told[n]["rewrote"]), (n, told[n])
    assert rewrites(metrics) == sum(t["rewrote"] for t in told)
    json.loads(sent[-1])  # valid JSON, as the client's


@pytest.mark.parametrize("remembered", [True, False], ids=["remembered", "forgotten"])
async def test_a_flushed_engine_changes_no_stand_in_already_sent(
    engines: Engines, remembered: bool
) -> None:
    """FLUSHALL between two turns (an operator's flush, an engine restarted without
    persistence). A gateway process that remembers the stand-ins it sent sends them again,
    so every later turn goes on from the one before but where a batch is made, and says so.
    One that remembers none (another replica, a restart) makes them again: the extractive
    summarizer's bytes are the same, and the turn says `rewrote=1` (a model's would differ:
    the rewrite it may cost is counted, docs/context-editing.md)."""
    engine = engines.start("engine", appendonly="no", save='""')
    upstream = Upstream()
    messages = conversation("openai-chat", 14)
    told: list[dict[str, int]] = []
    async with serve_all(upstream.app()) as [upstream_url]:
        settings = Settings(redis_url=engine.tcp_url, upstreams=f"up={upstream_url}", **POLICY)
        facts_module.forget()
        async with (
            serve_all(create_app(settings)) as [url],
            httpx.AsyncClient(base_url=url, timeout=30) as client,
        ):
            for turns in range(1, 15):
                if turns == FLUSHED:
                    admin = Redis.from_url(engine.tcp_url)
                    await admin.flushall()
                    await admin.aclose()
                    if not remembered:
                        facts_module.forget()
                body = body_of("openai-chat", messages[: 1 + 2 * turns])
                answer = await client.post(PATH, content=body)
                assert answer.status_code == 200, answer.text
                told.append(context(answer))
    sent = upstream.bodies
    flushed = FLUSHED - 1
    assert told[-1]["cleared"] > told[flushed]["cleared"] > 0
    assert goes_on(sent[flushed - 1], sent[flushed])  # every stand-in in the same bytes
    assert bool(told[flushed]["rewrote"]) != remembered
    for n in range(flushed + 1, len(sent)):
        assert goes_on(sent[n - 1], sent[n]) != bool(told[n]["rewrote"]), (n, told[n])
