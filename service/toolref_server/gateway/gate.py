"""`GatewayAdmission`, the gate: what every gateway request passes before anything is
read, stored or opened upstream, written once for HTTP and WebSocket: the `Toolref-Key`
(its tenant; 401 first, so nothing about the upstreams is told without one), the path (an
upstream of TOOLREF_UPSTREAMS, 404), the method (HTTP: 405), the query (bytes a request
target may not carry, 400), and a slot among the tenant's and the process's gateway
requests in flight (429, 503), held while the request (or the socket) lasts.

Each step is O(1) but the query check, linear in the query.

A channel (`/v1/channel`, `channel`) passes the same key (its turns carry it: the sender
repeats it on the upgrade) and holds one of its tenant's channels while it is open
(TOOLREF_TENANT_CHANNELS, 429 past it): an open channel holds a connection for as long as
its sender likes and never makes room for another, so without a key and a count one
client could take every connection of the worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from starlette.types import Scope

from toolref.asgi.scope import header
from toolref.wire.errors import BadRequestError, MethodNotAllowedError, NotFoundError
from toolref.wire.headers import KEY_HEADER
from toolref.wire.numbers import describe
from toolref_server.gateway.upstreams import METHODS, Route, route, unsafe_query
from toolref_server.http.auth import Authenticator
from toolref_server.http.inflight import InFlight
from toolref_server.settings import Settings


@dataclass(frozen=True, slots=True)
class Admitted:
    """A gateway request let in: its tenant and its upstream route."""

    tenant: str
    route: Route


class GatewayAdmission:
    """See the module docstring; `upstreams` are TOOLREF_UPSTREAMS."""

    def __init__(self, settings: Settings) -> None:
        self.upstreams = settings.upstream_urls
        self.auth = Authenticator(settings)
        self.in_flight = InFlight(
            settings.gateway_max_requests_in_flight,
            settings.gateway_tenant_requests_in_flight,
            settings.retry_after_seconds,
        )
        self.channels = InFlight(
            settings.max_connections,  # never reached first: the HTTP layer's own limit
            settings.tenant_channel_limit,
            settings.retry_after_seconds,
            setting="TOOLREF_MAX_CONNECTIONS",
            tenant_setting="TOOLREF_TENANT_CHANNELS",
            quota="channels",
            what="channels open (its sender sends its turns over HTTP meanwhile)",
        )

    def channel(self, scope: Scope) -> str:
        """The tenant of a channel's upgrade, one of its channels taken (`channels.give`
        it back once the channel ends); 401 without a key of this service, 429 past the
        tenant's channels, both raised before anything is accepted."""
        tenant = self.auth.tenant_for_key(header(scope, KEY_HEADER), header=KEY_HEADER)
        self.channels.take(tenant)
        return tenant

    @contextmanager
    def admitted(self, scope: Scope, *, http: bool) -> Iterator[Admitted]:
        """The request let in, its slot in flight held while the block runs; every
        refusal raised (a `ToolrefError`) before anything else. `http`: the method is
        checked (a WebSocket's is its upgrade)."""
        tenant = self.auth.tenant_for_key(header(scope, KEY_HEADER), header=KEY_HEADER)
        found = route(self.upstreams, scope["path"], scope.get("raw_path"))
        if found is None:
            names = ", ".join(sorted(self.upstreams)) or "none"
            raise NotFoundError(
                f"no upstream for {scope['path']}: gateway paths are /llm/{{name}}/{{path}} "
                f"with a name from TOOLREF_UPSTREAMS (configured: {names})"
            )
        if http and scope["method"] not in METHODS:
            raise MethodNotAllowedError(
                f"the gateway forwards {', '.join(sorted(METHODS))}, not "
                f"{describe(scope['method'])} (a tunnel or a trace is not an LLM API's)",
                allow=sorted(METHODS),
            )
        if unsafe_query(scope.get("query_string", b"")):
            raise BadRequestError(
                "the gateway request's query holds bytes a request target may not carry; "
                "percent-encode them"
            )
        with self.in_flight.held(tenant):
            yield Admitted(tenant, found)
