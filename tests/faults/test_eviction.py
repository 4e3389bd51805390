"""The engine runs out of memory and evicts keys (allkeys-lru) while clients chat with large
tool results, as edits: an edit whose recipe or pieces were evicted is a 409
(missing-history, missing-pieces) the SDK resends on by itself, every turn answers 200, and
the backend always sees exactly the conversation the client holds."""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx
import pytest

from toolref import AsyncRegistryClient, CircuitBreaker, ToolRefMiddleware
from toolref_server.app import create_app
from toolref_server.settings import Settings

from .support import Backend, Conversation, Engines, TimingTransport, engine_info

pytestmark = pytest.mark.engine

CONVERSATIONS = 4
TURNS = 20
RESULT_SIZE, SPREAD = 20_000, 30_000  # characters of incompressible text per tool result
# About 1 MB above an empty engine's footprint: room for about a third of what the
# conversations keep (4 x 20 results of 20-50 KB, each a piece of its recipes).
MAXMEMORY = "2mb"


async def test_evicted_recipes_are_resent_and_every_turn_succeeds(engines: Engines) -> None:
    """Each turn is an edit of the recipe of the turn before: an eviction costs a resend
    where a turn needs what was evicted (its base, a piece it names), and every turn still
    answers 200 with the client's exact conversation."""
    engine = engines.start(
        "engine",
        appendonly="no",
        save='""',
        maxmemory=MAXMEMORY,
        **{"maxmemory-policy": "allkeys-lru"},
    )
    # No edit cache: what the engine evicts is gone, as for another replica.
    service = create_app(Settings(redis_url=engine.tcp_url, edit_cache_bytes=0))
    async with service.router.lifespan_context(service):
        link = TimingTransport(httpx.ASGITransport(app=service))
        registry = AsyncRegistryClient(
            "http://localhost:8750", transport=link, retries=0, breaker=CircuitBreaker()
        )
        backend = Backend(result_size=RESULT_SIZE, spread=SPREAD)
        async with (
            registry,
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=ToolRefMiddleware(backend.app(), registry)),
                base_url="http://backend",
            ) as http,
        ):
            conversations = [Conversation(n, backend) for n in range(CONVERSATIONS)]

            async def chat(conversation: Conversation) -> None:
                for _ in range(TURNS):
                    await conversation.turn(http)  # 200, and the backend saw the history

            await asyncio.gather(*(chat(c) for c in conversations))
        stats = await engine_info(engine, "stats")
        memory = await engine_info(engine, "memory")

    assert all(c.turns == TURNS for c in conversations)
    evicted = stats["evicted_keys"]
    assert evicted > 0, stats
    statuses = Counter(t.status for t in link.log if t.path == "/v1/edits:apply")
    # The registry answered every edit: applied, or 409 for an evicted base or pieces
    # (never 503: the engine evicts to make room rather than refusing writes).
    assert set(statuses) <= {200, 409}, statuses
    assert statuses[409] > 0, statuses  # evictions were felt ...
    resends = sum(c.manager.savings.resends for c in conversations)
    assert resends == statuses[409]  # ... each 409 answered by resending, once
    assert statuses[200] == sum(c.manager.savings.edits for c in conversations)
    assert all(c.edited[1:] == [True] * (TURNS - 1) for c in conversations)
    ratio = sum(c.manager.savings.full_bytes for c in conversations) / sum(
        c.manager.savings.sent_bytes for c in conversations
    )
    assert ratio > 1
    print(
        f"\neviction: {CONVERSATIONS}x{TURNS} turns all 200; {evicted} keys evicted "
        f"(maxmemory {MAXMEMORY}, peak {memory['used_memory_peak_human']}); edits answered "
        f"{dict(statuses)}; {resends} resends; upload ratio {ratio:.1f}x"
    )
