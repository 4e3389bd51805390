"""Probes are never refused for what requests without a key hold (review: attacks on the
tenant shares), over real sockets with the HTTP layer of `toolref-server serve` in process.

Found: the registry's per-tenant share of its requests in flight (TOOLREF_TENANT_REQUESTS_IN_
FLIGHT) counts every request that bears no known key in one bucket, and `/readyz` and
`/metrics` bear none: anyone who reached the port held that bucket's share (a quarter of
TOOLREF_MAX_REQUESTS_IN_FLIGHT: 32 by default) with answers it never reads (`/openapi.json`
pipelined on a connection whose receive window it keeps small, for `send_timeout` seconds at
a time), and the readiness probe and the metrics scrape were answered 429 `quota-exceeded`
("this tenant has 2 requests in flight") for as long as it liked: a load balancer took the
replica out of service, the scrape saw a gap. Before the share it took every slot of the
process (four times as many). Now the probes are counted in a share of their own.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
from typing import Final

import pytest
from redis.asyncio import Redis

from .gateway_wire import exchange, gateway
from .gateway_wire import request_bytes as raw

pytestmark = pytest.mark.engine

KEYS: Final = ",".join(
    f"{tenant}={hashlib.sha256(key.encode()).hexdigest()}"
    for tenant, key in (("a", "probe-tenant-a"), ("b", "probe-tenant-b"))
)
IN_FLIGHT: Final = 8  # TOOLREF_MAX_REQUESTS_IN_FLIGHT: a share of 2
PIPELINED: Final = 100  # answers of 76 KB each, far past what the buffers of a socket hold


async def _unread(url: str) -> socket.socket:
    """A connection with `PIPELINED` requests for `/openapi.json` (no key needed) whose
    answers it never reads, its receive window kept small: one request in flight held."""
    host, _, port = url.removeprefix("http://").partition(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, (host, int(port)))
    await loop.sock_sendall(sock, raw("GET", "/openapi.json") * PIPELINED)
    return sock


async def test_requests_without_a_key_never_refuse_the_probes(redis: Redis) -> None:
    async with gateway(
        redis, api_keys=KEYS, max_requests_in_flight=IN_FLIGHT, send_timeout=60
    ) as url:
        held = [await _unread(url) for _ in range(IN_FLIGHT // 4)]
        try:
            await asyncio.sleep(1.0)  # each connection's buffers full, its request waiting
            another = await exchange(url, raw("GET", "/openapi.json"), seconds=5)
            ready = await exchange(url, raw("GET", "/readyz"), seconds=5)
            scraped = await exchange(url, raw("GET", "/metrics"), seconds=5)
        finally:
            for sock in held:
                sock.close()
    assert another.status == 429, "the share of requests without a key was not held"
    assert ready.status == 200, ready.body
    assert scraped.status == 200, scraped.body[:300]
