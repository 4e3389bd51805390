"""Prometheus metrics: one registry per app, served at GET /metrics.

A registry per app (not the process-global one) keeps two apps in one process, as tests build
them, from counting into each other. With several uvicorn workers each worker has its own
registry, so scrape pods that run one worker each (the Kubernetes manifests do).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Enum,
    Gauge,
    Histogram,
    generate_latest,
)

# Latency buckets from 1 ms to 10 s: ref operations sit at the low end, summaries high.
_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
CONTENT_TYPE: Final = CONTENT_TYPE_LATEST
UNMATCHED: Final = "unmatched"  # the route label of paths no route serves (bounded labels)


class Metrics:
    """Every metric the service exports, on its own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "toolref_requests",
            "HTTP requests answered, by route template and status.",
            ["method", "route", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "toolref_request_duration_seconds",
            "Time from request start to the last byte of the answer.",
            ["method", "route"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.bytes_in = Counter(
            "toolref_request_body_bytes", "Request body bytes received.", ["route"], registry=r
        )
        self.bytes_out = Counter(
            "toolref_response_body_bytes", "Response body bytes sent.", ["route"], registry=r
        )
        self.registered = Counter(
            "toolref_refs_registered",
            "Invocations registered; new=false where the ref was already held.",
            ["new"],
            registry=r,
        )
        self.resolved = Counter(
            "toolref_refs_resolved",
            "Refs asked for and held (resolve, findMissing, GET, hydrate, summary).",
            registry=r,
        )
        self.missing = Counter(
            "toolref_refs_missing",
            "Refs asked for and not held (never registered, expired or evicted).",
            registry=r,
        )
        self.histories = Counter(
            "toolref_histories",
            "Hydrates that kept a history, by outcome: kept (a whole conversation), continued "
            "(new messages after a held history), missing (409 missing-history), checkpoint "
            "(a prefix kept too, asked with `checkpoint`).",
            ["outcome"],
            registry=r,
        )
        self.summary_cache = Counter(
            "toolref_summary_cache",
            "Summary lookups; result=hit when the cache held the summary, miss when not; "
            "result=not-kept counts summaries made and not kept (over the tenant's "
            "stored-bytes quota).",
            ["result"],
            registry=r,
        )
        self.summarizer_calls = Counter(
            "toolref_summarizer_calls",
            "Summarizer runs, by summarizer and outcome (ok, failed).",
            ["summarizer", "outcome"],
            registry=r,
        )
        self.summary_fallbacks = Counter(
            "toolref_summary_fallbacks",
            "Summaries a request wanted from a model and got extractive instead, by summarizer "
            "and reason: failed, failed-recently, wait, request-cap, tenant-quota, breaker.",
            ["summarizer", "reason"],
            registry=r,
        )
        self.corrupt = Counter(
            "toolref_records_corrupt",
            "Stored records that did not hold what their ref names when read (their content's "
            "SHA-256 recomputed); never served, deleted.",
            registry=r,
        )
        self.store_errors = Counter(
            "toolref_store_errors",
            "Store (Redis) operations that failed, by operation.",
            ["operation"],
            registry=r,
        )
        self.breaker = Enum(
            "toolref_store_breaker",
            "State of the store circuit breaker (open: requests fail fast with 503).",
            states=["closed", "open", "half-open"],
            registry=r,
        )
        self.connections_open = Gauge(
            "toolref_connections_open", "HTTP connections open in this process.", registry=r
        )
        self.connections_closed = Counter(
            "toolref_connections_closed",
            "Connections the HTTP layer closed, by reason: idle (keep-alive ran out), "
            "header-timeout, body-timeout, send-timeout (an answer left unread), malformed, "
            "evicted (idle, to make room), over-limit.",
            ["reason"],
            registry=r,
        )
        self.upload_bytes = Counter(
            "toolref_upload_bytes",
            "Gateway LLM request bytes: raw (the body forwarded upstream, as its client "
            "wrote it) and wire (the body received, with refs, history refs and compression).",
            ["kind"],
            registry=r,
        )
        self.edits = Counter(
            "toolref_edits",
            "Gateway requests sent as edits (application/vnd.toolref.edit), by outcome: "
            "applied, or the problem's slug (missing-history, missing-pieces, "
            "dictionary-mismatch, ...).",
            ["outcome"],
            registry=r,
        )
        self._breaker_state: Callable[[], str] | None = None

    def refs(self, found: list[bool]) -> None:
        held = sum(found)
        if held:
            self.resolved.inc(held)
        if held < len(found):
            self.missing.inc(len(found) - held)

    def watch_breaker(self, state: Callable[[], str]) -> None:
        """Read the breaker's state at scrape time (it moves by the clock, not by calls)."""
        self._breaker_state = state

    def render(self) -> bytes:
        if self._breaker_state is not None:
            self.breaker.state(self._breaker_state())
        return generate_latest(self.registry)
