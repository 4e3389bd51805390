"""What the model refuses as one tenant's input never shuts it for every tenant (review:
attacks on model calls), over real sockets: the service served by uvicorn in process, a
fake model (`raw_provider`) on its own socket that refuses some inputs 400, as a content
filter does (Azure OpenAI's `content_filter`).

Found: the model's circuit breaker (one per process, every tenant's) counted each answer
that was not a 2xx as a failure of the model, 400 included. Tenant `a` asking for the
summaries of five results the model refuses (TOOLREF_LLM_BREAKER_FAILURES) opened the
breaker, and every tenant's summaries were extractive for its cool-down
(TOOLREF_LLM_BREAKER_SECONDS), again each time `a` asked for five more. Now an answer that
says the request was wrong (400, 413, 422) fails that summary alone (its failure mark, as
before): the model answered, so it counts neither for nor against its health.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final, cast

import httpx
import pytest
from redis.asyncio import Redis

from tests.support.fake_provider.raw import MODEL, Connection, RawProvider, completion, raw_provider
from toolref_server.app import open_redis
from toolref_server.settings import Settings

from .gateway_wire import serving
from .summarizer_app import LLM, invocation, llm_id

pytestmark = pytest.mark.engine

KEY_A, KEY_B = "refused-tenant-a", "refused-tenant-b"
KEYS: Final = ",".join(
    f"{tenant}={hashlib.sha256(key.encode()).hexdigest()}"
    for tenant, key in (("a", KEY_A), ("b", KEY_B))
)
FLAGGED: Final = "FLAGGED-BY-THE-FILTER"
FILTERED: Final = json.dumps(
    {
        "error": {
            "message": "The response was filtered due to the prompt triggering content management "
            "policy.",
            "type": None,
            "param": "prompt",
            "code": "content_filter",
        }
    }
).encode()


async def filtering(server: RawProvider, connection: Connection) -> None:
    """A model that refuses 400 any prompt holding `FLAGGED`, and answers the others."""
    prompt = json.dumps(connection.body.get("messages"))
    if FLAGGED in prompt:
        await connection.answer(FILTERED, status=400)
    else:
        await connection.answer(completion("from the model"))


async def _summary(http: httpx.AsyncClient, call: dict[str, Any]) -> dict[str, Any]:
    response = await http.post("/v1/invocations", json={"invocations": [call]})
    assert response.status_code == 200, response.text
    ref = response.json()["refs"][0]["ref"]
    response = await http.get(
        f"/v1/invocations/{ref}/summary", params={"summarizer": LLM, "maxChars": 200}
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _client(url: str, key: str) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {key}", "Toolref-Protocol": "2"}
    return httpx.AsyncClient(base_url=url, headers=headers, timeout=30)


async def test_one_tenants_refused_inputs_leave_the_model_to_the_others(
    redis: Redis, engine_url: str
) -> None:
    engine = cast(Redis, open_redis(Settings(redis_url="unused"), engine_url))
    async with (
        engine,
        raw_provider(filtering) as llm,
        serving(engine, api_keys=KEYS, llm_base_url=llm.url, llm_model=MODEL) as server,
    ):
        port = server.servers[0].sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        async with _client(url, KEY_A) as a, _client(url, KEY_B) as b:
            refused = [await _summary(a, invocation(n, f"{FLAGGED} {n}\n" * 40)) for n in range(8)]
            made = llm.calls
            again = await _summary(a, invocation(3, f"{FLAGGED} 3\n" * 40))
            served = await _summary(b, invocation(100))
    # Each refused summary fell back, and was asked once: its failure mark holds.
    assert all(answer["fallback"] for answer in refused), refused
    assert made == 8
    assert again["fallback"]
    assert llm.calls == made + 1  # b's call, not a's again
    # b's summary is still the model's: a's refusals did not open the breaker.
    assert (served["summarizer"], served["fallback"]) == (llm_id(200), False), served
