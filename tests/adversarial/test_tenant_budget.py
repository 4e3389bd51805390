"""One tenant's bodies in flight never refuse another's (review: one tenant's bodies).

Found: the process's budget of request-body bytes in flight (TOOLREF_MAX_INFLATED_IN_FLIGHT)
had no per-tenant share. Tenant `a` sending a few large bodies that stay in flight (here 8
uploads of half a MiB against a 4 MiB budget, each request within every limit) held it
all, and every request of tenant `b`, however small, was refused 503 `overloaded` for as
long as they lasted. Now each tenant holds at most its share
(TOOLREF_TENANT_INFLATED_IN_FLIGHT, by default a quarter of the budget): past it, its own
request is 429 `quota-exceeded` (`quota: inflatedBytesInFlight`, `limit`, `Retry-After`)
while `b` is served, at the gateway and at the registry's REST routes alike.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any, Final

import httpx
import pytest
from redis.asyncio import Redis

from tests.support.servers import serve
from toolref.asgi.budget import Budget
from toolref_server.app import create_app
from toolref_server.settings import Settings

from .bombs import CHAT, PROTOCOL, Upstream, register_body, until
from .gateway_wire import Reply, opened, read_reply, request_bytes

pytestmark = pytest.mark.engine

KIB: Final = 1024
BODY_LIMIT: Final = 512 * KIB  # as sent and inflated: one request may hold 1 MiB
BUDGET: Final = 4096 * KIB
SHARE: Final = BUDGET // 4  # the default share (at least what one request may hold)
PIECE: Final = BODY_LIMIT - 1  # what each of `a`'s uploads sends before it stalls
HELD: Final = BUDGET // BODY_LIMIT  # `a`'s uploads: together all of the budget but 8 bytes
KEY_A, KEY_B = "tenant-a-key", "tenant-b-key"
KEYS: Final = ",".join(
    f"{tenant}={hashlib.sha256(key.encode()).hexdigest()}"
    for tenant, key in (("a", KEY_A), ("b", KEY_B))
)
SMALL: Final = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
# Where each way in sends a body, and how a tenant's key goes with it.
WAYS: Final[dict[str, tuple[str, str, str]]] = {
    "gateway": (CHAT, "Toolref-Key", "{key}"),
    "registry": ("/v1/invocations", "Authorization", "Bearer {key}"),
}


async def stalled_upload(
    url: str, budget: Budget, way: str, expected: int
) -> tuple[asyncio.StreamWriter, Reply | None]:
    """One of `a`'s uploads: PIECE bytes of a body of PIECE + 1, then nothing more. Waits
    until the budget holds `expected` bytes (the upload held) or the service answers it."""
    target, name, value = WAYS[way]
    headers = [
        *PROTOCOL.items(),
        (name, value.format(key=KEY_A)),
        ("Content-Length", str(PIECE + 1)),
    ]
    reader, writer = await opened(url)
    writer.write(request_bytes("POST", target, headers, b"x" * PIECE, length=False))
    await writer.drain()
    answer = asyncio.ensure_future(read_reply(reader))
    await until(lambda: answer.done() or budget.in_flight >= expected)
    if answer.done():
        return writer, answer.result()
    answer.cancel()
    return writer, None


def small_request(way: str) -> dict[str, Any]:
    """`b`'s request: a body of a few dozen bytes."""
    target, name, value = WAYS[way]
    body = SMALL.encode() if way == "gateway" else register_body(0, 200)
    headers = {**PROTOCOL, name: value.format(key=KEY_B)}
    return {"method": "POST", "url": target, "content": body, "headers": headers}


@pytest.mark.parametrize("way", list(WAYS))
async def test_one_tenants_bodies_in_flight_never_refuse_another_tenant(
    redis: Redis, way: str
) -> None:
    """`a` opens HELD uploads that stall after PIECE bytes (before: all held, every byte of
    the budget but 8); `b`'s small request is served (before: 503 `overloaded`); `a`'s
    uploads past its share are 429 `quota-exceeded` naming the setting; once `a`'s
    uploads end, nothing is held and no tenant's entry is left."""
    upstream = Upstream()
    async with upstream.serving() as upstream_url:
        settings = Settings(
            redis_url="unused",
            upstreams=f"up={upstream_url}",
            api_keys=KEYS,
            max_body_bytes=BODY_LIMIT,
            max_decompressed_bytes=BODY_LIMIT,
            max_inflated_in_flight=BUDGET,
        )
        app = create_app(settings, redis=redis)
        budget: Budget = app.state.budget
        async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
            uploads: list[tuple[asyncio.StreamWriter, Reply | None]] = []
            for _ in range(HELD):
                held = sum(PIECE for _, reply in uploads if reply is None)
                uploads.append(await stalled_upload(url, budget, way, held + PIECE))
            other = await client.request(**small_request(way))
            for writer, _ in uploads:
                writer.close()
            await until(lambda: budget.in_flight == 0)
    assert other.status_code == 200, (other.status_code, other.text[:300])
    refused = [reply for _, reply in uploads if reply is not None]
    assert len(refused) == HELD - SHARE // PIECE  # `a` held its share, no more
    for reply in refused:
        problem = reply.json()
        assert reply.status == 429, problem
        assert problem["type"] == "urn:toolref:problem:quota-exceeded"
        assert problem["quota"] == "inflatedBytesInFlight"
        assert problem["limit"] == SHARE
        assert "TOOLREF_TENANT_INFLATED_IN_FLIGHT" in problem["detail"]
        assert (reply.header("retry-after") or "").isdigit()
    assert budget.high_water <= SHARE + len(SMALL) + 1024  # `a`'s share and `b`'s request
    assert budget.tenants_holding == 0  # no tenant's entry outlives its bytes
