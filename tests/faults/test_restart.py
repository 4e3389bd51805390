"""Restarts in the middle of a conversation: no recipe is lost, and the conversation goes
on sending edits without a single resend.

tests/integration/test_cli.py already proves, for one ref registered by hand, that
`toolref-server serve` keeps it across Ctrl-C and a new process on the same data folder
(`test_serve_answers_and_refs_survive_ctrl_c_and_restart`) and across a SIGKILL of the service
(`test_a_killed_service_takes_its_engine_along_and_loses_no_ref`). What this adds: a real
conversation through the SDK (`ToolReferenceManager` -> `ToolRefMiddleware` -> registry over
HTTP, `POST /v1/edits:apply`) across `Service.restart()`, the turn after it an edit of the
recipe kept before (a recipe lost would be a 409 and a resend), and the same with a separate
engine (append-only file, no RDB snapshots) restarted gracefully as well.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.support.processes import Service
from toolref import AsyncRegistryClient, CircuitBreaker, ToolRefMiddleware
from toolref_server.embedded import free_port

from .support import Backend, Conversation, Engines

pytestmark = [pytest.mark.engine, pytest.mark.slow]

BEFORE, AFTER = 5, 4  # turns before and after the restart


async def chat_across(url: str, restart: Callable[[], None]) -> Conversation:
    """A conversation with the registry at `url`, restarted (by `restart`) after BEFORE turns.
    Checks that the client sent edits before and after, and never resent one: the recipes
    it edits against survived (the service's process, and its cache, did not)."""
    registry = AsyncRegistryClient(url, breaker=CircuitBreaker())
    backend = Backend(result_size=8_000)
    async with (
        registry,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=ToolRefMiddleware(backend.app(), registry)),
            base_url="http://backend",
        ) as http,
    ):
        conversation = Conversation(0, backend)
        for _ in range(BEFORE):
            await conversation.turn(http)
        # The first turn offered edits; the second went as one (nothing kept to edit
        # against yet); every later one as an edit of the recipe kept the turn before.
        assert conversation.edited == [False] + [True] * (BEFORE - 1)
        assert conversation.small(range(2, BEFORE)), conversation.sent_per_turn

        restart()

        for _ in range(AFTER):
            await conversation.turn(http)  # 200, and the backend saw the exact conversation
    # Every turn after the restart an edit of the recipe kept before it, none refused.
    assert conversation.small(range(BEFORE, BEFORE + AFTER)), conversation.sent_per_turn
    assert conversation.manager.savings.resends == 0
    return conversation


async def test_service_restart_mid_conversation(tmp_path: Path) -> None:
    """`toolref-server serve` on its embedded engine, restarted (Ctrl-C, then serve again on
    the same data folder) between two turns."""
    service = Service(tmp_path / "data", free_port())
    try:
        engine_before = service.engine_pid
        conversation = await chat_across(service.url, service.restart)
        assert service.engine_pid != engine_before  # the embedded engine restarted too
    finally:
        service.stop()
    print(f"\nservice restart: bytes sent per turn {conversation.sent_per_turn}")


async def test_engine_and_service_restart_mid_conversation(
    engines: Engines, tmp_path: Path
) -> None:
    """The service on an engine of its own, persisted by its append-only file alone: both
    stop (service first, then the engine gracefully), the engine starts again on the same
    data folder and port, then the service."""
    engine = engines.start("engine", appendonly="yes", save='""')
    service = Service(tmp_path / "data", free_port(), TOOLREF_REDIS_URL=engine.tcp_url)
    pids: list[int | None] = [engine.pid]

    def restart_both() -> None:
        service.stop()
        Engines.restart(engine)  # SIGTERM: the engine flushes its append-only file and exits
        pids.append(engine.pid)
        service.restart()

    try:
        conversation = await chat_across(service.url, restart_both)
    finally:
        service.stop()
    assert pids[0] != pids[1]  # a new engine process, which read the refs from disk
    assert (engine.data_dir / "appendonlydir").is_dir()
    assert not any(name.endswith(".rdb") for name in os.listdir(engine.data_dir))
    print(f"\nengine and service restart: bytes sent per turn {conversation.sent_per_turn}")
