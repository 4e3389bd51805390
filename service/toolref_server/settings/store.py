"""Settings of the store's engine: which Redis/Valkey (or the embedded one, and where it
persists), its timeouts and pool, and when failures make requests fail fast."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class StoreSettings(BaseModel):
    """The Redis/Valkey connection: URL or embedded engine, timeouts, pool, breaker."""

    redis_url: str | None = Field(
        default=None,
        description="Redis/Valkey URL; unset starts the embedded engine.",
    )
    redis_cluster: bool = Field(
        default=False,
        description="Treat the Redis URL as Redis Cluster (so does a `redis+cluster://` URL).",
    )
    data_dir: Path = Field(
        default=Path(".toolref/data"), description="Embedded engine's persistence folder."
    )
    redis_timeout: float = Field(
        default=2.0, gt=0, description="Socket timeout for Redis commands, in seconds."
    )
    redis_connect_timeout: float = Field(
        default=0.5, gt=0, description="Socket connect timeout for Redis, in seconds."
    )
    redis_max_connections: int = Field(
        default=64,
        ge=1,
        description="Redis pool size per worker: at most this many store operations at once; "
        "the others wait for one to finish, at most the Redis timeout.",
    )
    breaker_failures: int = Field(
        default=3,
        ge=1,
        description="Store failures in a row after which requests fail fast with 503 for "
        "Retry-After seconds (then one request probes).",
    )
