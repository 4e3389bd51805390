"""What the gateway counts per tenant and upstream, and the savings data and page it serves.

Over real sockets: the service (registry and gateway) on the test engine, two upstreams
served by the scripted provider of examples/llm_backend.py, and two tenants talking through
them with the official SDKs on `toolref.AsyncTransport`. Before issue 32 the gateway
counted bytes without tenant or upstream, counted no request or resend, and `/v1/savings`,
`/savings`, `/` and `/docs` were 404s.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import httpx2
import pytest
from examples import anthropic_client, openai_client
from examples.llm_backend import create_backend
from redis.asyncio import Redis

from tests.gateway_usage import (
    Usage,
    anthropic_turns,
    from_metrics,
    from_savings,
    openai_turns,
    per_minute,
)
from tests.support.servers import serve
from toolref_server.app import create_app
from toolref_server.settings import Settings

from ..conftest import key_names

ACME, BETA, SCRAPER = "acme-key-0001", "beta-key-0002", "scraper-key-0003"


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass
class Stack:
    url: str
    redis: Redis


@pytest.fixture
async def stack(redis: Redis) -> AsyncIterator[Stack]:
    async with serve(create_backend(None, delay=0.001)) as provider:
        settings = Settings(
            redis_url="unused",
            upstreams=f"openai={provider},claude={provider}",
            api_keys=f"acme={digest(ACME)},beta={digest(BETA)}",
            metrics_key=digest(SCRAPER),
            edit_cache_bytes=0,  # the store decides what is held: evicting keys is felt
        )
        async with serve(create_app(settings, redis=redis)) as url:
            yield Stack(url, redis)


async def test_the_savings_data_is_what_the_metrics_counted_per_tenant_and_upstream(
    stack: Stack,
) -> None:
    calls = 0

    async def evict_before_the_third_request(request: httpx2.Request) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            recipes = [n for n in await key_names(stack.redis) if n.split(":")[2] in "bkp"]
            await stack.redis.delete(*recipes)

    acme = await openai_turns(
        stack.url + "/llm/openai", ACME, openai_client.TASKS[:3], evict_before_the_third_request
    )
    beta = await anthropic_turns(stack.url + "/llm/claude", BETA, anthropic_client.TASKS[:2])
    async with httpx.AsyncClient(base_url=stack.url) as client:
        metrics = await from_metrics(client, SCRAPER)
        savings = await from_savings(client, SCRAPER)
    assert set(metrics) == {("acme", "openai"), ("beta", "claude")}
    counted = metrics[("acme", "openai")]
    # Every request on the wire counted; those the gateway answered 409 are the resends
    # (the recipe of the edit evicted: one), and every body forwarded is one the SDK built.
    assert counted["requests"] == len(acme.wire)
    assert counted["resends"] == len(acme.wire) - len(acme.sdk) == 1
    assert counted["rawBytes"] == sum(map(len, acme.sdk))
    assert 0 < counted["wireBytes"] < counted["rawBytes"]
    other = metrics[("beta", "claude")]
    assert other["requests"] == len(beta.wire) == len(beta.sdk)
    assert other["resends"] == 0
    assert other["rawBytes"] == sum(map(len, beta.sdk))
    assert other["wireBytes"] == sum(len(r.read()) for r in beta.wire)
    # The page's data: the store's per-minute counters, added up: the same numbers.
    assert savings == {"hour": metrics, "day": metrics}
    # And minute by minute (the page's view over time): minutes of the last day, adding up
    # to the same per tenant and upstream.
    async with httpx.AsyncClient(base_url=stack.url) as client:
        now, minutes = await per_minute(client, SCRAPER)
    assert all(now - 1440 < minute <= now for _, _, minute in minutes)
    added: Usage = {}
    for (tenant, upstream, _), counts in minutes.items():
        row = added.setdefault((tenant, upstream), dict.fromkeys(counts, 0))
        for field, value in counts.items():
            row[field] += value
    assert added == metrics


async def test_the_savings_data_wants_the_metrics_key(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url) as client:
        without = await client.get("/v1/savings")
        tenant = await client.get("/v1/savings", headers={"Authorization": f"Bearer {ACME}"})
        scraper = await client.get("/v1/savings", headers={"Authorization": f"Bearer {SCRAPER}"})
    assert without.status_code == 401
    assert without.headers["content-type"] == "application/problem+json"
    assert "GET /v1/savings needs a key" in without.json()["detail"]
    assert "TOOLREF_METRICS_KEY" in without.json()["detail"]
    assert tenant.status_code == 401  # a tenant's key does not open it
    assert scraper.status_code == 200
    assert [w["name"] for w in scraper.json()["windows"]] == ["hour", "day"]
    assert scraper.headers["cache-control"] == "no-store"


async def test_the_page_the_index_and_docs(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url) as client:
        root = await client.get("/")
        page = await client.get("/savings")
        docs = await client.get("/docs")
    assert root.status_code == 302
    assert root.headers["location"] == "/savings"
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert "connect-src 'self'" in page.headers["content-security-policy"]
    assert '"/v1/savings"' in page.text  # what it reads
    assert docs.status_code == 200
    assert docs.headers["content-type"] == "text/html; charset=utf-8"
    assert '<a href="/openapi.json">' in docs.text
    for path in ("/v1/savings", "/v1/messages:hydrate", "/metrics"):
        assert f"<code>{path}</code>" in docs.text


async def test_a_resent_request_counts_both_attempts_on_the_wire(stack: Stack) -> None:
    """An edit the gateway answered 409 (its base evicted) came over the wire, and so did
    its resend: the bytes on the wire are both attempts'. Before, the refused attempt's
    bytes were left out, and the page's `saved` (raw - wire) grew by them."""
    calls = 0

    async def evict_before_the_third_request(request: httpx2.Request) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            recipes = [n for n in await key_names(stack.redis) if n.split(":")[2] in "bkp"]
            await stack.redis.delete(*recipes)

    acme = await openai_turns(
        stack.url + "/llm/openai", ACME, openai_client.TASKS[:3], evict_before_the_third_request
    )
    async with httpx.AsyncClient(base_url=stack.url) as client:
        metrics = await from_metrics(client, SCRAPER)
        savings = await from_savings(client, SCRAPER)
    counted = metrics[("acme", "openai")]
    assert counted["resends"] == len(acme.wire) - len(acme.sdk) == 1
    assert counted["rawBytes"] == sum(map(len, acme.sdk))  # each body forwarded once
    assert counted["wireBytes"] == sum(len(r.read()) for r in acme.wire)  # every attempt
    assert savings["hour"][("acme", "openai")] == counted
