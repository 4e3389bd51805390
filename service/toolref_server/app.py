"""The Starlette application: `create_app(settings)`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, cast

import httpx
from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route

from toolref.asgi.budget import Budget
from toolref.asgi.workers import Workers
from toolref.kit import allocator, collector
from toolref.wire import redaction
from toolref.wire.errors import (
    MethodNotAllowedError,
    NotFoundError,
    StoreUnavailableError,
    ToolrefError,
)
from toolref_server import workers_metrics
from toolref_server.documents import BodyLimits
from toolref_server.gateway.gateway import Gateway
from toolref_server.gateway.operation import operations as gateway_operations
from toolref_server.http.access import AccessMiddleware
from toolref_server.http.admission import AdmissionMiddleware
from toolref_server.http.auth import Authenticator
from toolref_server.http.connection_limits import STATE_KEY, ConnectionLimits
from toolref_server.http.hosts import KeylessHosts
from toolref_server.http.problem import problem_response
from toolref_server.http.protocol import ProtocolMiddleware
from toolref_server.http.unanswered import AnswerCut
from toolref_server.metrics import Metrics
from toolref_server.registry.llm_quotas import ModelCallQuotas
from toolref_server.registry.summarizers import OpenAICompatibleSummarizer, build_summarizers
from toolref_server.registry.summary_cache import SummaryCache
from toolref_server.routes import (
    answers,
    handoff,
    hydration,
    invocations,
    messages,
    meta,
    requests,
    savings_page,
)
from toolref_server.services import Services
from toolref_server.settings import Settings
from toolref_server.storage import compressors, outage
from toolref_server.storage.answers import Answers
from toolref_server.storage.counters import ModelCallCounters
from toolref_server.storage.quotas import RequestRate, StoredBytes
from toolref_server.storage.recipe_cache import RecipeCache
from toolref_server.storage.recipes import Recipes
from toolref_server.storage.redis import is_cluster_url, plain_url
from toolref_server.storage.store import Store, StoreClient
from toolref_server.storage.summary_store import SummaryStore
from toolref_server.storage.under_way import UnderWay
from toolref_server.storage.usage_counters import UsageCounters
from toolref_server.storage.verifier import Verifier
from toolref_server.supervised import end_with_supervisor
from toolref_server.usage import Pending

log = logging.getLogger("toolref_server")


async def _sampling(metrics: Metrics, usage: UsageCounters, every: float) -> None:
    """Every `every` seconds (TOOLREF_SAMPLE_SECONDS): what this worker's gauges read, the
    gauges of workers gone forgotten (several workers; a scrape reads them all), and the
    gateway usage counted added to the store's per-minute counters (kept for the next
    time when the store fails)."""
    while True:
        await asyncio.sleep(every)
        metrics.sample()
        if metrics.directory is not None:
            workers_metrics.forget_dead(metrics.directory)
        try:
            await usage.flush(metrics.pending)
        except StoreUnavailableError as exc:
            log.warning("gateway usage not added to the store yet: %s", exc.detail)


async def _stopping(
    under_way: UnderWay, seconds: float, metrics: Metrics, usage: UsageCounters
) -> None:
    """At stop, after the sampler: the store writes still running here, awaited at most
    `seconds` (one cut would cost its conversation's next turn a resend); then what this
    worker counted, added (a flush the stop cancelled included); what the store cannot
    take now is lost with the process."""
    left = await under_way.drained(seconds)
    if left:
        log.warning("stopping with %d store writes still running (a next turn resends)", left)
    try:
        await usage.flush(metrics.pending)
    except StoreUnavailableError as exc:
        log.warning(
            "gateway usage of %d minute x tenant x upstream entries left off the savings page "
            "at stop: %s",
            len(metrics.pending),
            exc.detail,
        )


@contextlib.asynccontextmanager
async def _running(work: asyncio.Task[None]) -> AsyncIterator[None]:
    try:
        yield
    finally:
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work


async def _misrouted(store: Store) -> None:
    """An engine that refuses the credentials of TOOLREF_REDIS_URL (a warning: the service
    serves what it can meanwhile), or one reached as what it is not (a cluster's node as
    one engine), said once at start, as `/readyz` says it (`Store.ping`, `Store.misrouted`).
    The breaker is left as it is: an engine down at start is for requests to find."""
    if not await store.ping(probe=False):
        if store.refused is not None:
            log.warning(outage.credentials(store.refused, words=True))
        return
    why = await store.misrouted()
    if why is not None:
        log.error(why)


class _HttpProblem(ToolrefError):
    """Any other error Starlette raises as an HTTPException, as a problem."""

    slug = "http"


def _one_quick_retry() -> Retry:
    """One reconnect for a pooled connection the engine closed (it restarted, say). Only on
    connection errors: retrying a timeout would wait out a frozen engine twice."""
    return Retry(
        ExponentialWithJitterBackoff(base=0.01, cap=0.05),
        1,
        supported_errors=(RedisConnectionError,),
    )


def open_redis(settings: Settings, url: str) -> StoreClient:
    if settings.redis_cluster or is_cluster_url(url):
        # The cluster client follows MOVED and refreshes its slot map after a failover.
        return RedisCluster.from_url(
            plain_url(url),
            socket_timeout=settings.redis_timeout,
            socket_connect_timeout=settings.redis_connect_timeout,
            max_connections=settings.redis_max_connections,
            retry=_one_quick_retry(),
        )
    # A burst beyond the pool waits for a free connection (at most the command timeout)
    # rather than failing at once (the store queues its operations the same way, ahead of
    # the pool); more retries would only delay the 503 that tells clients to fall back to
    # full payloads.
    pool = BlockingConnectionPool.from_url(
        url,
        timeout=settings.redis_timeout,
        socket_timeout=settings.redis_timeout,
        socket_connect_timeout=settings.redis_connect_timeout,
        max_connections=settings.redis_max_connections,
        retry=_one_quick_retry(),
        health_check_interval=30,
    )
    return Redis(connection_pool=pool)


async def _toolref_error(request: Request, exc: Exception) -> Response:
    return problem_response(cast(ToolrefError, exc))


async def _http_error(request: Request, exc: Exception) -> Response:
    exc = cast(HTTPException, exc)
    error: ToolrefError
    if exc.status_code == 404:
        error = NotFoundError(
            f"no endpoint at {request.url.path}; GET /openapi.json lists the endpoints"
        )
    elif exc.status_code == 405:
        allow = _methods_of(request)
        error = MethodNotAllowedError(
            f"{request.method} is not allowed on {request.url.path}; use "
            f"{' or '.join(allow)} (GET /openapi.json lists the methods of each endpoint)",
            allow=allow,
        )
    else:
        error = _HttpProblem(str(exc.detail))
    return problem_response(error)


def _upstreams_line(settings: Settings) -> str:
    """Where the gateway forwards, name -> base URL (credentials masked), for the start log."""
    upstreams = settings.upstream_urls
    if not upstreams:
        return "none (TOOLREF_UPSTREAMS is empty: every /llm/... request is a 404)"
    return ", ".join(f"{name} -> {found.logged}" for name, found in sorted(upstreams.items()))


def _methods_of(request: Request) -> list[str]:
    """Every method the routes of the request's path serve (Starlette's own `Allow` names
    those of the first route of the path only)."""
    methods: set[str] = set()
    for route in request.app.routes:
        if isinstance(route, Route) and route.matches(request.scope)[0] is not Match.NONE:
            methods.update(route.methods or ())
    return sorted(methods)


async def _unexpected(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, AnswerCut):  # one is said where raised, and cut by the HTTP layer
        log.exception("unhandled error on %s %s", request.method, request.url.path)
    return problem_response(
        ToolrefError("the service failed unexpectedly; the error is logged, retry later")
    )


def create_app(
    settings: Settings | None = None,
    redis: StoreClient | None = None,
    llm_transport: httpx.AsyncBaseTransport | None = None,
) -> Starlette:
    """Build the service. `redis` injects a client (tests); otherwise the lifespan opens one.
    `llm_transport` injects the transport of the openai-compatible summarizer (tests)."""
    settings = settings or Settings.from_environment()
    end_with_supervisor(settings.workers)  # a worker of several: never left orphaned
    settings.check_exposure()
    settings.check_summarizer()
    settings.check_context_summarizers()
    settings.check_context_names()
    # What new records and history messages are written with (one choice per process).
    compressors.configure(
        records=settings.record_dictionary,
        messages=settings.message_dictionary,
        level=settings.compress_level,
    )
    metrics = Metrics(Pending(limit=settings.usage_pending_slots))
    # Request bodies in flight, REST and gateway together (one budget per process).
    budget = Budget(
        settings.max_inflated_in_flight,
        setting="TOOLREF_MAX_INFLATED_IN_FLIGHT",
        retry_after=settings.retry_after_seconds,
        per_tenant=settings.tenant_inflated_limit,  # one tenant's share (429 past it)
        tenant_setting="TOOLREF_TENANT_INFLATED_IN_FLIGHT",
    )
    metrics.watch_budget(budget)
    open_metrics = settings.warn_open_metrics()
    if open_metrics:
        log.warning(open_metrics)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        async with AsyncExitStack() as stack:
            if metrics.directory is not None:  # several workers share their metrics
                workers_metrics.forget_dead(metrics.directory)
                stack.callback(workers_metrics.forget, metrics.directory)
            client = redis
            if client is None:
                url = settings.redis_url
                if url is None:
                    from toolref_server.embedded import EmbeddedEngine

                    engine = EmbeddedEngine(settings.data_dir)
                    url = engine.start()
                    stack.callback(engine.stop)
                client = open_redis(settings, url)
                stack.push_async_callback(client.aclose)
                log.info("store: %s", redaction.url(url))
            log.info("gateway upstreams: %s", _upstreams_line(settings))
            workers = Workers(settings.work_threads, settings.offload_bytes)
            stack.callback(workers.close)
            summarizers = build_summarizers(settings, llm_transport, workers)
            for summarizer in summarizers.values():
                if isinstance(summarizer, OpenAICompatibleSummarizer):
                    stack.push_async_callback(summarizer.aclose)
            store = Store(
                client,
                settings.ttl_seconds,
                settings.retry_after_seconds,
                failure_threshold=settings.breaker_failures,
                metrics=metrics,
                slots=settings.redis_max_connections,
                slot_wait=settings.redis_timeout,
                workers=workers,
                quota=StoredBytes(settings.tenant_bytes, settings.ttl_seconds),
                verifier=Verifier(settings.verified_records, settings.verified_chars),
            )
            app.state.services = Services(
                settings=settings,
                store=store,
                auth=Authenticator(settings),
                limits=BodyLimits(
                    settings.max_body_bytes,
                    settings.max_decompressed_bytes,
                    settings.max_depth,
                    settings.max_items,
                    settings.max_containers,
                ),
                summaries=SummaryCache(
                    SummaryStore(
                        store,
                        lock_seconds=settings.summary_lock_seconds,
                        failure_seconds=settings.llm_failure_seconds,
                    ),
                    summarizers,
                    # The LLM's own deadline ends a call first; the cache's bounds (the
                    # computation, then every request waiting for it) come just after.
                    wait_seconds=settings.summary_wait_seconds,
                    compute_seconds=settings.summary_compute_seconds,
                    quotas=ModelCallQuotas(
                        ModelCallCounters(store),
                        per_request=settings.llm_calls_per_request,
                        per_tenant_minute=settings.llm_calls_per_tenant_minute,
                        breaker_failures=settings.llm_breaker_failures,
                        breaker_seconds=settings.llm_breaker_seconds,
                        per_tenant_in_flight=settings.llm_tenant_calls_limit,
                    ),
                    metrics=metrics,
                ),
                metrics=metrics,
                workers=workers,
                rate=RequestRate(settings.tenant_rate),
                recipes=Recipes(
                    store,
                    RecipeCache(settings.edit_cache_bytes),
                    workers,
                    snapshot_every=settings.edit_snapshot_every,
                    superseded_ttl=settings.edit_superseded_ttl,
                    refresh_seconds=settings.edit_refresh_seconds,
                    under_way=(under_way := UnderWay()),  # the writes a read here waits for
                ),
                usage=UsageCounters(store),
                answers=Answers(store, settings.answer_cache_bytes, under_way),
            )
            collector.tune()
            allocator.tune()  # growing bodies from the heap (toolref.kit.allocator)
            usage = app.state.services.usage
            # At stop, before the store's client closes: the writes left to run after their
            # answers (a channel's turns), at most a command's deadline and a slot's; then
            # the usage this worker counted.
            stack.push_async_callback(
                _stopping, under_way, 2 * settings.redis_timeout, metrics, usage
            )
            sampler = asyncio.create_task(_sampling(metrics, usage, settings.sample_seconds))
            await stack.enter_async_context(_running(sampler))
            # Not awaited: a store that does not answer must not delay the start.
            await stack.enter_async_context(_running(asyncio.create_task(_misrouted(store))))
            # The HTTP layer (toolref_server.http.connection) reads its limits from here.
            yield {STATE_KEY: ConnectionLimits.of(settings, metrics)}

    app = Starlette(
        routes=[
            *meta.routes,
            *invocations.routes,
            *messages.routes,
            *hydration.routes,
            *requests.routes,
            *answers.routes,
            *handoff.routes,
            *savings_page.routes,
        ],
        middleware=[
            Middleware(AccessMiddleware, metrics=metrics),
            # No API keys: only requests for a loopback Host (DNS rebinding), gateway's too.
            Middleware(KeylessHosts, settings=settings),
            # Before the registry's own layers: gateway requests speak the provider's
            # protocol, with their own limits (TOOLREF_GATEWAY_*).
            Middleware(Gateway, settings=settings, metrics=metrics, budget=budget),
            Middleware(ProtocolMiddleware),
            Middleware(
                AdmissionMiddleware,
                limit=settings.max_requests_in_flight,
                retry_after=settings.retry_after_seconds,
                budget=budget,
                per_tenant=settings.tenant_requests_limit,  # one tenant's share (429 past it)
                auth=Authenticator(settings),
            ),
        ],
        exception_handlers={
            ToolrefError: _toolref_error,
            HTTPException: _http_error,
            Exception: _unexpected,
        },
        lifespan=lifespan,
    )
    app.state.budget = budget
    app.state.mounted = gateway_operations(settings)  # what the OpenAPI document adds
    app.router.redirect_slashes = False  # a trailing slash is a 404 problem, not a redirect
    return app
