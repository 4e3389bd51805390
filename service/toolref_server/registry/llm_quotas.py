"""Quotas on model calls: how many one request may make, how many a tenant's requests may
start each minute, and a circuit breaker per model-backed summarizer.

- Per request: `per_request` summaries computed by (or waited for from) the model; the
  caller gives the rest the extractive summary.
- Per tenant: a fixed one-minute window counted in Redis (`INCR tr:<tenant>:c:<minute>`,
  expiring after two minutes), so every process and replica shares it. A call is counted
  when it is about to start, whether it then succeeds or not.
- Breaker: `toolref.breaker.CircuitBreaker`, one per summarizer name, per process: after
  `breaker_failures` failures in a row the model is not called for `breaker_seconds`, then
  one call probes. (Per process, so N replicas make at most N probes per cool-down.)

Nothing here calls the model; `SummaryCache` asks before it does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from toolref.breaker import CircuitBreaker
from toolref_server.storage.store import StoreClient

WINDOW_SECONDS: Final = 60


class Quotas:
    def __init__(
        self,
        redis: StoreClient,
        *,
        per_request: int,
        per_tenant_minute: int,
        breaker_failures: int,
        breaker_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.redis = redis
        self.per_request = per_request
        self.per_tenant_minute = per_tenant_minute
        self.breaker_failures = breaker_failures
        self.breaker_seconds = breaker_seconds
        self._clock = clock
        self._breakers: dict[str, CircuitBreaker] = {}

    def breaker(self, summarizer: str) -> CircuitBreaker:
        found = self._breakers.get(summarizer)
        if found is None:
            found = self._breakers[summarizer] = CircuitBreaker(
                self.breaker_failures, self.breaker_seconds
            )
        return found

    @staticmethod
    def key(tenant: str, window: int) -> str:
        return f"tr:{tenant}:c:{window}"

    async def take(self, tenant: str) -> bool:
        """Count one model call for `tenant` in this minute; False when that is over the
        quota (the call must not be made). One round trip."""
        key = self.key(tenant, int(self._clock() // WINDOW_SECONDS))
        pipe = self.redis.pipeline(transaction=False)
        pipe.incr(key)
        pipe.expire(key, 2 * WINDOW_SECONDS)
        replies: list[Any] = await pipe.execute()
        return int(replies[0]) <= self.per_tenant_minute
