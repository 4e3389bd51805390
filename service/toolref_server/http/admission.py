"""Admission: at most `limit` requests in flight in this process; past it, 503 at once.

Every request in flight holds memory (its body, the values parsed from it, the answer being
built) and a share of one event loop. Past the limit a request is answered 503 `overloaded`
with `Retry-After` before its body is read, so a burst sheds load instead of making every
request slower; the SDK and the middleware retry, then send full payloads. `/healthz` is
always admitted: a liveness probe must not fail because the process is busy.

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
from toolref.wire.errors import OverloadedError
from toolref_server.http.inflight import InFlight
from toolref_server.http.problem import problem_response

EXEMPT: Final = frozenset({"/healthz"})


class AdmissionMiddleware:
    def __init__(self, app: ASGIApp, limit: int, retry_after: int, budget: Budget) -> None:
        self.app = app
        self.budget = budget
        self.in_flight = InFlight(
            limit,
            None,
            retry_after,
            setting="TOOLREF_MAX_REQUESTS_IN_FLIGHT",
            fix=", or send full payloads meanwhile",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in EXEMPT:
            await self.app(scope, receive, send)
            return
        try:
            self.in_flight.take()
        except OverloadedError as refusal:
            await problem_response(refusal)(scope, receive, send)
            return
        try:
            with self.budget.account() as account:
                scope[SCOPE_KEY] = account
                await self.app(scope, receive, send)
        finally:
            self.in_flight.give()
