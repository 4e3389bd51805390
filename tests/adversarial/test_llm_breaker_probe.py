"""The model's breaker hears only what the model said (review: summary model calls), over
real sockets: the app's summarizer pointed at a fake model (`raw_provider`) on its own
socket, the breaker on a clock the test drives (no wall-clock waits).

Found:

- A half-open breaker's probe that found no free connection (every one of
  TOOLREF_LLM_MAX_CONNECTIONS held, TOOLREF_LLM_POOL_WAIT past) was never sent, and told the
  breaker nothing: it stayed "under way", so every summary was extractive for another whole
  cool-down (TOOLREF_LLM_BREAKER_SECONDS), the model never asked. A busy pool is no failure
  of the model, nor a probe. Now the next call probes at once (and so after a refusal 400).
- A model answering 200 with no text (an output filter's empty or null content) counted as
  a failure of the model in the breaker every tenant shares: five such answers
  (TOOLREF_LLM_BREAKER_FAILURES) and every tenant's summaries were extractive for the
  cool-down, and such an answer to the probe opened it again. The model answered: that
  summary falls back (`reason="empty"`, its failure mark: asked again once the mark
  expires, never kept as the result's summary), and the breaker counts it as an answer.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from redis.asyncio import Redis

from tests.support.fake_provider.raw import Connection, RawProvider, completion, raw_provider
from toolref.kit.breaker import BreakerState

from .summarizer_app import LLM, App, apps, invocation, llm_id

HOLD = "HOLD-THE-CONNECTION"
EMPTY = "FILTERED-OUTPUT"


def _prompt(connection: Connection) -> str:
    return json.dumps(connection.body.get("messages"))


def _driven(app: App) -> list[float]:
    """The clock of the app's model breaker, as a list the test moves (`now[0] += ...`)."""
    now = [1000.0]
    app.services.summaries.quotas.clock = lambda: now[0]
    return now


def _state(app: App) -> BreakerState:
    """The model breaker's state now (a call, so mypy does not narrow it across calls)."""
    return app.services.summaries.quotas.breaker(LLM).state


def _counted(metrics: str, reason: str) -> float:
    line = f'toolref_summary_fallbacks_total{{reason="{reason}",summarizer="{LLM}"}} '
    return sum(
        float(row.removeprefix(line)) for row in metrics.splitlines() if row.startswith(line)
    )


async def test_a_probe_that_found_no_free_connection_lets_the_next_call_probe(
    redis: Redis,
) -> None:
    holding, release = asyncio.Event(), asyncio.Event()

    async def model(server: RawProvider, connection: Connection) -> None:
        if server.calls == 1:  # the first call fails: the breaker (1 failure) opens
            await connection.answer(b'{"error": "overloaded"}', status=503)
        elif HOLD in _prompt(connection):
            holding.set()
            await release.wait()
            await connection.answer(completion("held"))
        else:
            await connection.answer(completion("from the model"))

    async with raw_provider(model) as llm, apps(redis) as build:
        app = await build(
            llm,
            llm_max_connections=1,
            llm_pool_wait=0.2,
            llm_breaker_failures=1,
            llm_breaker_seconds=30.0,
        )
        now = _driven(app)
        refs = [await app.register(invocation(n)) for n in range(3)]
        assert (await app.summary(refs[0]))["fallback"] is True
        assert _state(app) is BreakerState.OPEN
        now[0] += 30.0
        assert _state(app) is BreakerState.HALF_OPEN
        # The one connection held by a call under way (made before the breaker opened).
        summarizer: Any = app.services.summaries.summarizers[LLM]
        held = asyncio.create_task(summarizer.summarize(invocation(99, HOLD), 200))
        await asyncio.wait_for(holding.wait(), 10)
        probe = await app.summary(refs[1])  # let through, found no connection: not sent
        assert probe["fallback"] is True
        assert llm.calls == 2
        release.set()
        await held
        # The clock has not moved: the next call is the probe, the model answers it.
        after = await app.summary(refs[2])
        assert (after["summarizer"], after["fallback"]) == (llm_id(200), False), after
        assert llm.calls == 3
        assert _state(app) is BreakerState.CLOSED
        metrics = (await app.http.get("/metrics")).text
    assert _counted(metrics, "model-busy") == 1


async def test_a_refused_probe_lets_the_next_call_probe(redis: Redis) -> None:
    """A probe the model refused as its input (400: a content filter) says nothing of its
    health either way: the next call probes, not one a cool-down later."""

    async def model(server: RawProvider, connection: Connection) -> None:
        if server.calls == 1:
            await connection.answer(b'{"error": "overloaded"}', status=503)
        elif HOLD in _prompt(connection):
            await connection.answer(b'{"error": {"code": "content_filter"}}', status=400)
        else:
            await connection.answer(completion("from the model"))

    async with raw_provider(model) as llm, apps(redis) as build:
        app = await build(llm, llm_breaker_failures=1, llm_breaker_seconds=30.0)
        now = _driven(app)
        first, refused, then = [
            await app.register(invocation(n, result))
            for n, result in ((0, "x\n" * 50), (1, f"{HOLD}\n" * 50), (2, "y\n" * 50))
        ]
        assert (await app.summary(first))["fallback"] is True
        now[0] += 30.0
        assert (await app.summary(refused))["fallback"] is True
        assert llm.calls == 2
        after = await app.summary(then)
        assert (after["summarizer"], after["fallback"]) == (llm_id(200), False), after
        assert _state(app) is BreakerState.CLOSED


async def test_an_empty_answer_is_that_summary_s_fallback_not_the_model_s_failure(
    redis: Redis,
) -> None:
    async def model(server: RawProvider, connection: Connection) -> None:
        prompt = _prompt(connection)
        if f"{EMPTY} null" in prompt:
            await connection.answer(completion(None))
        elif EMPTY in prompt:
            await connection.answer(completion(""))
        else:
            await connection.answer(completion("from the model"))

    async with raw_provider(model) as llm, apps(redis) as build:
        app = await build(llm, llm_breaker_failures=1, llm_failure_seconds=60)
        empty = await app.register(invocation(0, f"{EMPTY}\n" * 50))
        null = await app.register(invocation(1, f"{EMPTY} null\n" * 50))
        other = await app.register(invocation(2))
        for ref in (empty, null):
            answer = await app.summary(ref)
            assert answer["fallback"] is True
            assert answer["summarizer"].startswith("extractive:")
        assert _state(app) is BreakerState.CLOSED  # one failure would have opened it
        served = await app.summary(other)
        assert (served["summarizer"], served["fallback"]) == (llm_id(200), False), served
        # Not kept as the result's summary: its failure mark holds meanwhile (not asked
        # again), and nothing is stored under the model's id.
        assert (await app.summary(empty))["fallback"] is True
        assert llm.calls == 3
        key = f"tr:local:s:{empty[3:]}:{llm_id(200)}"
        assert await redis.get(key) is None
        assert await redis.get(key + ":lock") == b"failed"
        metrics = (await app.http.get("/metrics")).text
    assert _counted(metrics, "empty") == 2
    assert _counted(metrics, "failed") == 0


async def test_an_empty_answer_to_the_probe_closes_the_breaker(redis: Redis) -> None:
    async def model(server: RawProvider, connection: Connection) -> None:
        if server.calls == 1:
            await connection.answer(b'{"error": "overloaded"}', status=503)
        elif EMPTY in _prompt(connection):
            await connection.answer(completion("  "))
        else:
            await connection.answer(completion("from the model"))

    async with raw_provider(model) as llm, apps(redis) as build:
        app = await build(llm, llm_breaker_failures=1, llm_breaker_seconds=30.0)
        now = _driven(app)
        first = await app.register(invocation(0))
        probed = await app.register(invocation(1, f"{EMPTY}\n" * 50))
        then = await app.register(invocation(2))
        assert (await app.summary(first))["fallback"] is True
        assert _state(app) is BreakerState.OPEN
        now[0] += 30.0
        assert (await app.summary(probed))["fallback"] is True
        assert _state(app) is BreakerState.CLOSED  # the model answered the probe
        after = await app.summary(then)
        assert (after["summarizer"], after["fallback"]) == (llm_id(200), False), after
        assert llm.calls == 3
