"""Service settings, read once from `TOOLREF_*` environment variables."""

from __future__ import annotations

import ipaddress
import re
from functools import cached_property
from pathlib import Path

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from toolref.kinds import KindTable
from toolref.wire.errors import ConfigurationError
from toolref_server import dictionaries
from toolref_server.dictionaries import Kind
from toolref_server.gateway.upstreams import Upstream, parse_upstreams

TENANT_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_HASH_RE = re.compile(r"[0-9a-f]{64}")
LOCAL_TENANT = "local"
SUMMARIZER_NAMES = ("extractive", "openai-compatible")
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
# How much longer than TOOLREF_LLM_TIMEOUT a request waits for a summary computation.
JOIN_MARGIN_SECONDS = 1.0


class Settings(BaseSettings):
    """Every setting of the service. README.md lists them with their defaults."""

    model_config = SettingsConfigDict(env_prefix="TOOLREF_", frozen=True, extra="ignore")

    host: str = Field(default="127.0.0.1", description="Address to bind.")
    port: int = Field(default=8750, ge=0, le=65535, description="TCP port to bind.")
    workers: int = Field(default=1, ge=1, description="Worker processes.")
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
    api_keys: str = Field(
        default="",
        description="Comma-separated `tenant=<sha256 hex of key>`; a tenant may have several.",
    )
    metrics_key: str = Field(
        default="",
        description="SHA-256 hex of the bearer key GET /metrics requires; empty: /metrics is "
        "open to anyone who can reach the bind address.",
    )
    ttl_seconds: int = Field(default=86_400, ge=1, description="Sliding lifetime of a ref.")
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
    max_depth: int = Field(default=128, ge=2, le=512, description="JSON nesting limit.")
    max_batch: int = Field(default=1000, ge=1, description="Items per batch request.")
    max_messages: int = Field(default=5000, ge=1, description="Messages per conversation.")
    # Histories: continuing one costs time in the new messages (routes/continuation.py).
    history_refresh_seconds: int = Field(
        default=3600,
        ge=1,
        description="A continuation extends every message and tool ref of its history (reading "
        "it whole) once this long has passed since the last time; in between it reads only "
        "the history's node. At most the TTL.",
    )
    verified_records: int = Field(
        default=100_000,
        ge=0,
        description="Records each process keeps decoded once checked, so reading the same "
        "bytes again hashes them instead of checking and decoding them; 0 checks every read "
        "in full.",
    )
    verified_chars: int = Field(
        default=32 * 2**20,
        ge=0,
        description="At most this many characters of payloads in those records (LRU).",
    )
    history_cache_bytes: int = Field(
        default=64 * 2**20,
        ge=0,
        description="Characters of recently kept histories (in full) each process holds, so "
        "the next turn's answer joins them instead of reading and filling them again; 0 "
        "keeps none.",
    )
    # Decoding and CPU work: what one body may cost, and where the work runs.
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
    work_threads: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Worker threads for CPU work on large bodies (parsing, digests, filling, "
        "summaries, handoffs), so the event loop keeps answering small requests.",
    )
    offload_bytes: int = Field(
        default=512 * 1024,
        ge=0,
        description="Bodies at least this large are worked on in the worker threads; smaller "
        "ones inline (at most about 15 ms of the event loop; offloading costs concurrent "
        "requests of that size a third of their throughput, in cache misses and GIL hand-offs).",
    )
    # The HTTP layer (toolref_server.http.connection): what one connection may hold, and how long.
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
        "is answered, not kept). 0: no limit.",
    )
    shutdown_timeout: int = Field(
        default=20,
        ge=1,
        description="Seconds a stop (SIGTERM, Ctrl-C) waits for requests in flight before "
        "cancelling them.",
    )
    compress_threshold: int = Field(
        default=64,
        ge=0,
        description="Records at least this large are stored zstd-compressed (when that is "
        "smaller; with a dictionary even small ones shrink).",
    )
    compress_level: int = Field(
        default=3,
        ge=1,
        le=22,
        description="zstd level of stored records and history messages: higher stores fewer "
        "bytes for more CPU on every payload a request carries in full.",
    )
    record_dictionary: int = Field(
        default=1,
        ge=0,
        description="Shipped zstd dictionary new records are compressed with (0: none); "
        "records written with any shipped one stay readable.",
    )
    message_dictionary: int = Field(
        default=1,
        ge=0,
        description="Shipped zstd dictionary new history messages are compressed with (0: none).",
    )
    history_superseded_ttl: int = Field(
        default=600,
        ge=1,
        description="Seconds a history head keeps once a longer one continues it (at most "
        "the TTL); the newest head keeps the full TTL.",
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
    retry_after_seconds: int = Field(
        default=1, ge=1, description="Retry-After sent with 503 answers."
    )
    breaker_failures: int = Field(
        default=3,
        ge=1,
        description="Store failures in a row after which requests fail fast with 503 for "
        "Retry-After seconds (then one request probes).",
    )
    log_level: str = Field(
        default="info", description="Log level: critical, error, warning, info or debug."
    )
    summarizer: str = Field(
        default="extractive",
        description="Summarizer used when a request names none: extractive or openai-compatible.",
    )
    summary_max_chars: int = Field(
        default=400, ge=40, le=20_000, description="Summary budget when a request names none."
    )
    tool_kinds: str = Field(
        default="", description="Tool kind overrides, `name=kind,...` (see toolref.kinds)."
    )
    llm_base_url: str | None = Field(
        default=None,
        description="OpenAI-compatible API base URL; set it to offer the openai-compatible "
        "summarizer.",
    )
    llm_model: str = Field(default="gpt-4o-mini", description="Model the LLM summarizer asks.")
    llm_api_key: SecretStr | None = Field(default=None, description="API key for the LLM.")
    llm_prompt_version: str = Field(
        default="v1", description="Summary prompt version (part of the summarizer id)."
    )
    llm_timeout: float = Field(
        default=8.0,
        gt=0,
        description="Total time one LLM call may take (connect, send, the whole answer), in "
        "seconds; past it, extractive. Requests joined to a computation wait at most this "
        "plus 1 s.",
    )
    llm_input_chars: int = Field(
        default=24_000, ge=1000, description="Most characters of a result sent to the LLM."
    )
    llm_max_answer_bytes: int = Field(
        default=64 * 1024,
        ge=1024,
        description="Most bytes of an LLM answer read; a larger one is cut off unread and "
        "the extractive summary used.",
    )
    llm_calls_per_request: int = Field(
        default=16,
        ge=1,
        description="Most LLM summaries one request computes or waits for; the rest of its "
        "results get the extractive summary.",
    )
    llm_calls_per_tenant_minute: int = Field(
        default=300,
        ge=1,
        description="Most LLM calls one tenant's requests start per minute (all replicas, "
        "counted in Redis); past it, extractive.",
    )
    llm_breaker_failures: int = Field(
        default=5,
        ge=1,
        description="LLM failures in a row (per process) after which the LLM is not called "
        "for the cool-down; then one call probes.",
    )
    llm_breaker_seconds: float = Field(
        default=30.0, gt=0, description="Cool-down of the LLM circuit breaker, in seconds."
    )
    llm_failure_seconds: float = Field(
        default=60.0,
        gt=0,
        description="How long a failed LLM summary (or handoff dialogue summary) is "
        "remembered: meanwhile it is not asked again, the extractive one is used at once.",
    )
    summary_lock_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Expiry of a summary computation lock (a crashed "
        "holder blocks others at most this long). Must exceed the LLM timeout.",
    )

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
        default=256, ge=1, description="Connections open to upstreams, at most, per process."
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
    gateway_tenants: int = Field(
        default=16,
        ge=1,
        description="Tenants the gateway keeps confirmed-history bodies for, about: its "
        "memory of them holds 64 histories per tenant counted here (one LRU for all "
        "tenants, each under its own scope).",
    )
    gateway_history_chars: int = Field(
        default=128 * 2**20,
        ge=0,
        description="Characters the gateway keeps of confirmed histories, in all tenants: "
        "the body each was confirmed for (to decompress a body sent against it, "
        "Toolref-Dictionary) and its zstd dictionary. The histories themselves are held "
        "once, in the registry's cache (TOOLREF_HISTORY_CACHE_BYTES).",
    )

    @field_validator("api_keys")
    @classmethod
    def _check_keys(cls, value: str) -> str:
        parse_api_keys(value)
        return value

    @field_validator("upstreams")
    @classmethod
    def _check_upstreams(cls, value: str) -> str:
        parse_upstreams(value)
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

    @field_validator("log_level")
    @classmethod
    def _check_log_level(cls, value: str) -> str:
        if value.lower() not in LOG_LEVELS:
            raise ValueError(f"use one of {', '.join(LOG_LEVELS)}")
        return value.lower()

    @field_validator("tool_kinds")
    @classmethod
    def _check_kinds(cls, value: str) -> str:
        KindTable.parse(value)
        return value

    @field_validator("summarizer")
    @classmethod
    def _check_summarizer(cls, value: str) -> str:
        if value not in SUMMARIZER_NAMES:
            raise ValueError(f"use one of {', '.join(SUMMARIZER_NAMES)}")
        return value

    @field_validator("record_dictionary", "message_dictionary")
    @classmethod
    def _check_dictionary(cls, value: int, info: ValidationInfo) -> int:
        kind: Kind = "records" if info.field_name == "record_dictionary" else "messages"
        shipped = dictionaries.numbers(kind)
        if value and value not in shipped:
            raise ValueError(
                f"no {kind} dictionary {value} ships with this version; use one of "
                f"{', '.join(map(str, shipped))}, or 0 to write without one"
            )
        return value

    @model_validator(mode="after")
    def _check_inflated_budget(self) -> Settings:
        # One request may hold its body as sent and as inflated, each at its limit.
        largest = self.max_body_bytes + self.max_decompressed_bytes
        if self.max_inflated_in_flight < largest:
            raise ValueError(
                f"TOOLREF_MAX_INFLATED_IN_FLIGHT ({self.max_inflated_in_flight}) is below what "
                f"one request may hold ({largest}: TOOLREF_MAX_BODY_BYTES as sent plus "
                "TOOLREF_MAX_DECOMPRESSED_BYTES inflated), so such a request could never be "
                "served; raise it to a few times that, or lower those limits"
            )
        return self

    @model_validator(mode="after")
    def _check_lock(self) -> Settings:
        if self.summary_lock_seconds <= self.llm_timeout:
            raise ValueError(
                f"TOOLREF_SUMMARY_LOCK_SECONDS ({self.summary_lock_seconds}) must exceed "
                f"TOOLREF_LLM_TIMEOUT ({self.llm_timeout}): a lock that expires while its "
                "holder still waits for the LLM lets a second request call it too; raise the "
                "lock seconds or lower the timeout"
            )
        return self

    @cached_property
    def kinds(self) -> KindTable:
        return KindTable.parse(self.tool_kinds)

    @cached_property
    def key_hashes(self) -> dict[str, str]:
        """sha256 hex of each key -> tenant."""
        return parse_api_keys(self.api_keys)

    @cached_property
    def upstream_urls(self) -> dict[str, Upstream]:
        """Gateway upstream name -> where it is (`toolref_server.gateway.upstreams.Upstream`)."""
        return parse_upstreams(self.upstreams)

    @property
    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def check_exposure(self) -> None:
        """Refuse to serve an unauthenticated registry beyond this machine."""
        if not self.key_hashes and not self.is_loopback:
            raise ConfigurationError(
                f"refusing to bind {self.host!r} with no API keys: anyone who can reach it "
                "could read every payload. Set TOOLREF_API_KEYS to `tenant=<sha256 hex>` "
                "(`toolref-server keygen TENANT` makes one), or bind 127.0.0.1."
            )

    @property
    def tenant_rate(self) -> float:
        """The request-rate quota in force: none for the single local tenant of a service
        without keys (quotas share a service among tenants; that one has it to itself)."""
        return self.tenant_requests_per_second if self.key_hashes else 0.0

    @property
    def tenant_bytes(self) -> int:
        """The stored-bytes quota in force (none for the local tenant, as above)."""
        return self.tenant_max_bytes if self.key_hashes else 0

    def warn_open_metrics(self) -> str | None:
        """What to warn about when /metrics is open beyond loopback, else None."""
        if self.metrics_key or self.is_loopback:
            return None
        return (
            f"GET /metrics needs no key and the service binds {self.host!r}: anyone who can "
            "reach it reads the request counts; set TOOLREF_METRICS_KEY to the SHA-256 of a "
            "scraper key (`toolref-server hash-key`), or keep /metrics off public ingress"
        )

    def check_summarizer(self) -> None:
        if self.summarizer == "openai-compatible" and not self.llm_base_url:
            raise ConfigurationError(
                "TOOLREF_SUMMARIZER is openai-compatible but TOOLREF_LLM_BASE_URL is not set; "
                "set it (and TOOLREF_LLM_MODEL, TOOLREF_LLM_API_KEY), or use extractive"
            )

    @property
    def summary_wait_seconds(self) -> float:
        """Longest a request waits for a summary computation it started or joined (the
        LLM's total timeout, plus a margin for Redis round trips and parsing; never past
        the lock's expiry)."""
        return min(self.llm_timeout + JOIN_MARGIN_SECONDS, self.summary_lock_seconds)

    @property
    def summary_compute_seconds(self) -> float:
        """When the summary cache cuts a computation off, whatever the summarizer does (the
        LLM's own deadline comes first; waiting requests give up just after)."""
        return self.llm_timeout + JOIN_MARGIN_SECONDS / 2

    @property
    def summarizer_names(self) -> list[str]:
        return list(SUMMARIZER_NAMES if self.llm_base_url else SUMMARIZER_NAMES[:1])


def parse_api_keys(text: str) -> dict[str, str]:
    """Parse `tenant=<sha256 hex>,...` into {hash: tenant}, saying exactly what is wrong."""
    keys: dict[str, str] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        tenant, sep, digest = entry.partition("=")
        tenant, digest = tenant.strip(), digest.strip().lower()
        if not sep or not TENANT_RE.fullmatch(tenant) or not _HASH_RE.fullmatch(digest):
            shown = entry if len(entry) < 20 else entry[:16] + "..."
            raise ConfigurationError(
                f"TOOLREF_API_KEYS entry {shown!r} is not `tenant=<64 hex digits>`: the tenant "
                "is 1-64 of A-Z a-z 0-9 _ . -, and the hash is the key's SHA-256 "
                "(`toolref-server hash-key` prints it)"
            )
        if digest in keys and keys[digest] != tenant:
            raise ConfigurationError(
                f"TOOLREF_API_KEYS gives one key hash to tenants {keys[digest]!r} and {tenant!r}; "
                "a key belongs to one tenant"
            )
        keys[digest] = tenant
    return keys
