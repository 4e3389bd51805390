"""The summary cache: one computation per (tenant, invocation, summarizer id), ever.

Summaries are cached under `tr:<tenant>:s:<ref>:<summarizer id>` with the sliding TTL of
refs (a handoff's dialogue summaries under `tr:<tenant>:d:<digest of the transcript>:<id>`).
A summary not yet cached is computed once however many requests, replicas or processes ask
at the same time (single-flight): the first takes a Redis lock (`SET NX PX`, so a crashed
holder blocks others only until the lock expires), the others wait for the value. Within
one process, concurrent requests also share one task.

No request waits without bound: each waits for the computation it started or joined at
most `wait_seconds` (the LLM's total timeout plus a margin, at most the lock's expiry), then
uses the extractive summary; the computation itself is cut off after `compute_seconds`,
whatever the summarizer does.

Failures are never cached: when the requested summarizer fails (an LLM timing out, a
malformed answer, any exception), the answer uses the extractive summary and nothing is
stored under the failed summarizer's id. The lock is marked failed for `failure_seconds`
instead, so the waiting requests fall back at once, and so do later ones until the mark
expires (the model is not asked again for that result meanwhile). Error results are never
sent to a model. Model calls are also held to the `Quotas` (per request, per tenant per
minute, a circuit breaker): a call a quota refuses is not made, and not a failure.

Summaries count in the tenant's stored-bytes quota (`toolref_server.storage.quotas`) like records:
read through the `Store` (counted the first time a summary is read in a window), and
written only when they fit. A summary that does not fit is still answered, computed and not
kept (`cached` false): a summary is a read of a ref the tenant holds, and reads are never
refused; the model calls it then repeats are held to the `Quotas` above. Locks and failure
marks are not counted: a lock lives while its summary is computed (at most `lock_seconds`,
at most 16 per request in flight), a failure mark `failure_seconds` after a model call
failed (at most one per model call, which the tenant's minute quota bounds); each is under
100 bytes.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Final

from redis.exceptions import RedisError

from toolref import extractive
from toolref.registry.breaker import BreakerState
from toolref.wire.canonical import Ref, digest_key
from toolref.wire.errors import QuotaExceededError, StoreUnavailableError, ValidationError
from toolref_server.metrics import Metrics
from toolref_server.registry.llm_quotas import Quotas
from toolref_server.registry.summarizers import (
    OpenAICompatibleSummarizer,
    Summarizer,
    SummarizerError,
)
from toolref_server.storage.store import Store

log = logging.getLogger(__name__)

_FAILED: Final = b"failed"
_CONCURRENCY: Final = 16

Compute = Callable[[], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Summary:
    text: str
    summarizer: str  # the id of the summarizer that made `text`
    cached: bool  # made earlier (or by another request), not by this one
    fallback: bool  # the requested summarizer failed or was not asked; this is extractive


class Skipped(SummarizerError):
    """The model was not asked: a quota, the breaker, a recent failure or the bound on
    waiting said no. Not a failure of the model (nothing is marked failed)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class SummaryCache:
    """`store`: where summaries are kept and counted (its quota, if any, is the tenant's
    stored-bytes quota); the locks go to its engine directly."""

    def __init__(
        self,
        store: Store,
        summarizers: Mapping[str, Summarizer],
        *,
        ttl_seconds: int,
        lock_seconds: float,
        wait_seconds: float,
        failure_seconds: float,
        quotas: Quotas,
        compute_seconds: float | None = None,
        retry_after: int = 1,
        metrics: Metrics | None = None,
    ) -> None:
        self.store = store
        self.redis = store.redis
        self.summarizers = summarizers
        self.ttl = ttl_seconds
        self.lock_ms = int(lock_seconds * 1000)
        self.wait = min(wait_seconds, lock_seconds)
        self.compute_seconds = compute_seconds if compute_seconds is not None else self.wait
        self.failed_ms = max(1, int(failure_seconds * 1000))
        self.quotas = quotas
        self.retry_after = retry_after
        self._inflight: dict[str, asyncio.Task[tuple[str, bool]]] = {}
        self.metrics = metrics or Metrics()

    @staticmethod
    def key(tenant: str, ref: Ref, summarizer_id: str) -> str:
        return f"tr:{tenant}:s:{ref.key}:{summarizer_id}"

    @staticmethod
    def dialogue_key(tenant: str, transcript: str, summarizer_id: str) -> str:
        digest = hashlib.sha256(transcript.encode("utf-8", "surrogatepass")).digest()
        return f"tr:{tenant}:d:{digest_key(digest)}:{summarizer_id}"

    def summarizer(self, name: str) -> Summarizer:
        try:
            return self.summarizers[name]
        except KeyError:
            raise ValidationError(
                f"summarizer {name!r} is not offered here; use one of "
                f"{', '.join(self.summarizers)} (GET /v1/capabilities lists them)",
                summarizers=list(self.summarizers),
            ) from None

    async def many(
        self,
        tenant: str,
        items: Sequence[tuple[Ref, Mapping[str, Any]]],
        name: str,
        max_chars: int,
    ) -> list[Summary]:
        """Summaries of `items` (ref, invocation): one batched read, then the misses, at
        most `quotas.per_request` of them from a model (the rest extractive at once)."""
        summarizer = self.summarizer(name)
        sid = summarizer.id(max_chars)
        keys = [self.key(tenant, ref, sid) for ref, _ in items]
        if not keys:
            return []
        # One round trip (one MGET per hash slot), lifetimes extended, counted for the quota.
        values = await self.store.read_and_touch(tenant, keys, "summary")
        found: list[Summary | None] = [
            None if value is None else Summary(value.decode(), sid, cached=True, fallback=False)
            for value in values
        ]
        hits = sum(summary is not None for summary in found)
        self.metrics.summary_cache.labels("hit").inc(hits)
        self.metrics.summary_cache.labels("miss").inc(len(found) - hits)
        gate = asyncio.Semaphore(_CONCURRENCY)
        asked = 0

        async def fill(index: int) -> None:
            invocation = items[index][1]
            async with gate:
                found[index] = await self._one(
                    tenant, keys[index], invocation, summarizer, max_chars
                )

        async def capped(index: int) -> None:
            self._fell_back(summarizer.name, "request-cap")
            found[index] = await self._fallback(items[index][1], summarizer, max_chars)

        work = []
        for index, hit in enumerate(found):
            if hit is not None:
                continue
            to_model = self._guarded(summarizer.name) and not items[index][1].get("isError")
            if to_model and asked >= self.quotas.per_request:
                work.append(capped(index))
                continue
            asked += to_model
            work.append(fill(index))
        await asyncio.gather(*work)
        return [summary for summary in found if summary is not None]

    async def dialogue(
        self, tenant: str, transcript: str, summarizer: OpenAICompatibleSummarizer, budget: int
    ) -> Summary | None:
        """The summarizer's summary of a handoff's dialogue, cached and computed once like
        an invocation's; None when it failed or was not asked (the caller uses its digest)."""
        sid = summarizer.id(budget)
        key = self.dialogue_key(tenant, transcript, sid)
        (value,) = await self.store.read_and_touch(tenant, [key], "summary")
        if value is not None:
            self.metrics.summary_cache.labels("hit").inc()
            return Summary(_text(value), sid, cached=True, fallback=False)
        self.metrics.summary_cache.labels("miss").inc()
        try:
            text, cached = await self._shared(
                tenant,
                key,
                summarizer.name,
                lambda: summarizer.summarize_dialogue(transcript, budget),
            )
        except SummarizerError as exc:
            self._fell_back(summarizer.name, exc)
            log.warning("dialogue summary %s not made, using the digest: %s", sid, exc)
            return None
        return Summary(text, sid, cached=cached, fallback=False)

    @staticmethod
    def _guarded(name: str) -> bool:
        """Is this summarizer a model, held to the quotas? (Extractive is not.)"""
        return name != extractive.NAME

    async def _one(
        self,
        tenant: str,
        key: str,
        invocation: Mapping[str, Any],
        summarizer: Summarizer,
        max_chars: int,
    ) -> Summary:
        if invocation.get("isError") and self._guarded(summarizer.name):
            return await self._fallback(invocation, summarizer, max_chars)

        def compute() -> Awaitable[str]:
            return summarizer.summarize(invocation, max_chars)

        try:
            text, cached = await self._shared(tenant, key, summarizer.name, compute)
        except SummarizerError as exc:
            self._fell_back(summarizer.name, exc)
            return await self._fallback(invocation, summarizer, max_chars)
        return Summary(text, summarizer.id(max_chars), cached=cached, fallback=False)

    async def _shared(self, tenant: str, key: str, name: str, compute: Compute) -> tuple[str, bool]:
        """(text, made elsewhere) for `key`: from the task of this process that is already
        computing it, or from a new one. Waits at most `self.wait`; raises
        `SummarizerError` when the summarizer failed or was not asked."""
        guarded = self._guarded(name)
        if guarded and self.quotas.breaker(name).state is BreakerState.OPEN:
            raise Skipped("breaker", f"{name} failed repeatedly; not asked during its cool-down")
        task = self._inflight.get(key)
        joined = task is not None
        if task is None:
            task = asyncio.ensure_future(self._flight(tenant, key, name, compute))
            self._inflight[key] = task
            task.add_done_callback(lambda done: self._landed(key, done))
        try:
            async with asyncio.timeout(self.wait):
                text, cached = await asyncio.shield(task)
        except TimeoutError:
            log.warning("no summary for %s within %ss; using extractive", key, self.wait)
            raise Skipped("wait", f"no summary within {self.wait}s") from None
        return text, cached or joined

    def _landed(self, key: str, task: asyncio.Task[tuple[str, bool]]) -> None:
        self._inflight.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved, even when every waiter gave up before it ended

    async def _flight(self, tenant: str, key: str, name: str, compute: Compute) -> tuple[str, bool]:
        guarded = self._guarded(name)

        async def call() -> str:
            if guarded:
                await self._admit(tenant, name)
            try:
                async with asyncio.timeout(self.compute_seconds):
                    text = await compute()
            except Exception as exc:  # any failure of the summarizer is its failure
                self._failed(name, guarded)
                if isinstance(exc, SummarizerError):
                    raise
                if not isinstance(exc, TimeoutError):
                    log.exception("summarizer %s raised", name)
                raise SummarizerError(
                    f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                ) from exc
            if guarded:
                self.quotas.breaker(name).success()
            self.metrics.summarizer_calls.labels(name, "ok").inc()
            return text

        try:
            return await self._single_flight(tenant, key, call)
        except Skipped:
            raise
        except SummarizerError as exc:
            log.warning("summarizer %s failed for %s, using extractive: %s", name, key, exc)
            raise
        except RedisError as exc:
            raise self._unavailable(exc) from None

    async def _admit(self, tenant: str, name: str) -> None:
        """May the model be called now? The tenant's minute quota, then the breaker (whose
        half-open state lets one probe through, so it is asked last)."""
        if not await self.quotas.take(tenant):
            raise Skipped(
                "tenant-quota",
                f"tenant {tenant!r} started {self.quotas.per_tenant_minute} model calls this "
                "minute (TOOLREF_LLM_CALLS_PER_TENANT_MINUTE)",
            )
        if not self.quotas.breaker(name).allow():
            raise Skipped("breaker", f"{name} failed repeatedly; a probe is under way")

    def _failed(self, name: str, guarded: bool) -> None:
        if guarded:
            self.quotas.breaker(name).failure()
        self.metrics.summarizer_calls.labels(name, "failed").inc()

    def _fell_back(self, name: str, cause: SummarizerError | str) -> None:
        """Count a summary this request wanted from `name` and did not get from it."""
        reason = cause if isinstance(cause, str) else getattr(cause, "reason", "failed")
        self.metrics.summary_fallbacks.labels(name, reason).inc()

    async def _fallback(
        self, invocation: Mapping[str, Any], summarizer: Summarizer, max_chars: int
    ) -> Summary:
        backup = self.summarizers[extractive.NAME]
        text = await backup.summarize(invocation, max_chars)
        failed = self._guarded(summarizer.name) and not invocation.get("isError")
        return Summary(text, backup.id(max_chars), cached=False, fallback=failed)

    async def _single_flight(self, tenant: str, key: str, compute: Compute) -> tuple[str, bool]:
        """(summary, made elsewhere): compute under the lock, or wait for whoever holds it
        (polling, at most `self.wait`)."""
        lock = key + ":lock"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait
        while True:
            token = uuid.uuid4().hex
            if await self.redis.set(lock, token, nx=True, px=self.lock_ms):
                return await self._compute_holding(tenant, key, lock, compute), False
            poll = 0.02
            while True:
                pipe = self.redis.pipeline(transaction=False)
                pipe.get(key)  # two GETs, not MGET: on a cluster they may sit in two slots
                pipe.get(lock)
                value, holder = await pipe.execute()
                if value is not None:
                    # Written since this request missed it (within `self.wait`), with its
                    # whole lifetime: nothing to extend, so nothing to count.
                    return _text(value), True
                if holder == _FAILED:
                    raise Skipped("failed-recently", "this summary failed moments ago")
                if holder is None:
                    break  # the holder is gone without a value: take the lock ourselves
                if loop.time() >= deadline:
                    raise Skipped("wait", f"no summary after waiting {self.wait}s for another")
                await asyncio.sleep(poll)
                poll = min(poll * 1.5, 0.2)

    async def _compute_holding(self, tenant: str, key: str, lock: str, compute: Compute) -> str:
        try:
            text = await compute()
        except Skipped:
            with suppress(RedisError):
                await self.redis.delete(lock)  # nothing failed: the next ask may call it
            raise
        except SummarizerError:
            # Remember the failure: the waiters fall back now, and so does every request
            # until the mark expires (then the next one asks the model again).
            with suppress(RedisError):
                await self.redis.set(lock, _FAILED, px=self.failed_ms)
            raise
        except BaseException:
            with suppress(RedisError):
                await self.redis.delete(lock)
            raise
        await self._keep(tenant, key, lock, text.encode())
        return text

    async def _keep(self, tenant: str, key: str, lock: str, data: bytes) -> None:
        """Store `data` under `key` when it fits the tenant's stored-bytes quota (counted),
        and release `lock` in any case. Over the quota the summary is answered, not kept."""
        store = self.store
        try:
            cost = await store.cost_of_writing(tenant, [key], [len(data)])
        except QuotaExceededError:
            self.metrics.summary_cache.labels("not-kept").inc()
            with suppress(RedisError):
                await self.redis.delete(lock)
            return
        except BaseException:
            with suppress(RedisError):
                await self.redis.delete(lock)
            raise
        async with store.guard("summary"):
            pipe = self.redis.pipeline(transaction=False)
            pipe.set(key, data, ex=self.ttl)
            store.charge(pipe, tenant, cost)
            pipe.delete(lock)
            await pipe.execute()

    def _unavailable(self, exc: Exception) -> StoreUnavailableError:
        self.metrics.store_errors.labels("summary").inc()
        return StoreUnavailableError(
            f"the summary cache (Redis) is unreachable ({type(exc).__name__}); retry after "
            f"{self.retry_after}s, or hydrate in full mode",
            retry_after=self.retry_after,
        )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
