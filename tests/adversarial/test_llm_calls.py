"""How many LLM calls a request, a tenant and a failing model can cause.

Found: one summary-mode hydrate of 200 old results made 200 LLM calls, and 200 more 2 s
later when they failed (the failed mark lasted 2 s). Now: at most
TOOLREF_LLM_CALLS_PER_REQUEST calls per request, TOOLREF_LLM_CALLS_PER_TENANT_MINUTE per
tenant per minute (over all replicas), a circuit breaker that stops calling a model that
keeps failing, and a failure remembered for TOOLREF_LLM_FAILURE_SECONDS.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

from redis.asyncio import Redis

from tests.support.fake_provider.raw import Connection, RawProvider, completion, raw_provider
from toolref.kit.breaker import BreakerState
from toolref.kit.placeholder import parse
from toolref.wire.models import Capabilities

from .summarizer_app import LLM, READ, apps, invocation

RESULTS = 200


async def failing(server: RawProvider, connection: Connection) -> None:
    await connection.answer(b'{"error": "overloaded"}', status=503)


def conversation(count: int) -> list[dict[str, Any]]:
    """`count` reads, each answered, then a final assistant message."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read every module"}]
    for n in range(count):
        call = invocation(n)
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{n}",
                        "type": "function",
                        "function": {
                            "name": call["name"],
                            "arguments": f'{{"path": "src/module_{n}.py"}}',
                        },
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": call["result"]})
    messages.append({"role": "assistant", "content": "Done."})
    return messages


async def hydrate(app: Any, messages: list[dict[str, Any]]) -> dict[str, Any]:
    response = await app.http.post(
        "/v1/messages:hydrate",
        json={"messages": messages, "mode": "summary", "keepRecent": 0, "summarizer": LLM},
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def summarized_by_llm(answer: dict[str, Any]) -> int:
    texts = [parse(m["content"]) for m in answer["messages"] if m.get("role") == "tool"]
    return sum(1 for t in texts if t is not None and t[2] == "from the model")


async def test_a_hydrate_of_200_results_makes_at_most_the_per_request_calls(
    redis: Redis,
) -> None:
    async def answers(server: RawProvider, connection: Connection) -> None:
        await connection.answer(completion("from the model"))

    async with raw_provider(answers) as llm, apps(redis) as build:
        app = await build(llm, llm_calls_per_request=16)
        first = await hydrate(app, conversation(RESULTS))
        assert llm.calls == 16
        assert first["optimizationStats"]["summarized"] == RESULTS  # the rest: extractive
        assert summarized_by_llm(first) == 16
        # The next turn: the 16 come from the cache, 16 more from the model.
        second = await hydrate(app, conversation(RESULTS))
        assert llm.calls == 32
        assert summarized_by_llm(second) == 32
        assert second["optimizationStats"]["summaryCacheHits"] == 16


async def test_a_failing_model_is_not_asked_again_at_once_by_the_next_hydrate(
    redis: Redis,
) -> None:
    """The finding itself: 200 results, a model that fails every call, the same hydrate
    again 2 s later (here: at once, and after the old 2 s mark would have expired)."""
    async with raw_provider(failing) as llm, apps(redis) as build:
        app = await build(llm, llm_breaker_failures=5, llm_breaker_seconds=30.0)
        first = await hydrate(app, conversation(RESULTS))
        made = llm.calls
        print(f"\n200 results, failing model: {made} calls, then none")
        assert made <= 16  # the per-request cap (the 16 run at once, before the breaker opens)
        assert summarized_by_llm(first) == 0
        breaker = app.services.summaries.quotas.breaker(LLM)
        assert breaker.state is BreakerState.OPEN
        await hydrate(app, conversation(RESULTS))
        await asyncio.sleep(2.1)  # past the old failed mark
        third = await hydrate(app, conversation(RESULTS))
        assert llm.calls == made  # breaker open, failures remembered: not one more call
        assert third["optimizationStats"]["summarized"] == RESULTS
        metrics = (await app.http.get("/metrics")).text
    assert f'toolref_summary_fallbacks_total{{reason="breaker",summarizer="{LLM}"}}' in metrics


async def test_the_breaker_lets_one_probe_through_after_its_cool_down(redis: Redis) -> None:
    healthy = False

    async def flaky(server: RawProvider, connection: Connection) -> None:
        if healthy:
            await connection.answer(completion("from the model"))
        else:
            await failing(server, connection)

    async with raw_provider(flaky) as llm, apps(redis) as build:
        app = await build(llm, llm_breaker_failures=3, llm_breaker_seconds=0.3)
        refs = [await app.register(invocation(n)) for n in range(8)]
        for ref in refs[:3]:
            assert (await app.summary(ref))["fallback"] is True
        assert llm.calls == 3
        for ref in refs[3:6]:  # open: answered at once, the model not asked
            assert (await app.summary(ref))["fallback"] is True
        assert llm.calls == 3
        healthy = True
        breaker = app.services.summaries.quotas.breaker(LLM)
        await asyncio.sleep(breaker.retry_in() + 0.05)
        probe = await app.summary(refs[6])
        assert (probe["fallback"], llm.calls) == (False, 4)
        assert breaker.state is BreakerState.CLOSED
        assert (await app.summary(refs[7]))["fallback"] is False
        assert llm.calls == 5


async def test_a_failure_is_remembered_for_its_setting_then_asked_again(redis: Redis) -> None:
    async with raw_provider(failing) as llm, apps(redis) as build:
        app = await build(llm, llm_failure_seconds=0.4, llm_breaker_failures=100)
        ref = await app.register(READ)
        assert (await app.summary(ref))["fallback"] is True
        key = f"tr:local:s:{ref[3:]}:openai-compatible:fake-model:v1:200:lock"
        assert await redis.get(key) == b"failed"
        assert 0 < await redis.pttl(key) <= 400
        for _ in range(5):  # remembered: the model is not asked again meanwhile
            assert (await app.summary(ref))["fallback"] is True
        assert llm.calls == 1
        await asyncio.sleep(max(0, await redis.pttl(key)) / 1000)
        while await redis.exists(key):  # expiry is lazy or up to a tick late  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        assert (await app.summary(ref))["fallback"] is True
        assert llm.calls == 2  # asked again once the mark expired


async def test_each_tenant_gets_its_calls_per_minute(redis: Redis) -> None:
    async def answers(server: RawProvider, connection: Connection) -> None:
        await connection.answer(completion("from the model"))

    keys = {t: f"{t}-key" for t in ("acme", "globex")}
    setting = ",".join(f"{t}={hashlib.sha256(k.encode()).hexdigest()}" for t, k in keys.items())
    async with raw_provider(answers) as llm, apps(redis) as build:
        tenants = {
            t: await build(
                llm,
                api_keys=setting,
                headers={"Authorization": f"Bearer {k}"},
                llm_calls_per_tenant_minute=3,
            )
            for t, k in keys.items()
        }
        started = int(time.time() // 60)
        acme = [
            await tenants["acme"].summary(await tenants["acme"].register(invocation(n)))
            for n in range(6)
        ]
        windows = int(time.time() // 60) - started + 1  # 1, unless a minute began meanwhile
        assert 3 <= llm.calls <= 3 * windows
        if windows == 1:
            assert [a["fallback"] for a in acme] == [False] * 3 + [True] * 3
        before = llm.calls
        globex = await tenants["globex"].summary(await tenants["globex"].register(invocation(0)))
        assert globex["fallback"] is False  # another tenant's quota is its own
        assert llm.calls == before + 1


async def test_capabilities_list_the_limits_a_client_needs(redis: Redis) -> None:
    async with raw_provider() as llm, apps(redis) as build:
        app = await build(
            llm, llm_timeout=2.5, llm_calls_per_request=7, llm_calls_per_tenant_minute=90
        )
        document = (await app.http.get("/v1/capabilities")).json()
    limits = document["limits"]
    assert limits["summaryWaitSeconds"] == 3.5  # the LLM timeout and the margin
    assert limits["summarizerCallsPerRequest"] == 7
    assert limits["summarizerCallsPerMinute"] == 90
    parsed = Capabilities.model_validate(document)
    assert parsed.limits.summarizer_calls_per_request == 7
    # Optional: a server that does not send them still parses.
    for name in ("summaryWaitSeconds", "summarizerCallsPerRequest", "summarizerCallsPerMinute"):
        del limits[name]
    assert Capabilities.model_validate(document).limits.summary_wait_seconds is None
