"""The engine runs out of memory and evicts refs (allkeys-lru) while clients chat with large
tool results: the SDK resends evicted payloads on 409 missingRefs (or, with history refs, the
conversation on 409 missing-history), every turn answers 200, and the backend always sees
exactly the conversation the client holds."""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx
import pytest

from toolref import (
    AsyncRegistryClient,
    CircuitBreaker,
    ToolReferenceManager,
    ToolRefMiddleware,
)
from toolref_server.app import create_app
from toolref_server.settings import Settings

from .support import Backend, Conversation, Engines, TimingTransport, engine_info

pytestmark = pytest.mark.engine

CONVERSATIONS = 4
TURNS = 20
RESULT_SIZE, SPREAD = 20_000, 30_000  # characters of incompressible text per tool result
# About 1 MB above an empty engine's footprint: room for about a third of the refs the
# conversations make (4 x 20 results of 20-50 KB, stored compressed to about 3/4).
MAXMEMORY = "2mb"


@pytest.mark.parametrize("history_refs", [False, True])
async def test_evicted_refs_are_resent_and_every_turn_succeeds(
    engines: Engines, history_refs: bool
) -> None:
    """Without history refs every turn names its payloads by ref, so evictions come back as
    409s and resends. With them a turn sends only its new messages and the registry reads
    only the history's node: an eviction costs a resend only where a turn needs what was
    evicted, and every turn still answers 200 with the client's exact conversation."""
    engine = engines.start(
        "engine",
        appendonly="no",
        save='""',
        maxmemory=MAXMEMORY,
        **{"maxmemory-policy": "allkeys-lru"},
    )
    service = create_app(Settings(redis_url=engine.tcp_url))
    async with service.router.lifespan_context(service):
        link = TimingTransport(httpx.ASGITransport(app=service))
        registry = AsyncRegistryClient(
            "http://registry", transport=link, retries=0, breaker=CircuitBreaker()
        )
        backend = Backend(result_size=RESULT_SIZE, spread=SPREAD)
        async with (
            registry,
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=ToolRefMiddleware(backend.app(), registry)),
                base_url="http://backend",
            ) as http,
        ):
            conversations = [
                Conversation(n, backend, ToolReferenceManager(history_refs=history_refs))
                for n in range(CONVERSATIONS)
            ]

            async def chat(conversation: Conversation) -> None:
                for _ in range(TURNS):
                    await conversation.turn(http)  # 200, and the backend saw the history

            await asyncio.gather(*(chat(c) for c in conversations))
        stats = await engine_info(engine, "stats")
        memory = await engine_info(engine, "memory")

    assert all(c.turns == TURNS for c in conversations)
    evicted = stats["evicted_keys"]
    assert evicted > 0, stats
    statuses = Counter(t.status for t in link.log if t.path == "/v1/messages:hydrate")
    # The registry answered every hydrate: with the conversation, or 409 for evicted refs
    # (never 503: the engine evicts to make room rather than refusing writes).
    assert set(statuses) <= {200, 409}, statuses
    if not history_refs:
        assert statuses[409] > 0, statuses
    resends = sum(c.manager.savings.fallbacks for c in conversations)
    assert resends == statuses[409]  # each 409 was answered by resending, once
    refs_sent = sum(c.manager.savings.refs_sent for c in conversations)
    assert refs_sent > 0
    ratio = sum(c.manager.savings.full_bytes for c in conversations) / sum(
        c.manager.savings.sent_bytes for c in conversations
    )
    print(
        f"\neviction: {CONVERSATIONS}x{TURNS} turns all 200; {evicted} keys evicted "
        f"(maxmemory {MAXMEMORY}, peak {memory['used_memory_peak_human']}); hydrate answers "
        f"{dict(statuses)}; {resends} resends; {refs_sent} refs sent; upload ratio {ratio:.1f}x"
    )
