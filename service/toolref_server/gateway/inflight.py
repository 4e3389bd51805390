"""`InFlight`: the gateway's requests in flight, in all and per tenant, each within its limit.

A gateway request holds an upstream connection, often for minutes (a stream), so a tenant
that opens many (or leaves many waiting on a slow upstream) would hold the pool every
tenant shares. Each tenant may hold `per_tenant` at once: past it, 429 `quota-exceeded`;
past the process's `limit`, 503 `overloaded`. Both before anything is read. A slot comes
back as soon as its request ends, however it ends (a client hanging up ends it at once).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from toolref.wire.errors import OverloadedError, QuotaExceededError


class InFlight:
    """See the module docstring. Memory: one counter per tenant with a request in flight."""

    def __init__(self, limit: int, per_tenant: int, retry_after: int) -> None:
        self.limit = limit
        self.per_tenant = per_tenant
        self.retry_after = retry_after
        self.total = 0
        self._tenants: dict[str, int] = {}

    def of(self, tenant: str) -> int:
        return self._tenants.get(tenant, 0)

    @contextmanager
    def held(self, tenant: str) -> Iterator[None]:
        """A slot for one of `tenant`'s requests while the block runs."""
        if self.total >= self.limit:
            raise OverloadedError(
                f"this gateway process has {self.total} requests in flight, its limit "
                f"(TOOLREF_GATEWAY_MAX_REQUESTS_IN_FLIGHT={self.limit}); retry after "
                f"{self.retry_after}s",
                retry_after=self.retry_after,
                limit=self.limit,
            )
        held = self.of(tenant)
        if held >= self.per_tenant:
            raise QuotaExceededError(
                f"this tenant has {held} gateway requests in flight in this process, its "
                f"limit (TOOLREF_GATEWAY_TENANT_REQUESTS_IN_FLIGHT={self.per_tenant}); let one "
                f"end, or retry after {self.retry_after}s",
                retry_after=self.retry_after,
                quota="gatewayRequestsInFlight",
                limit=self.per_tenant,
            )
        self.total += 1
        self._tenants[tenant] = held + 1
        try:
            yield
        finally:
            self.total -= 1
            left = self._tenants[tenant] - 1
            if left:
                self._tenants[tenant] = left
            else:
                del self._tenants[tenant]
