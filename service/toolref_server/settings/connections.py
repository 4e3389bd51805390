"""Settings of the HTTP layer (`toolref_server.http.connection`): what one connection may
hold and for how long, and how many connections and requests a worker takes at once."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ConnectionSettings(BaseModel):
    """Deadlines of a connection's request head, body and answer; connections and requests
    per worker."""

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
