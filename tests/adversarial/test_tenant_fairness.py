"""One tenant holding what every tenant shares never refuses another (review: tenant
fairness), over real sockets with the HTTP layer of `toolref-server serve` in process.

Found:
- The channel (`/v1/channel`) was accepted without a key and without a count: tenant `a`
  (or anyone who reached the port, with no key at all) opened channels until the worker's
  TOOLREF_MAX_CONNECTIONS was taken (an open channel is never idle, so none made room), and
  every request of tenant `b` was answered 503 `overloaded` for as long as they stayed open
  (a channel has no end of its own). Now the upgrade is refused 401 without a key of this
  service (`Toolref-Key`, as its turns carry), and 429 past the tenant's channels
  (TOOLREF_TENANT_CHANNELS: a quarter of the connection limit by default); its sender then
  sends its turns over HTTP.
- The registry's requests in flight (TOOLREF_MAX_REQUESTS_IN_FLIGHT) had no per-tenant
  share: tenant `a` holding that many requests (uploads it sends slowly, summaries a slow
  model makes) refused every request of `b` 503. Now each tenant holds at most
  TOOLREF_TENANT_REQUESTS_IN_FLIGHT of them (a quarter by default); past it its own request
  is 429 `quota-exceeded` (`quota: requestsInFlight`) while `b` is served.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from typing import Any, Final

import pytest
from redis.asyncio import Redis

from toolref.websocket.driver import Refusal, Socket, connect
from toolref.wire.endpoints import CHANNEL

from .gateway_wire import RawUpstream, Reply, echo, exchange, gateway, opened, read_reply
from .gateway_wire import request_bytes as raw

pytestmark = pytest.mark.engine

KEY_A, KEY_B = "fair-tenant-a", "fair-tenant-b"
KEYS: Final = ",".join(
    f"{tenant}={hashlib.sha256(key.encode()).hexdigest()}"
    for tenant, key in (("a", KEY_A), ("b", KEY_B))
)
CONNECTIONS: Final = 12  # TOOLREF_MAX_CONNECTIONS in the channel test
IN_FLIGHT: Final = 8  # TOOLREF_MAX_REQUESTS_IN_FLIGHT in the registry test


async def _channel(url: str, headers: list[tuple[str, str]]) -> Socket | Refusal:
    target = url.replace("http://", "ws://") + CHANNEL
    try:
        return await connect(target, headers, max_message=1 << 20, connect_timeout=5)
    except Refusal as refused:
        return refused


def _problem(refused: Refusal) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(refused.body)
    return found


async def test_one_tenants_channels_never_take_every_connection(redis: Redis) -> None:
    """`a` opens as many channels as the worker keeps connections; `b` is still served,
    and a channel without a key is refused before it is accepted."""
    async with (
        RawUpstream(echo) as upstream,
        gateway(
            redis, upstreams=f"up={upstream.url}", api_keys=KEYS, max_connections=CONNECTIONS
        ) as url,
    ):
        got = [await _channel(url, [("Toolref-Key", KEY_A)]) for _ in range(CONNECTIONS)]
        keyless = await _channel(url, [])
        try:
            served = await exchange(url, raw("GET", "/llm/up/v1/models", [("Toolref-Key", KEY_B)]))
        finally:
            for socket in got:
                if isinstance(socket, Socket):
                    await socket.close()
            if isinstance(keyless, Socket):
                await keyless.close()
    assert served.status == 200, served.body
    refused = [r for r in got if isinstance(r, Refusal)]
    assert refused, "every channel of `a` was accepted"
    assert {r.status for r in refused} == {429}
    problem = _problem(refused[0])
    assert "TOOLREF_TENANT_CHANNELS" in problem["detail"], problem
    assert problem["quota"] == "channels"
    assert problem["limit"] == CONNECTIONS // 4
    assert sum(isinstance(s, Socket) for s in got) == CONNECTIONS // 4
    assert isinstance(keyless, Refusal)
    assert keyless.status == 401


async def _held(url: str, key: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A registry request of `key`'s tenant whose body never comes (its slot held)."""
    reader, writer = await opened(url)
    head = raw(
        "POST",
        "/v1/invocations",
        [("Authorization", f"Bearer {key}"), ("Toolref-Protocol", "2")],
        length=False,
    )
    writer.write(head[:-2] + b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
    await writer.drain()
    return reader, writer


async def _small(url: str, key: str) -> Reply:
    headers = [
        ("Authorization", f"Bearer {key}"),
        ("Toolref-Protocol", "2"),
        ("Content-Type", "application/json"),
    ]
    return await exchange(
        url, raw("POST", "/v1/invocations:findMissing", headers, b'{"refs": []}'), seconds=5
    )


async def test_one_tenants_registry_requests_never_take_every_slot(redis: Redis) -> None:
    """`a` holds as many registry requests as the worker takes; `b` is still served, and
    `a`'s requests past its share are refused 429 at once, never held."""
    async with gateway(
        redis, api_keys=KEYS, max_requests_in_flight=IN_FLIGHT, body_timeout=60
    ) as url:
        holders = [await _held(url, KEY_A) for _ in range(IN_FLIGHT)]
        await asyncio.sleep(0.3)  # every head read, each request waiting for its body
        try:
            served = await _small(url, KEY_B)
            refused = await _small(url, KEY_A)
            answered = []  # `a`'s held requests answered at once: those past its share
            for reader, _ in holders:
                with contextlib.suppress(TimeoutError):
                    answered.append(await asyncio.wait_for(read_reply(reader), 0.5))
        finally:
            for _, writer in holders:
                writer.close()
    assert served.status == 200, served.body
    assert refused.status == 429, refused.body
    problem = refused.json()
    assert problem["quota"] == "requestsInFlight"
    assert problem["limit"] == IN_FLIGHT // 4
    assert "TOOLREF_TENANT_REQUESTS_IN_FLIGHT" in problem["detail"]
    assert refused.header("retry-after") is not None
    assert [r.status for r in answered] == [429] * (IN_FLIGHT - IN_FLIGHT // 4)
