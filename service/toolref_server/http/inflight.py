"""`InFlight`: requests in flight in this process, in all and per tenant, each within its
limit: the one count behind the registry's admission (`http.admission`), the gateway's, and
the channels a tenant keeps open (`gateway.gate`).

Every request in flight holds memory and a share of the event loop; a gateway request also
holds an upstream connection, often for minutes (a stream), so a tenant that opens many (or
leaves many waiting on a slow upstream) would hold the pool every tenant shares. Past the
process's `limit`, 503 `overloaded`; past a tenant's `per_tenant` (None: no share, one
tenant or none), 429 `quota-exceeded`. Both before anything is read.
A slot comes back as soon as its request ends, however it ends (a client hanging up ends
it at once).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from toolref.wire.errors import OverloadedError, QuotaExceededError


class InFlight:
    """See the module docstring. Memory: one counter per tenant with a request in flight."""

    def __init__(
        self,
        limit: int,
        per_tenant: int | None,
        retry_after: int,
        *,
        setting: str = "TOOLREF_GATEWAY_MAX_REQUESTS_IN_FLIGHT",
        fix: str = "",
        tenant_setting: str = "TOOLREF_GATEWAY_TENANT_REQUESTS_IN_FLIGHT",
        quota: str = "gatewayRequestsInFlight",
        what: str = "gateway requests in flight",
    ) -> None:
        self.limit = limit
        self.per_tenant = per_tenant
        self.retry_after = retry_after
        self.setting = setting
        self.fix = fix
        self.tenant_setting, self.quota, self.what = tenant_setting, quota, what
        self.total = 0
        self._tenants: dict[str, int] = {}

    def of(self, tenant: str) -> int:
        return self._tenants.get(tenant, 0)

    @contextmanager
    def held(self, tenant: str = "") -> Iterator[None]:
        """A slot for one of `tenant`'s requests while the block runs."""
        self.take(tenant)
        try:
            yield
        finally:
            self.give(tenant)

    def take(self, tenant: str = "") -> None:
        """Take a slot for one of `tenant`'s requests (`give` it back once it ends)."""
        if self.total >= self.limit:
            raise OverloadedError(
                f"this process has {self.total} requests in flight, its limit "
                f"({self.setting}={self.limit}); retry after {self.retry_after}s{self.fix}",
                retry_after=self.retry_after,
                limit=self.limit,
            )
        held = self.of(tenant)
        if self.per_tenant is not None and held >= self.per_tenant:
            raise QuotaExceededError(
                f"this tenant has {held} {self.what} in this process, its limit "
                f"({self.tenant_setting}={self.per_tenant}); let one end, or retry after "
                f"{self.retry_after}s",
                retry_after=self.retry_after,
                quota=self.quota,
                limit=self.per_tenant,
            )
        self.total += 1
        self._tenants[tenant] = held + 1

    def give(self, tenant: str = "") -> None:
        """Give back a slot `take` took."""
        self.total -= 1
        left = self._tenants[tenant] - 1
        if left:
            self._tenants[tenant] = left
        else:
            del self._tenants[tenant]
