"""A process's budget of request-body bytes in flight: what bodies take once they arrive and
inflate, in all requests at once, bounded; past it a request is refused at once (503).

A gzip or zstd body of a few KB may inflate to tens of megabytes, and each request then
holds a few times that while it is parsed, hydrated and sent on. The limit on one body
(`max_decompressed_bytes`) does not bound how many such bodies a process holds at once:
this does. Every reader of request bodies (the registry's REST body reader, the
middleware's and the gateway's `Hydrator`, the relay) opens an `Account` per request and
charges it *before* it keeps bytes: each piece of an identity body as it arrives, each
chunk of at most 64 KiB of inflated output before it is kept (a zstd frame that declares
its size: that size, before inflating), and what a history adds to the hydrated body.
The account is released whole when the request is done with its body (`with`, or
`async with`, or `close()` once the body was sent on and is no longer held).

A charge past the limit raises `OverloadedError` (503 `overloaded`, `Retry-After`, a
detail naming the setting to raise) at once: no request waits on another, so nothing can
deadlock, and a request that was refused gives back all it had charged. Charges come from
worker threads (where inflation runs) as well as the event loop: the budget is guarded by
a lock held only for an addition.

Tenants: where a request's tenant is known (the gateway, from its `Toolref-Key`; the
registry's REST routes, once the key is checked and before the body is read: `Account.bind`),
its account charges that tenant's share too: at most `per_tenant` bytes of all of one
tenant's requests at once, past it `QuotaExceededError` (429 `quota-exceeded`, `quota:
inflatedBytesInFlight`, `limit`, `Retry-After`), so one tenant's large bodies never fill
the budget every tenant shares. A request with no tenant (a chat backend's middleware, the
relay) charges the budget alone. O(1) per charge under the same lock; memory: one counter
per tenant holding bytes now (its entry goes when it holds nothing).

Memory: what a process holds for request bodies is about k times the budget, k the peak
cost per body byte of its costliest path, measured with tracemalloc: 6.4 for a hydrated
gateway request of many tool results, 9 when one tool result is the whole body; 4.2 and 6
for the registry's REST hydrate (docs/operations.md, "Memory per request";
tests/adversarial/test_memory_bounds.py holds each under its bound).
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Final, Self

from toolref.wire.errors import OverloadedError, QuotaExceededError

DEFAULT_LIMIT: Final = 256 * 2**20  # four bodies at the default 64 MiB inflated limit
SCOPE_KEY: Final = "toolref.account"  # the ASGI scope entry holding a request's `Account`
_DEFAULT_SETTING: Final = "toolref.asgi.budget.shared.limit"
QUOTA: Final = "inflatedBytesInFlight"  # the 429's `quota` past a tenant's share


class Budget:
    """At most `limit` bytes charged at once, by every account of the process together.

    setting: what the operator raises to allow more (named in the 503's detail).
    retry_after: seconds a refused client is told to wait.
    per_tenant: at most this many of them charged by one tenant's accounts (None: no share);
    tenant_setting names it in the 429's detail.
    `in_flight` is what is charged now, `high_water` the most ever charged at once.
    """

    def __init__(
        self,
        limit: int = DEFAULT_LIMIT,
        *,
        setting: str = _DEFAULT_SETTING,
        retry_after: int = 1,
        per_tenant: int | None = None,
        tenant_setting: str = "per_tenant",
    ) -> None:
        if limit < 1 or retry_after < 0:
            raise ValueError(
                f"a budget of {limit} bytes (retry after {retry_after}s) cannot admit a body; "
                f"give {setting} a positive number of bytes"
            )
        if per_tenant is not None and not 1 <= per_tenant <= limit:
            raise ValueError(
                f"a tenant's share of {per_tenant} bytes ({tenant_setting}) does not fit the "
                f"budget of {limit} ({setting}); give it at most {limit} bytes and at least 1"
            )
        self.limit = limit
        self.setting = setting
        self.retry_after = retry_after
        self.per_tenant = per_tenant
        self.tenant_setting = tenant_setting
        self._lock = threading.Lock()
        self._in_flight = 0
        self._high_water = 0
        self._tenants: dict[str, int] = {}  # bytes held by each tenant holding any

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def high_water(self) -> int:
        return self._high_water

    @property
    def tenants_holding(self) -> int:
        """How many tenants hold bytes now (the entries kept)."""
        return len(self._tenants)

    def of(self, tenant: str) -> int:
        """The bytes `tenant`'s accounts hold now."""
        return self._tenants.get(tenant, 0)

    def account(self, tenant: str | None = None) -> Account:
        """A new request's account, charged nothing yet; `tenant`: whose share it charges
        too (None: none, or not known yet: `Account.bind`)."""
        return Account(self, tenant)

    def _take(self, account: Account, size: int) -> None:
        with self._lock:
            if account.closed:
                # The request ended (cancelled while a worker thread inflated its body):
                # what the thread would keep has no one to release it.
                raise OverloadedError(
                    "the request ended while its body was read; nothing to retry",
                    retry_after=self.retry_after,
                    limit=self.limit,
                )
            after = self._in_flight + size
            if after > self.limit:
                held = self._in_flight
                raise OverloadedError(
                    f"this process holds {held} bytes of request bodies in flight and this "
                    f"request needs {account.charged + size} (so far), over its budget of "
                    f"{self.limit} ({self.setting}); retry after {self.retry_after}s, send "
                    f"a smaller body, or raise {self.setting}",
                    retry_after=self.retry_after,
                    limit=self.limit,
                )
            tenant = account.tenant
            if tenant is not None:
                held = self._tenants.get(tenant, 0)
                if self.per_tenant is not None and held + size > self.per_tenant:
                    raise self._past_share(held, account.charged + size)
                self._tenants[tenant] = held + size
            self._in_flight = after
            self._high_water = max(self._high_water, after)
            account.charged += size

    def _past_share(self, held: int, needs: int) -> QuotaExceededError:
        share = self.per_tenant
        return QuotaExceededError(
            f"this tenant holds {held} bytes of request bodies in flight in this process and "
            f"this request needs {needs} (so far), over its share of {share} "
            f"({self.tenant_setting}; the process's budget is {self.limit}, "
            f"{self.setting}); let its other requests end, or retry after "
            f"{self.retry_after}s, send a smaller body, or raise {self.tenant_setting}",
            retry_after=self.retry_after,
            quota=QUOTA,
            limit=share,
        )

    def _bind(self, account: Account, tenant: str) -> None:
        with self._lock:
            if account.tenant is not None or account.closed:
                return
            account.tenant = tenant
            if account.charged:
                # Held before the tenant was known: counted as its, never refused here.
                self._tenants[tenant] = self._tenants.get(tenant, 0) + account.charged

    def _release(self, account: Account) -> None:
        with self._lock:
            self._in_flight -= account.charged
            tenant = account.tenant
            if tenant is not None and account.charged:
                left = self._tenants[tenant] - account.charged
                if left:
                    self._tenants[tenant] = left
                else:
                    del self._tenants[tenant]
            account.charged = 0
            account.closed = True


class Account:
    """One request's charges against a `Budget`, given back whole by `close` (idempotent;
    leaving a `with` or `async with` block closes it). A closed account refuses charges.
    `tenant`: whose share its charges count against (None: no tenant's)."""

    __slots__ = ("budget", "charged", "closed", "tenant")

    def __init__(self, budget: Budget, tenant: str | None = None) -> None:
        self.budget = budget
        self.charged = 0
        self.closed = False
        self.tenant = tenant

    def bind(self, tenant: str) -> None:
        """Charge `tenant`'s share from now on (what is held already counts as its); an
        account bound to a tenant, or closed, stays as it is."""
        self.budget._bind(self, tenant)

    def charge(self, size: int) -> None:
        """Count `size` more bytes this request keeps; `OverloadedError` past the budget,
        `QuotaExceededError` past its tenant's share (nothing charged then)."""
        if size > 0:
            self.budget._take(self, size)

    def close(self) -> None:
        if not self.closed:
            self.budget._release(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def charge(account: Account | None, size: int) -> None:
    """`account.charge(size)`, for readers that may run without an account (nothing to
    charge: a caller that accounts for the body itself)."""
    if account is not None:
        account.charge(size)


# The process's budget for readers given none (a chat backend's `ToolRefMiddleware`): set
# its `limit` once at start to change it. The service and the relay make their own, from
# TOOLREF_MAX_INFLATED_IN_FLIGHT and --max-inflated-in-flight.
shared: Final = Budget()
