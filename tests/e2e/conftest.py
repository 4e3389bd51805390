"""The chain between an agent and the fake provider, for every end-to-end test (see
tests/support/chain.py): `direct`, or `relay` (agent -> relay -> gateway -> fake), as
TOOLREF_E2E_CHAIN picks."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from starlette.types import ASGIApp

from tests.conftest import client_for
from tests.support.chain import KEY, UPSTREAM, Chain, chain_names, direct, relay_chain


@pytest.fixture(params=chain_names())
def chain(request: pytest.FixtureRequest, tmp_path: Path) -> Chain:
    """Given the fake's URL: the agent's base URL, the hops' recorders, and the teardown.
    `relay` (agent -> relay -> gateway -> fake) fails, saying so, while `toolref relay` has
    not landed."""
    if request.param == "direct":
        return direct
    engine_url: str = request.getfixturevalue("engine_url")

    @asynccontextmanager
    async def gateway(upstream: str) -> AsyncIterator[ASGIApp]:
        from toolref_server.app import create_app
        from toolref_server.settings import Settings

        redis = client_for(engine_url)
        try:
            await redis.flushall()
            tenant = f"e2e={hashlib.sha256(KEY.encode()).hexdigest()}"
            settings = Settings(
                redis_url="unused", upstreams=f"{UPSTREAM}={upstream}", api_keys=tenant
            )
            yield create_app(settings, redis=redis)
        finally:
            await redis.aclose()

    return relay_chain(gateway, tmp_path / "relay.log")
