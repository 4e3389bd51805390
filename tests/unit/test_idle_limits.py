"""Every toolref client keeps an idle pooled connection for less than its receivers keep it
(uvicorn's `timeout_keep_alive`, a backend's; the gateway's `TOOLREF_KEEP_ALIVE_TIMEOUT`):
a request written as the receiver closes an idle connection fails, and a POST is never sent
twice. Read from each client's own pool, as it is made."""

from __future__ import annotations

import httpcore2
import httpx
import pytest
import uvicorn

from toolref.registry.client import AsyncRegistryClient, RegistryClient
from toolref.registry.plain_transport import KEEP_ALIVE, PlainTransport
from toolref_relay.pool import Pool
from toolref_server.gateway.upstream_pool import Timeouts, UpstreamPool
from toolref_server.settings import Settings

RECEIVERS = min(
    uvicorn.Config(app="unused:app").timeout_keep_alive,
    Settings.model_fields["keep_alive_timeout"].default,
)


def _expiry(transport: object) -> float:
    pool = getattr(transport, "_pool", transport)
    expiry = pool._keepalive_expiry  # type: ignore[attr-defined]
    assert isinstance(expiry, float)
    return expiry


def test_the_registry_clients_keep_idle_connections_for_less() -> None:
    """Before: the sync client (httpx's pool) and the asyncio one (`PlainTransport` and its
    TLS fallback) kept them 5 s, as long as the registry."""
    sync = RegistryClient("http://registry")
    try:
        assert _expiry(sync._http._transport) < RECEIVERS
    finally:
        sync.close()
    assert KEEP_ALIVE < RECEIVERS
    assert _expiry(PlainTransport().fallback) < RECEIVERS
    assert isinstance(AsyncRegistryClient("http://registry")._http._transport, PlainTransport)


def test_the_gateway_keeps_idle_upstream_connections_for_less() -> None:
    """Before: 5 s, as long as a backend served by uvicorn (or Node) keeps them."""
    pool = UpstreamPool(max_connections=2, timeouts=Timeouts(1.0, 1.0))
    assert pool._keepalive_expiry is not None
    assert pool._keepalive_expiry < RECEIVERS
    made = pool.create_connection(httpcore2.Origin(b"http", b"upstream", 80))
    expiry = made._keepalive_expiry  # type: ignore[attr-defined]
    assert expiry is not None
    assert expiry < RECEIVERS


@pytest.mark.parametrize("announced", [None, 1, 2, 5, 60])
def test_the_relay_keeps_idle_connections_for_less_than_announced(announced: int | None) -> None:
    keep = _expiry(Pool(announced)._pool)
    assert keep < (announced or RECEIVERS)
    assert isinstance(Pool()._pool, httpx.AsyncHTTPTransport)
