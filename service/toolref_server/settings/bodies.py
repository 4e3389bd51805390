"""Settings of what one request body may be: its size as sent and inflated, its nesting and
items, its batch and conversation lengths, and the bytes of bodies a worker holds at once."""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, Field, model_validator


class BodyLimits(BaseModel):
    """What one body may cost to read and decode, and all bodies in flight together."""

    max_body_bytes: int = Field(default=32 * 2**20, ge=1024, description="Request body limit.")
    max_decompressed_bytes: int = Field(
        default=64 * 2**20, ge=1024, description="Limit on a compressed body once inflated."
    )
    max_inflated_in_flight: int = Field(
        default=256 * 2**20,
        ge=1024,
        description="Bytes of request bodies (as sent and as inflated) all requests of a "
        "worker hold at once, REST and gateway together; past it, 503 `overloaded` with "
        "Retry-After before more is inflated. Default: four bodies at the inflated limit, or "
        "hundreds of typical turns, while a burst of bombs costs at most about 3 GB "
        "(gateway) or 1.6 GB (REST) of memory, not all there is (docs/operations.md). At "
        "least the body limit plus the inflated limit.",
    )
    tenant_inflated_in_flight: int | None = Field(
        default=None,
        ge=1024,
        description="Bytes of request bodies one tenant's requests may hold at once, its "
        "share of TOOLREF_MAX_INFLATED_IN_FLIGHT (where TOOLREF_API_KEYS names two tenants "
        "or more); past it, 429 `quota-exceeded` (`quota: inflatedBytesInFlight`) with "
        "Retry-After, while the other tenants are served. Unset: a quarter of "
        "TOOLREF_MAX_INFLATED_IN_FLIGHT, at least what one request may hold. At most "
        "TOOLREF_MAX_INFLATED_IN_FLIGHT.",
    )
    max_depth: int = Field(default=128, ge=2, le=512, description="JSON nesting limit.")
    max_items: int = Field(
        default=100_000,
        ge=10,
        description="Most items in one JSON array or object (msgpack: refused before it is "
        "allocated).",
    )
    max_containers: int = Field(
        default=1_000_000,
        ge=100,
        description="Most arrays and objects in one body, counted before a JSON body is "
        "parsed: bounds the memory one body can take.",
    )
    max_batch: int = Field(default=1000, ge=1, description="Items per batch request.")
    max_messages: int = Field(default=5000, ge=1, description="Messages per conversation.")
    max_edit_entries: int = Field(
        default=50_000,
        ge=16,
        description="Entries of the recipe one edit (application/vnd.toolref.edit) makes: "
        "each entry a kept range keeps counts, so a few bytes keeping many entries are "
        "refused (413 `too-many-items`) before anything is built. A request is about three "
        "entries per message and one per large top-level member: ten per message of "
        "TOOLREF_MAX_MESSAGES.",
    )

    @model_validator(mode="after")
    def _check_inflated_budget(self) -> Self:
        # One request may hold its body as sent and as inflated, each at its limit.
        largest = self.max_body_bytes + self.max_decompressed_bytes
        if self.max_inflated_in_flight < largest:
            raise ValueError(
                f"TOOLREF_MAX_INFLATED_IN_FLIGHT ({self.max_inflated_in_flight}) is below what "
                f"one request may hold ({largest}: TOOLREF_MAX_BODY_BYTES as sent plus "
                "TOOLREF_MAX_DECOMPRESSED_BYTES inflated), so such a request could never be "
                "served; raise it to a few times that, or lower those limits"
            )
        share = self.tenant_inflated_in_flight
        if share is not None and share > self.max_inflated_in_flight:
            raise ValueError(
                f"TOOLREF_TENANT_INFLATED_IN_FLIGHT ({share}) is over "
                f"TOOLREF_MAX_INFLATED_IN_FLIGHT ({self.max_inflated_in_flight}), the budget "
                "it is a tenant's share of; lower it to at most that (a quarter of it keeps "
                "one tenant from refusing the others), or raise TOOLREF_MAX_INFLATED_IN_FLIGHT"
            )
        if share is not None and share < largest:
            raise ValueError(
                f"TOOLREF_TENANT_INFLATED_IN_FLIGHT ({share}) is below what one request may "
                f"hold ({largest}: TOOLREF_MAX_BODY_BYTES as sent plus "
                "TOOLREF_MAX_DECOMPRESSED_BYTES inflated), so such a request of any tenant "
                f"could never be served; raise it to at least {largest}, or lower those limits"
            )
        return self

    @property
    def tenant_inflated_share(self) -> int:
        """A tenant's share of the bodies in flight: TOOLREF_TENANT_INFLATED_IN_FLIGHT, or
        a quarter of the budget, at least what one request may hold."""
        if self.tenant_inflated_in_flight is not None:
            return self.tenant_inflated_in_flight
        largest = self.max_body_bytes + self.max_decompressed_bytes
        return max(self.max_inflated_in_flight // 4, largest)
