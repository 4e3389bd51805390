"""Settings of the serving process: where it binds, its workers and threads, its log level,
how it answers when busy, and how it stops."""

from __future__ import annotations

import importlib.util
import ipaddress

from pydantic import BaseModel, Field, field_validator

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
EVENT_LOOPS = ("auto", "uvloop", "asyncio")


class ServingSettings(BaseModel):
    """The process: bind address, workers, CPU work threads, logs, Retry-After, stopping."""

    host: str = Field(default="127.0.0.1", description="Address to bind.")
    port: int = Field(default=8750, ge=0, le=65535, description="TCP port to bind.")
    workers: int = Field(default=1, ge=1, description="Worker processes.")
    # CPU work: where the work on a large body runs.
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
    shutdown_timeout: int = Field(
        default=20,
        ge=1,
        description="Seconds a stop (SIGTERM, Ctrl-C) waits for requests in flight before "
        "cancelling them.",
    )
    retry_after_seconds: int = Field(
        default=1, ge=1, description="Retry-After sent with 503 answers."
    )
    sample_seconds: float = Field(
        default=5.0,
        gt=0,
        le=60,
        description="Each worker, this often: writes what its gauges read (the store "
        "breaker, bytes in flight) for scrapes of another worker, forgets the gauges of "
        "workers gone, and adds its gateway usage to the store's per-minute counters (the "
        "savings page).",
    )
    usage_pending_slots: int = Field(
        default=20_000,
        ge=1,
        description="Each worker holds at most this many minute x tenant x upstream entries of "
        "gateway usage the store has not taken yet (about 300 bytes each: 6 MB by default); "
        "while the store is down, use of a new minute, tenant or upstream beyond them is left "
        "off the savings page (toolref_usage_dropped counts it; /metrics has it all).",
    )
    log_level: str = Field(
        default="info", description="Log level: critical, error, warning, info or debug."
    )
    event_loop: str = Field(
        default="auto",
        description="The event loop: auto (the default: uvloop where installed, as the "
        "server extra installs it; else asyncio's), uvloop or asyncio. Side by side in "
        "`make bench`: uvloop's CPU per small request 0.81-0.99x asyncio's, and a long "
        "conversation's late turns through relay and gateway 0.93x the time added.",
    )

    @field_validator("event_loop")
    @classmethod
    def _check_event_loop(cls, value: str) -> str:
        if value.lower() not in EVENT_LOOPS:
            raise ValueError(f"use one of {', '.join(EVENT_LOOPS)}")
        if value.lower() == "uvloop" and importlib.util.find_spec("uvloop") is None:
            raise ValueError("uvloop is not installed: pip install uvloop, or use asyncio")
        return value.lower()

    @field_validator("log_level")
    @classmethod
    def _check_log_level(cls, value: str) -> str:
        if value.lower() not in LOG_LEVELS:
            raise ValueError(f"use one of {', '.join(LOG_LEVELS)}")
        return value.lower()

    @property
    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False
