"""Admission: at most `limit` requests in flight in this process, `per_tenant` of one
tenant's; past them, 503 (429) at once.

Every request in flight holds memory (its body, the values parsed from it, the answer being
built) and a share of one event loop. Past the limit a request is answered 503 `overloaded`
with `Retry-After` before its body is read, so a burst sheds load instead of making every
request slower; the SDK and the middleware retry, then send full payloads. `/healthz` is
always admitted: a liveness probe must not fail because the process is busy. Past its
tenant's share (TOOLREF_TENANT_REQUESTS_IN_FLIGHT, where TOOLREF_API_KEYS names two tenants
or more) a request is answered 429 `quota-exceeded` the same way: one tenant holding
requests open (uploads sent slowly, summaries a slow model makes) never takes every slot.
The tenant is the one whose key the request bears (`Authorization: Bearer`), read from its
head (a hash and a compare per tenant); requests bearing no known key share one count,
but the probes (`/readyz`, `/metrics`: no tenant's key) have a share of their own, `PROBES`:
anyone who reaches the port can hold the keyless share (answers it leaves unread), and a
readiness probe or a scrape refused for it would take the replica out of service.

Each admitted request gets an account on the process's budget of body bytes in flight
(`toolref.asgi.budget`, TOOLREF_MAX_INFLATED_IN_FLIGHT) in `scope[SCOPE_KEY]`, which the body
reader charges as the body arrives and inflates, given back when the request ends. A route
binds it to the request's tenant once the key is checked, before the body is read
(`routes.request_context.tenant`): from then on it charges that tenant's share too
(TOOLREF_TENANT_INFLATED_IN_FLIGHT, 429 past it).
"""

from __future__ import annotations

from typing import Final

from starlette.types import ASGIApp, Receive, Scope, Send

from toolref.asgi.budget import SCOPE_KEY, Budget
from toolref.asgi.scope import header
from toolref.wire import endpoints
from toolref.wire.errors import OverloadedError, QuotaExceededError
from toolref_server.http.auth import Authenticator
from toolref_server.http.inflight import InFlight
from toolref_server.http.problem import problem_response

EXEMPT: Final = frozenset({"/healthz"})
# The paths counted as the probes' own share (no tenant's name: `TENANT_RE` has no space).
PROBE_PATHS: Final = frozenset({endpoints.READYZ, endpoints.METRICS})
PROBES: Final = "(probes)"


class AdmissionMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        limit: int,
        retry_after: int,
        budget: Budget,
        *,
        per_tenant: int | None = None,
        auth: Authenticator | None = None,
    ) -> None:
        self.app = app
        self.budget = budget
        self.auth = auth
        self.in_flight = InFlight(
            limit,
            per_tenant if auth is not None else None,
            retry_after,
            setting="TOOLREF_MAX_REQUESTS_IN_FLIGHT",
            fix=", or send full payloads meanwhile",
            tenant_setting="TOOLREF_TENANT_REQUESTS_IN_FLIGHT",
            quota="requestsInFlight",
            what="requests in flight",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in EXEMPT:
            await self.app(scope, receive, send)
            return
        tenant = ""
        if self.auth is not None and self.in_flight.per_tenant is not None:
            if scope["path"] in PROBE_PATHS:
                tenant = PROBES
            else:
                tenant = self.auth.known_tenant(header(scope, "authorization"))
        try:
            self.in_flight.take(tenant)
        except (OverloadedError, QuotaExceededError) as refusal:
            await problem_response(refusal)(scope, receive, send)
            return
        try:
            with self.budget.account() as account:
                scope[SCOPE_KEY] = account
                await self.app(scope, receive, send)
        finally:
            self.in_flight.give(tenant)
