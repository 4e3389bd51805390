"""Settings of the store's engine: which Redis/Valkey (or the embedded one, and where it
persists), its timeouts and pool, and when failures make requests fail fast."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from toolref.wire import redaction
from toolref.wire.errors import ConfigurationError

# The URL schemes a store URL may have: redis-py's, and Redis Cluster's (`storage.redis`).
STORE_SCHEMES: Final = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")
MASKED: Final = re.compile(r"^.*@")  # what a URL without its scheme holds before its host


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

    def check_store_url(self, flag: str | None = None) -> None:
        """Refuse a TOOLREF_REDIS_URL the Redis client cannot open (`localhost:6379`, no
        scheme; `redis://host:99999`, a port that does not parse: the service failed with a
        traceback once started). Checked where a command
        opens it (an app given its client, as the tests do, takes any text). `flag`: the
        command-line flag that gave it (`--redis-url`), named instead of the variable."""
        named = flag or "TOOLREF_REDIS_URL"
        undo = f"leave out {flag}" if flag else "unset it"
        url = self.redis_url
        if url is None:
            return
        # `localhost:6379` shown as it is; a password before an `@` never
        shown = redaction.url(url) if "://" in url else MASKED.sub(redaction.MASK + "@", url)
        try:
            parts = urlsplit(url)
            _ = parts.port  # ValueError past 65535, or not a number
        except ValueError as exc:  # `redis://host:99999`, `:abc`, `redis://[::1` (unclosed)
            raise ConfigurationError(
                f"{named} is {shown!r}, which does not parse ({exc}): give a host "
                "and a port of 1-65535, an IPv6 host in brackets, such as "
                f"redis://localhost:6379/0 or redis://[::1]:6379/0, or {undo} for the "
                "embedded engine"
            ) from None
        if "://" in url and parts.scheme.lower() in STORE_SCHEMES:
            return
        raise ConfigurationError(
            f"{named} is {shown!r}, not a Redis URL: give one such as "
            f"redis://localhost:6379/0 (schemes: {', '.join(STORE_SCHEMES)}), or {undo} "
            "for the embedded engine"
        )
