"""Quotas on model calls: how many one request may make, how many a tenant's requests may
start each minute and have under way at once, and a circuit breaker per model-backed
summarizer.

- Per request: `per_request` summaries computed by (or waited for from) the model; the
  caller gives the rest the extractive summary.
- Per tenant: `per_tenant_minute` calls a minute, counted in the engine
  (`toolref_server.storage.counters`), so every process and replica shares it. A call is
  counted when it is about to start, whether it then succeeds or not.
- Per tenant at once: `per_tenant_in_flight` calls under way in this process (None: no
  bound, one tenant or none), so one tenant's burst holds at most that share of the
  process's connections to the model (TOOLREF_LLM_MAX_CONNECTIONS) and the others' calls
  find one free. Counted in memory: the connections it shares are the process's.
- Breaker: `toolref.kit.breaker.CircuitBreaker`, one per summarizer name, per process: after
  `breaker_failures` failures in a row the model is not called for `breaker_seconds`, then
  one call probes. (Per process, so N replicas make at most N probes per cool-down.) It is
  the model's health, which every tenant shares, so it is not per tenant; what one tenant's
  load causes is no failure of the model: its calls past its share are not made, and a call
  that found no free connection was not made either (`SummarizerBusy`); a probe that was
  not made, or was refused as its input, is abandoned (the next call probes). `clock`: the
  breakers' (monotonic; a test drives it).

Nothing here calls the model; `SummaryCache` asks before it does.
"""

from __future__ import annotations

import time
from collections.abc import Callable

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
        per_tenant_in_flight: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.counters = counters
        self.clock = clock  # the breakers' (a test drives it; read when one is made)
        self.per_tenant_in_flight = per_tenant_in_flight
        self._in_flight: dict[str, int] = {}  # tenant: its calls under way (none: no key)
        self.per_request = per_request
        self.per_tenant_minute = per_tenant_minute
        self.breaker_failures = breaker_failures
        self.breaker_seconds = breaker_seconds
        self._breakers: dict[str, CircuitBreaker] = {}

    def breaker(self, summarizer: str) -> CircuitBreaker:
        found = self._breakers.get(summarizer)
        if found is None:
            found = self._breakers[summarizer] = CircuitBreaker(
                self.breaker_failures, self.breaker_seconds, self.clock
            )
        return found

    def enter(self, tenant: str) -> bool:
        """Start one call of `tenant` if its share allows; False when it has
        `per_tenant_in_flight` under way (the call must not be made). `leave` ends it."""
        held = self._in_flight.get(tenant, 0)
        if self.per_tenant_in_flight is not None and held >= self.per_tenant_in_flight:
            return False
        self._in_flight[tenant] = held + 1
        return True

    def leave(self, tenant: str) -> None:
        held = self._in_flight.pop(tenant, 0) - 1
        if held > 0:
            self._in_flight[tenant] = held

    async def take(self, tenant: str) -> bool:
        """Count one model call for `tenant` in this minute; False when that is over the
        quota (the call must not be made). One round trip."""
        return await self.counters.count(tenant) <= self.per_tenant_minute
