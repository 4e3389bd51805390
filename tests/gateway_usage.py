"""Known gateway traffic for the savings tests: the official SDKs on `toolref.AsyncTransport`
through `/llm/{upstream}` under a tenant's key, and what `/metrics` and `/v1/savings` say of
it per tenant and upstream."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import httpx
import httpx2
import openai
from examples import anthropic_client, openai_client
from prometheus_client.parser import text_string_to_metric_families

from tests.support.servers import AsyncWire
from toolref import AsyncTransport, ToolReferenceManager
from toolref.wire.headers import KEY_HEADER

TIMEOUT = 30
Hook = Callable[[httpx2.Request], Awaitable[None]]


class Sent:
    """What one conversation sent: each request the SDK built and each on the wire."""

    def __init__(self) -> None:
        self.sdk: list[bytes] = []
        self.wire: list[httpx2.Request] = []

    def client(self, before: Hook | None = None) -> httpx2.AsyncClient:
        wire = AsyncWire()
        self.wire = wire.sent

        async def record(request: httpx2.Request) -> None:
            self.sdk.append(await request.aread())
            if before is not None:
                await before(request)

        # over HTTP, every request on `wire` (the tests count them)
        transport = AsyncTransport(wire, manager=ToolReferenceManager(), channel=False)
        return httpx2.AsyncClient(transport=transport, event_hooks={"request": [record]})


async def openai_turns(
    base: str, key: str, tasks: tuple[str, ...], before: Hook | None = None
) -> Sent:
    """An OpenAI chat through `base` (the gateway's `/llm/{upstream}`) as `key`'s tenant."""
    sent = Sent()
    async with openai.AsyncOpenAI(
        base_url=base + "/v1",
        api_key="sk-test",
        max_retries=0,
        timeout=TIMEOUT,
        default_headers={KEY_HEADER: key},
        http_client=sent.client(before),
    ) as client:
        await openai_client.aconverse(client, tasks)
    return sent


async def anthropic_turns(base: str, key: str, tasks: tuple[str, ...]) -> Sent:
    """An Anthropic chat, as `openai_turns`."""
    sent = Sent()
    async with anthropic.AsyncAnthropic(
        base_url=base,
        api_key="sk-test",
        max_retries=0,
        timeout=TIMEOUT,
        default_headers={KEY_HEADER: key},
        http_client=sent.client(),
    ) as client:
        await anthropic_client.aconverse(client, tasks)
    return sent


Usage = dict[tuple[str, str], dict[str, int]]


async def from_metrics(client: httpx.AsyncClient, key: str) -> Usage:
    """requests, resends, rawBytes, wireBytes per (tenant, upstream), read from /metrics."""
    answer = await client.get("/metrics", headers={"Authorization": f"Bearer {key}"})
    answer.raise_for_status()
    found: Usage = {}
    names = {
        "toolref_gateway_requests_total": "requests",
        "toolref_gateway_resends_total": "resends",
    }
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "toolref_upload_bytes_total":
                field = "rawBytes" if labels["kind"] == "raw" else "wireBytes"
            elif sample.name in names:
                field = names[sample.name]
            else:
                continue
            row = found.setdefault((labels["tenant"], labels["upstream"]), _zero())
            row[field] = int(sample.value)
    return found


async def from_savings(client: httpx.AsyncClient, key: str) -> dict[str, Usage]:
    """Each window of GET /v1/savings, as `from_metrics` reads /metrics."""
    answer = await client.get("/v1/savings", headers={"Authorization": f"Bearer {key}"})
    answer.raise_for_status()
    return {window["name"]: rows(window["rows"]) for window in answer.json()["windows"]}


Minutes = dict[tuple[str, str, int], dict[str, int]]


async def per_minute(client: httpx.AsyncClient, key: str) -> tuple[int, Minutes]:
    """GET /v1/savings's series: the current minute, and what each tenant and upstream used
    in each minute it used the gateway, by (tenant, upstream, minute)."""
    answer = await client.get("/v1/savings", headers={"Authorization": f"Bearer {key}"})
    answer.raise_for_status()
    found: Minutes = {}
    for series in answer.json()["series"]:
        minutes = [point["minute"] for point in series["points"]]
        assert minutes == sorted(set(minutes)), "one point per minute, oldest first"
        for point in series["points"]:
            found[(series["tenant"], series["upstream"], point["minute"])] = {
                f: int(point[f]) for f in _zero()
            }
    return answer.json()["minute"], found


def rows(found: list[dict[str, Any]]) -> Usage:
    fields = tuple(_zero())
    return {(r["tenant"], r["upstream"]): {f: int(r[f]) for f in fields} for r in found}


def _zero() -> dict[str, int]:
    return {"requests": 0, "resends": 0, "rawBytes": 0, "wireBytes": 0}
