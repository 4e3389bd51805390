"""Settings of the gateway (`/llm/{name}/{path}`): its upstreams, the timeouts and
connections to them, its requests in flight, and its memory of confirmed histories."""

from __future__ import annotations

from functools import cached_property

from pydantic import BaseModel, Field, field_validator

from toolref_server.settings.upstreams import Upstream, parse_upstreams


class GatewaySettings(BaseModel):
    """Upstreams; connecting to and reading from them; gateway limits and caches."""

    upstreams: str = Field(
        default="",
        description="Gateway upstreams, comma-separated `name=base_url`: `/llm/{name}/{path}` "
        "forwards to `base_url/{path}`, hydrating the LLM endpoints it knows; empty: no gateway. "
        "A base URL's `user:password@` is sent as Basic auth and never shown.",
    )
    gateway_connect_timeout: float = Field(
        default=10.0, gt=0, description="Seconds to connect to an upstream."
    )
    gateway_read_timeout: float = Field(
        default=600.0,
        gt=0,
        description="Most seconds between two pieces of an upstream's answer (a model may "
        "think long before its first token).",
    )
    gateway_max_connections: int = Field(
        default=256,
        ge=1,
        description="Connections open to each upstream, at most, per process (each upstream "
        "has its own: one that stalls never holds another's).",
    )
    gateway_max_requests_in_flight: int = Field(
        default=512,
        ge=1,
        description="Gateway requests in flight per process (streams last minutes, so they "
        "have their own limit, apart from the registry's); past it, 503 with Retry-After.",
    )
    gateway_tenant_requests_in_flight: int = Field(
        default=64,
        ge=1,
        description="Gateway requests in flight per tenant and process; past it, 429 "
        "`quota-exceeded` with Retry-After. Below TOOLREF_GATEWAY_MAX_CONNECTIONS, so one "
        "tenant never holds every upstream connection.",
    )

    gateway_ws_max_message_bytes: int = Field(
        default=16 * 2**20,
        ge=1024,
        description="Bytes of one WebSocket message through the gateway (`/llm/...` "
        "upgraded), either way, as it arrives (a relay's compressed message: once restored); "
        "past it the socket is closed with 1009. The HTTP layer holds a message to this size.",
    )
    gateway_ws_idle_timeout: float = Field(
        default=900.0,
        gt=0,
        description="Seconds a gateway WebSocket may pass without a message either way; then "
        "it is closed with 1001 (the agent opens a new one).",
    )
    gateway_ws_lifetime: float = Field(
        default=3600.0,
        gt=0,
        description="Seconds a gateway WebSocket may stay open; then it is closed with 1001 "
        "(OpenAI's own Responses sockets last 60 minutes).",
    )

    @field_validator("upstreams")
    @classmethod
    def _check_upstreams(cls, value: str) -> str:
        parse_upstreams(value)
        return value

    @cached_property
    def upstream_urls(self) -> dict[str, Upstream]:
        """Gateway upstream name -> where it is (`toolref_server.gateway.upstreams.Upstream`)."""
        return parse_upstreams(self.upstreams)
