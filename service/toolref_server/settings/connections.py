"""Settings of the HTTP layer (`toolref_server.http.connection`): what one connection may
hold and for how long, and how many connections, channels and requests a worker takes at
once, in all and of one tenant."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ConnectionSettings(BaseModel):
    """Deadlines of a connection's request head, body and answer; connections and requests
    per worker, and each tenant's share of them."""

    header_timeout: float = Field(
        default=10.0,
        gt=0,
        description="Seconds a request's line and headers may take to arrive, from the "
        "connection's start or the request's first byte; then 408 (closed without an answer "
        "if nothing came).",
    )
    body_timeout: float = Field(
        default=10.0,
        gt=0,
        description="Seconds a request body may take to arrive before the minimum rate "
        "applies; then 408.",
    )
    body_min_rate: int = Field(
        default=16_384,
        ge=1,
        description="Bytes per second a request body must keep up past its first "
        "body-timeout seconds: each byte received extends its deadline by 1/rate s.",
    )
    send_timeout: float = Field(
        default=30.0,
        gt=0,
        description="Seconds a client may leave its answer unread (the server's send buffer "
        "full) before the connection is dropped.",
    )
    keep_alive_timeout: int = Field(
        default=5, ge=1, description="Seconds an idle connection is kept open between requests."
    )
    max_connections: int = Field(
        default=1000,
        ge=1,
        description="Open connections per worker process; past it, the oldest idle one is "
        "closed to make room, and when none is idle new requests get 503 (bounded by the "
        "open-files limit).",
    )
    max_requests_in_flight: int = Field(
        default=128,
        ge=1,
        description="Requests in flight per worker; past it, 503 `overloaded` with "
        "Retry-After before the body is read (`/healthz` always answered).",
    )
    tenant_requests_in_flight: int | None = Field(
        default=None,
        ge=1,
        description="Requests in flight of one tenant per worker, its share of "
        "TOOLREF_MAX_REQUESTS_IN_FLIGHT (where TOOLREF_API_KEYS names two tenants or more; "
        "requests without a known key share one, /readyz and /metrics another); past it, 429 "
        "`quota-exceeded` (`quota: requestsInFlight`) with Retry-After before the body is "
        "read, while the other tenants are served. Unset: a quarter of "
        "TOOLREF_MAX_REQUESTS_IN_FLIGHT, at least 1.",
    )
    tenant_channels: int | None = Field(
        default=None,
        ge=1,
        description="Channels (`/v1/channel`) one tenant keeps open per worker (where "
        "TOOLREF_API_KEYS names two tenants or more): each holds a connection for as long as "
        "its sender likes. Past it, the upgrade is 429 `quota-exceeded` (`quota: channels`) "
        "and its sender sends its turns over HTTP. Unset: a quarter of "
        "TOOLREF_MAX_CONNECTIONS, at least 1.",
    )
    channel_idle_seconds: float = Field(
        default=300.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds a channel (`/v1/channel`) with no turn in flight and no frame "
        "received is kept open; then the service closes it (1012, `toolref: every turn read "
        "was answered`), and its sender opens a new one at its next turn, failing none. "
        "Bounds how long a silent channel holds a connection (with one tenant, or none, "
        "nothing else does). Above the sender's own idle close (60 s).",
    )

    @property
    def tenant_requests_share(self) -> int:
        """TOOLREF_TENANT_REQUESTS_IN_FLIGHT, or a quarter of the requests in flight."""
        if self.tenant_requests_in_flight is not None:
            return self.tenant_requests_in_flight
        return max(self.max_requests_in_flight // 4, 1)

    @property
    def tenant_channels_share(self) -> int:
        """TOOLREF_TENANT_CHANNELS, or a quarter of the connections."""
        if self.tenant_channels is not None:
            return self.tenant_channels
        return max(self.max_connections // 4, 1)
