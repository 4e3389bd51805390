"""Per-minute counters of model calls, one per tenant, in the engine (`keys.model_calls`).

A fixed one-minute window: `INCR` of the minute's counter, which expires after two minutes,
so every process and replica shares one count and at most two counters per tenant are
alive. What the count allows is `toolref_server.registry.llm_quotas`'s. The counter is a
command on the engine directly (as the summary cache's locks are): an engine error is a
`StoreUnavailableError` naming the summary cache, whose model calls these count.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from toolref_server.storage import keys
from toolref_server.storage.store import Store
from toolref_server.storage.summary_store import engine_errors

WINDOW_SECONDS: Final = 60


class ModelCallCounters:
    def __init__(self, store: Store, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock

    async def count(self, tenant: str) -> int:
        """Count one model call of `tenant` in this minute; the minute's count with it. One
        round trip."""
        key = keys.model_calls(tenant, int(self.clock() // WINDOW_SECONDS))
        with engine_errors(self.store):
            pipe = self.store.redis.pipeline(transaction=False)
            pipe.incr(key)
            pipe.expire(key, 2 * WINDOW_SECONDS)
            replies: list[Any] = await pipe.execute()
        return int(replies[0])
