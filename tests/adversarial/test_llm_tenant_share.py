"""One tenant's burst of summaries never holds the model for the others (review: summary
model calls), over real sockets: the service served by uvicorn in process, a slow fake
model (`raw_provider`) on its own socket.

Found: every tenant's model calls went through one httpx client with httpx's default pool
(100 connections), and a call's wait for a free connection counted against its deadline
(TOOLREF_LLM_TIMEOUT). One tenant's hydrates (16 model calls each, 300 a minute) filled the
pool with a slow model, so tenant `b`'s summary queued behind them past its deadline and
fell back to extractive; and the calls that timed out in the queue (the model never saw
them) counted as model failures in the one breaker of the process, which opened for every
tenant. Now each tenant holds at most TOOLREF_LLM_TENANT_CALLS_IN_FLIGHT calls per process
(a quarter of TOOLREF_LLM_MAX_CONNECTIONS by default; past it its extra summaries are
extractive at once, `reason="tenant-in-flight"`), and a call that got no connection within
TOOLREF_LLM_POOL_WAIT is extractive (`reason="model-busy"`) without counting as a failure.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any, Final, cast

import httpx
import pytest
from redis.asyncio import Redis

from tests.support.fake_provider.raw import (
    MODEL,
    Behaviour,
    Connection,
    RawProvider,
    completion,
    raw_provider,
)
from toolref_server.app import open_redis
from toolref_server.settings import Settings

from .gateway_wire import serving
from .summarizer_app import LLM, invocation, llm_id

pytestmark = pytest.mark.engine

KEY_A, KEY_B = "share-tenant-a", "share-tenant-b"
KEYS: Final = ",".join(
    f"{tenant}={hashlib.sha256(key.encode()).hexdigest()}"
    for tenant, key in (("a", KEY_A), ("b", KEY_B))
)
TIMEOUT: Final = 2.0  # TOOLREF_LLM_TIMEOUT here
SLOW: Final = 1.2  # seconds the model takes for every call: well within the timeout
HYDRATES: Final = 13  # tenant a's burst: 13 hydrates of 16 results, 208 model calls at once
PER_HYDRATE: Final = 16


def slow_model(under_way: asyncio.Event) -> Behaviour:
    """A model that takes `SLOW` seconds for every call; `under_way` is set at its 20th."""

    async def slow(server: RawProvider, connection: Connection) -> None:
        if server.calls >= 20:
            under_way.set()
        await asyncio.sleep(SLOW)
        await connection.answer(completion("from the model"))

    return slow


def _client(url: str, key: str) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {key}", "Toolref-Protocol": "2"}
    return httpx.AsyncClient(base_url=url, headers=headers, timeout=60)


def _messages(first: int) -> list[dict[str, Any]]:
    """A user turn, then `PER_HYDRATE` distinct reads, each answered."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read every module"}]
    for n in range(first, first + PER_HYDRATE):
        call = invocation(n)
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{n}",
                        "type": "function",
                        "function": {"name": call["name"], "arguments": "{}"},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": call["result"]})
    messages.append({"role": "assistant", "content": "Done."})
    return messages


async def _hydrate(http: httpx.AsyncClient, first: int) -> None:
    body = {"messages": _messages(first), "mode": "summary", "keepRecent": 0, "summarizer": LLM}
    response = await http.post("/v1/messages:hydrate", json=body)
    assert response.status_code == 200, response.text


async def _summary(http: httpx.AsyncClient, n: int) -> dict[str, Any]:
    response = await http.post("/v1/invocations", json={"invocations": [invocation(n)]})
    assert response.status_code == 200, response.text
    ref = response.json()["refs"][0]["ref"]
    response = await http.get(
        f"/v1/invocations/{ref}/summary", params={"summarizer": LLM, "maxChars": 200}
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def test_a_tenants_burst_leaves_the_model_to_the_others(
    redis: Redis, engine_url: str
) -> None:
    # The engine client the service makes for itself (a pool that waits for a connection),
    # not the fixture's, which refuses past its own pool (typed as `Redis`, as conftest's).
    engine = cast(Redis, open_redis(Settings(redis_url="unused"), engine_url))
    under_way = asyncio.Event()
    async with (
        engine,
        raw_provider(slow_model(under_way)) as llm,
        serving(
            engine, api_keys=KEYS, llm_base_url=llm.url, llm_model=MODEL, llm_timeout=TIMEOUT
        ) as server,
    ):
        port = server.servers[0].sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        async with _client(url, KEY_A) as a, _client(url, KEY_B) as b:
            burst = [
                asyncio.create_task(_hydrate(a, 1000 + PER_HYDRATE * n)) for n in range(HYDRATES)
            ]
            # Tenant a's calls are under way (as many as the service lets it start).
            await asyncio.wait_for(under_way.wait(), 10)
            await asyncio.sleep(0.1)
            during = await _summary(b, 1)
            await asyncio.gather(*burst)
            after = await _summary(b, 2)
            metrics = (await b.get("/metrics")).text
    print(f"\nb during a's burst: {during['summarizer']}; after: {after['summarizer']}")
    # b's summary, asked while a's burst was under way, is the model's.
    assert (during["summarizer"], during["fallback"]) == (llm_id(200), False)
    # a's burst did not open the breaker for b.
    assert (after["summarizer"], after["fallback"]) == (llm_id(200), False)
    # a's extra summaries fell back at once, counted.
    shed = f'toolref_summary_fallbacks_total{{reason="tenant-in-flight",summarizer="{LLM}"}}'
    assert shed in metrics


async def test_calls_that_found_no_free_connection_do_not_open_the_breaker(
    redis: Redis, engine_url: str
) -> None:
    """One tenant (no keys: no share to keep), more calls at once than the connections: the
    calls past them waited for one, were not made, and are no failures of the model."""
    engine = cast(Redis, open_redis(Settings(redis_url="unused"), engine_url))
    async with (
        engine,
        raw_provider(slow_model(asyncio.Event())) as llm,
        serving(engine, llm_base_url=llm.url, llm_model=MODEL, llm_timeout=TIMEOUT) as server,
    ):
        port = server.servers[0].sockets[0].getsockname()[1]
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", headers={"Toolref-Protocol": "2"}, timeout=60
        ) as http:
            await asyncio.gather(*(_hydrate(http, 1000 + PER_HYDRATE * n) for n in range(HYDRATES)))
            made = llm.calls
            after = await _summary(http, 2)
            metrics = (await http.get("/metrics")).text
    print(f"\n{HYDRATES * PER_HYDRATE} calls at once: {made} made; then {after['summarizer']}")
    counted = f'toolref_summary_fallbacks_total{{reason="model-busy",summarizer="{LLM}"}} '
    busy = sum(
        int(float(line.removeprefix(counted)))
        for line in metrics.splitlines()
        if line.startswith(counted)
    )
    # TOOLREF_LLM_MAX_CONNECTIONS (100) at once: the others were not made, and counted.
    assert made <= 100 < HYDRATES * PER_HYDRATE == made + busy
    assert 'reason="failed"' not in metrics  # none of them counted as the model's failure
    assert (after["summarizer"], after["fallback"]) == (llm_id(200), False)
