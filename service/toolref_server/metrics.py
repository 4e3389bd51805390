"""Prometheus metrics: one registry per app, served at GET /metrics.

A registry per app (not the process-global one) keeps two apps in one process, as tests build
them, from counting into each other. With several uvicorn workers, `toolref-server serve`
gives them a private folder (`PROMETHEUS_MULTIPROC_DIR`, prometheus-client's multiprocess
mode: `toolref_server.workers_metrics`): each worker writes its values to files there, and a
scrape of any worker reads every worker's, so counters add up and never go backwards.
Gauges name how workers combine (`multiprocess_mode`); what moves by the clock or lives
outside the metrics (the breaker, the bytes in flight) is sampled at each scrape and every
`TOOLREF_SAMPLE_SECONDS` by each worker.

Labels are bounded by configuration: routes are templates, methods HTTP's own (`method_label`:
any other is `other`), tenants those of `TOOLREF_API_KEYS` (or `local`), upstreams those of
`TOOLREF_UPSTREAMS`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from toolref.asgi.budget import Budget
from toolref.kit.breaker import BreakerState
from toolref_server import workers_metrics
from toolref_server.usage import Counts, Pending

# Latency buckets from 1 ms to 10 s: ref operations sit at the low end, summaries high.
_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
CONTENT_TYPE: Final = CONTENT_TYPE_LATEST
UNMATCHED: Final = "unmatched"  # the route label of paths no route serves (bounded labels)
# The methods a `method` label names (RFC 9110's and PATCH); any other token a client sends
# as its method (`FOO1`, `FOO2`, ...: h11 takes any) is `other`, so labels stay few.
METHODS: Final = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"}
)
OTHER_METHOD: Final = "other"


def method_label(method: str) -> str:
    """The `method` label of a request made with `method`: itself when HTTP defines it,
    else `other` (a client chooses its method: as a label it would be unbounded)."""
    return method if method in METHODS else OTHER_METHOD


class Metrics:
    """Every metric the service exports, on its own registry."""

    def __init__(self, pending: Pending | None = None) -> None:
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
            "and reason: failed, refused, empty, failed-recently, wait, request-cap, "
            "tenant-quota, tenant-in-flight, model-busy, breaker.",
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
        self.breaker = Gauge(
            "toolref_store_breaker",
            "State of the store circuit breaker (open: requests fail fast with 503): 1 for "
            "the state a worker is in (several workers: each state any live worker is in).",
            ["toolref_store_breaker"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self.connections_open = Gauge(
            "toolref_connections_open",
            "HTTP connections open (several workers: all live workers').",
            multiprocess_mode="livesum",
            registry=r,
        )
        self.inflated_in_flight = Gauge(
            "toolref_inflated_bytes_in_flight",
            "Bytes of request bodies held now, charged to the memory budget "
            "(TOOLREF_MAX_INFLATED_IN_FLIGHT; several workers: all live workers').",
            multiprocess_mode="livesum",
            registry=r,
        )
        self.inflated_limit = Gauge(
            "toolref_inflated_bytes_limit",
            "The memory budget of request bodies (TOOLREF_MAX_INFLATED_IN_FLIGHT, per worker; "
            "several workers: their sum).",
            multiprocess_mode="livesum",
            registry=r,
        )
        self.inflated_high_water = Gauge(
            "toolref_inflated_bytes_high_water",
            "The most bytes of request bodies one worker held at once since it started.",
            multiprocess_mode="livemax",
            registry=r,
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
            "wrote it) and wire (the body received: an edit, refs, compression; every "
            "attempt, one refused before it was forwarded included), by tenant and upstream; "
            "a WebSocket turn's message alike.",
            ["kind", "tenant", "upstream"],
            registry=r,
        )
        self.gateway_requests = Counter(
            "toolref_gateway_requests",
            "Gateway requests to an LLM endpoint (hydrated, or sent as edits; a WebSocket "
            "turn: each message sent upstream on an LLM endpoint's socket), by tenant and "
            "upstream, whatever their answer.",
            ["tenant", "upstream"],
            registry=r,
        )
        self.gateway_resends = Counter(
            "toolref_gateway_resends",
            "Gateway LLM requests answered 409 (refs, an edit's base or pieces not held), each of "
            "which its client sends again in full, by tenant and upstream.",
            ["tenant", "upstream"],
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
        self.context_requests = Counter(
            "toolref_context_requests",
            "Gateway requests context editing looked at, by outcome: edited (results "
            "replaced), rewrote (a batch made this turn), below (nothing to replace), client "
            "(the request carries its own context_management), unread (not a JSON body, or "
            "past TOOLREF_MAX_CONTAINERS), failed (a fault of the step), socket (a WebSocket "
            "session that asked for it: never edited).",
            ["outcome"],
            registry=r,
        )
        self.context_tokens = Counter(
            "toolref_context_tokens",
            "Estimated input tokens of edited gateway requests, as sent upstream (sent) and "
            "saved by context editing (saved), by tenant and upstream.",
            ["kind", "tenant", "upstream"],
            registry=r,
        )
        self.context_provider_tokens = Counter(
            "toolref_context_provider_tokens",
            "Input tokens of edited gateway requests as the provider's answers counted them "
            "(where they carry a usage): all of them (input), read from its prompt cache "
            "(cache_read), written to it (cache_write), by tenant and upstream.",
            ["kind", "tenant", "upstream"],
            registry=r,
        )
        self.context_cost_saved = Counter(
            "toolref_context_cost_saved",
            "Input cost saved by context editing, estimated at the policy's price per "
            "million tokens (USD), by tenant and upstream.",
            ["tenant", "upstream"],
            registry=r,
        )
        self._breaker_state: Callable[[], str] | None = None
        self._budget: Budget | None = None
        # Gateway usage not yet in the store's per-minute counters (the savings page).
        self.pending = pending if pending is not None else Pending()
        self.usage_dropped = Counter(
            "toolref_usage_dropped",
            "Gateway requests left off the savings page: counted while this worker held "
            "TOOLREF_USAGE_PENDING_SLOTS entries the store had not taken (it was down), by "
            "tenant and upstream.",
            ["tenant", "upstream"],
            registry=r,
        )
        self.directory = workers_metrics.directory()

    def refs(self, found: list[bool]) -> None:
        held = sum(found)
        if held:
            self.resolved.inc(held)
        if held < len(found):
            self.missing.inc(len(found) - held)

    def gateway_usage(self, tenant: str, upstream: str, counts: Counts) -> None:
        """Gateway traffic of `tenant` to `upstream`: counted here, and for the store's
        per-minute counters."""
        if counts.requests:
            self.gateway_requests.labels(tenant, upstream).inc(counts.requests)
        if counts.resends:
            self.gateway_resends.labels(tenant, upstream).inc(counts.resends)
        if counts.raw or counts.wire:
            self.upload_bytes.labels("raw", tenant, upstream).inc(counts.raw)
            self.upload_bytes.labels("wire", tenant, upstream).inc(counts.wire)
        if counts.tokens or counts.tokens_saved:
            self.context_tokens.labels("sent", tenant, upstream).inc(counts.tokens)
            self.context_tokens.labels("saved", tenant, upstream).inc(counts.tokens_saved)
        if not self.pending.add(tenant, upstream, counts):
            self.usage_dropped.labels(tenant, upstream).inc(counts.requests)

    def watch_breaker(self, state: Callable[[], str]) -> None:
        """Read the breaker's state at scrape time (it moves by the clock, not by calls)."""
        self._breaker_state = state

    def watch_budget(self, budget: Budget) -> None:
        """Read the memory budget's bytes in flight at scrape time (and when sampled)."""
        self._budget = budget
        self.inflated_limit.set(budget.limit)

    def sample(self) -> None:
        """Write what is read, not counted: the breaker's state and the budget's bytes."""
        if self._breaker_state is not None:
            now = self._breaker_state()
            for state in BreakerState:
                self.breaker.labels(state.value).set(1 if state.value == now else 0)
        if self._budget is not None:
            self.inflated_in_flight.set(self._budget.in_flight)
            self.inflated_high_water.set(self._budget.high_water)

    def render(self) -> bytes:
        """The exposition: this app's registry, or every worker's values (multiprocess)."""
        self.sample()
        if self.directory is None:
            return generate_latest(self.registry)
        return generate_latest(workers_metrics.collected(self.directory))
