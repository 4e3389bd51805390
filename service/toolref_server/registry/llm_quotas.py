"""Quotas on model calls: how many one request may make, how many a tenant's requests may
start each minute, and a circuit breaker per model-backed summarizer.

- Per request: `per_request` summaries computed by (or waited for from) the model; the
  caller gives the rest the extractive summary.
- Per tenant: `per_tenant_minute` calls a minute, counted in the engine
  (`toolref_server.storage.counters`), so every process and replica shares it. A call is
  counted when it is about to start, whether it then succeeds or not.
- Breaker: `toolref.kit.breaker.CircuitBreaker`, one per summarizer name, per process: after
  `breaker_failures` failures in a row the model is not called for `breaker_seconds`, then
  one call probes. (Per process, so N replicas make at most N probes per cool-down.)

Nothing here calls the model; `SummaryCache` asks before it does.
"""

from __future__ import annotations

from toolref.kit.breaker import CircuitBreaker
from toolref_server.storage.counters import ModelCallCounters


class ModelCallQuotas:
    def __init__(
        self,
        counters: ModelCallCounters,
        *,
        per_request: int,
        per_tenant_minute: int,
        breaker_failures: int,
        breaker_seconds: float,
    ) -> None:
        self.counters = counters
        self.per_request = per_request
        self.per_tenant_minute = per_tenant_minute
        self.breaker_failures = breaker_failures
        self.breaker_seconds = breaker_seconds
        self._breakers: dict[str, CircuitBreaker] = {}

    def breaker(self, summarizer: str) -> CircuitBreaker:
        found = self._breakers.get(summarizer)
        if found is None:
            found = self._breakers[summarizer] = CircuitBreaker(
                self.breaker_failures, self.breaker_seconds
            )
        return found

    async def take(self, tenant: str) -> bool:
        """Count one model call for `tenant` in this minute; False when that is over the
        quota (the call must not be made). One round trip."""
        return await self.counters.count(tenant) <= self.per_tenant_minute
