"""Settings of who may use the service and how much: tenants' API keys, the /metrics key,
and each tenant's quotas; the grammar of tenant names and of `TOOLREF_API_KEYS`."""

from __future__ import annotations

import re
from functools import cached_property

from pydantic import BaseModel, Field, field_validator

from toolref.wire.errors import ConfigurationError

TENANT_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_HASH_RE = re.compile(r"[0-9a-f]{64}")
LOCAL_TENANT = "local"


class AccessSettings(BaseModel):
    """API keys (as hashes) of the tenants and of /metrics; per-tenant quotas."""

    api_keys: str = Field(
        default="",
        description="Comma-separated `tenant=<sha256 hex of key>`; a tenant may have several.",
    )
    metrics_key: str = Field(
        default="",
        description="SHA-256 hex of the bearer key GET /metrics and /v1/savings require; "
        "empty: they answer only requests made on this machine (a loopback peer, no proxy "
        "header, a Host of localhost or a loopback address), 403 to any other.",
    )
    # Per-tenant quotas (toolref_server.storage.quotas).
    tenant_requests_per_second: float = Field(
        default=200.0,
        ge=0,
        description="Requests per second per keyed tenant, in each worker process (bursts of "
        "one second's worth); past it, 429 `quota-exceeded`. 0: no limit.",
    )
    tenant_max_bytes: int = Field(
        default=0,
        ge=0,
        description="Bytes a keyed tenant may keep in the store (records, histories and "
        "summaries as stored); a write past it is 429 `quota-exceeded` (a summary past it "
        "is answered, not kept; a hydrate past it is answered and registers nothing). 0: "
        "no limit.",
    )

    @field_validator("api_keys")
    @classmethod
    def _check_keys(cls, value: str) -> str:
        parse_api_keys(value)
        return value

    @field_validator("metrics_key")
    @classmethod
    def _check_metrics_key(cls, value: str) -> str:
        digest = value.strip().lower()
        if digest and not _HASH_RE.fullmatch(digest):
            raise ValueError(
                "not the 64 hex digits of a SHA-256: set it to the hash of the key scrapers "
                "will send (`toolref-server hash-key` prints it), or leave it empty"
            )
        return digest

    @cached_property
    def key_hashes(self) -> dict[str, str]:
        """sha256 hex of each key -> tenant."""
        return parse_api_keys(self.api_keys)

    @property
    def tenant_rate(self) -> float:
        """The request-rate quota in force: none for the single local tenant of a service
        without keys (quotas share a service among tenants; that one has it to itself)."""
        return self.tenant_requests_per_second if self.key_hashes else 0.0

    @property
    def tenant_bytes(self) -> int:
        """The stored-bytes quota in force (none for the local tenant, as above)."""
        return self.tenant_max_bytes if self.key_hashes else 0


def parse_api_keys(text: str) -> dict[str, str]:
    """Parse `tenant=<sha256 hex>,...` into {hash: tenant}, saying exactly what is wrong:
    which entry (its place, and its tenant when that is a tenant's name), never its value,
    which may be a raw key given for its hash."""
    keys: dict[str, str] = {}
    entries = [entry for raw in text.split(",") if (entry := raw.strip())]
    for place, entry in enumerate(entries, 1):
        tenant, sep, digest = entry.partition("=")
        tenant, digest = tenant.strip(), digest.strip().lower()
        if not sep or not TENANT_RE.fullmatch(tenant) or not _HASH_RE.fullmatch(digest):
            raise ConfigurationError(_bad_entry(f"entry {place} of {len(entries)}", entry))
        if digest in keys and keys[digest] != tenant:
            raise ConfigurationError(
                f"TOOLREF_API_KEYS gives one key hash to tenants {keys[digest]!r} and {tenant!r}; "
                "a key belongs to one tenant"
            )
        keys[digest] = tenant
    return keys


def _bad_entry(which: str, entry: str) -> str:
    """Why `which` entry is refused, never quoting its value: a raw key given for its hash
    would be shown. Only a tenant's name before the `=` is (an entry without one may be a
    key alone)."""
    tenant, sep, digest = (part.strip() for part in entry.partition("="))
    if not sep:
        tenant = ""
    if _HASH_RE.fullmatch(digest.lower()):
        shown = tenant if len(tenant) <= 64 else tenant[:61] + "..."
        return (
            f"TOOLREF_API_KEYS {which} names the tenant {shown!r}: a tenant is 1-64 of "
            "A-Z a-z 0-9 _ . -; rename it"
        )
    if TENANT_RE.fullmatch(tenant):
        which += f" (tenant {tenant!r})"
    return (
        f"TOOLREF_API_KEYS {which} is not `tenant=<64 hex digits>` (the value is not shown: "
        "it may be a key): after the tenant and `=` comes the SHA-256 of the tenant's key, "
        "never the key itself; `toolref-server hash-key` prints it (give it the key on "
        "stdin), and `toolref-server keygen TENANT` makes a new key and its entry"
    )
