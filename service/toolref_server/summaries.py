"""The summary cache: one computation per (tenant, invocation, summarizer id), ever.

Summaries are cached under `tr:<tenant>:s:<ref>:<summarizer id>` with the sliding TTL of
refs. A summary not yet cached is computed once however many requests, replicas or
processes ask at the same time (single-flight): the first takes a Redis lock
(`SET NX PX`, so a crashed holder blocks others only until the lock expires), the others
wait for the value. Within one process, concurrent requests also share one task.

Failures are never cached: when the requested summarizer fails (an LLM timing out, say),
the answer uses the extractive summary and nothing is stored under the failed summarizer's
id; the lock is briefly marked failed so the waiting requests fall back at once instead of
calling the model again. Error results are never sent to a model.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import Any, Final

from redis.asyncio import RedisCluster
from redis.exceptions import RedisError

from toolref import extractive
from toolref.canonical import Ref
from toolref.errors import StoreUnavailableError, ValidationError
from toolref_server.metrics import Metrics
from toolref_server.store import StoreClient, queue_mgets, slot_groups, ungroup
from toolref_server.summarizers import Summarizer, SummarizerError

log = logging.getLogger(__name__)

_FAILED: Final = b"failed"
_FAILED_MS: Final = 2000
_CONCURRENCY: Final = 16


@dataclass(frozen=True, slots=True)
class Summary:
    text: str
    summarizer: str  # the id of the summarizer that made `text`
    cached: bool  # made earlier (or by another request), not by this one
    fallback: bool  # the requested summarizer failed; this is the extractive summary


class SummaryCache:
    def __init__(
        self,
        redis: StoreClient,
        summarizers: Mapping[str, Summarizer],
        *,
        ttl_seconds: int,
        lock_seconds: float,
        wait_seconds: float,
        retry_after: int = 1,
        metrics: Metrics | None = None,
    ) -> None:
        self.redis = redis
        self.summarizers = summarizers
        self.ttl = ttl_seconds
        self.lock_ms = int(lock_seconds * 1000)
        self.wait = wait_seconds
        self.retry_after = retry_after
        self._inflight: dict[str, asyncio.Task[Summary]] = {}
        self.calls = 0  # summarizer calls made by this process (tests)
        self.metrics = metrics or Metrics()

    @staticmethod
    def key(tenant: str, ref: Ref, summarizer_id: str) -> str:
        return f"tr:{tenant}:s:{ref.key}:{summarizer_id}"

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
        """Summaries of `items` (ref, invocation): one batched read, then the misses."""
        summarizer = self.summarizer(name)
        sid = summarizer.id(max_chars)
        keys = [self.key(tenant, ref, sid) for ref, _ in items]
        if not keys:
            return []
        try:
            groups = slot_groups(keys, isinstance(self.redis, RedisCluster))
            pipe = self.redis.pipeline(transaction=False)
            queue_mgets(pipe, keys, groups)
            for key in keys:
                pipe.expire(key, self.ttl)
            replies: list[Any] = await pipe.execute()
        except RedisError as exc:
            raise self._unavailable(exc) from None
        found: list[Summary | None] = [
            None if value is None else Summary(value.decode(), sid, cached=True, fallback=False)
            for value in ungroup(groups, replies, len(keys))
        ]
        hits = sum(summary is not None for summary in found)
        self.metrics.summary_cache.labels("hit").inc(hits)
        self.metrics.summary_cache.labels("miss").inc(len(found) - hits)
        gate = asyncio.Semaphore(_CONCURRENCY)

        async def fill(index: int) -> None:
            invocation = items[index][1]
            async with gate:
                found[index] = await self._one(keys[index], invocation, summarizer, max_chars)

        await asyncio.gather(*(fill(i) for i, hit in enumerate(found) if hit is None))
        return [summary for summary in found if summary is not None]

    async def _one(
        self, key: str, invocation: Mapping[str, Any], summarizer: Summarizer, max_chars: int
    ) -> Summary:
        if invocation.get("isError") and summarizer.name != extractive.NAME:
            return await self._fallback(invocation, summarizer, max_chars)
        task = self._inflight.get(key)
        joined = task is not None
        if task is None:
            task = asyncio.ensure_future(self._flight(key, invocation, summarizer, max_chars))
            self._inflight[key] = task
            task.add_done_callback(lambda _: self._inflight.pop(key, None))
        summary = await asyncio.shield(task)
        if joined and not summary.fallback:
            return replace(summary, cached=True)  # made by the request this one joined
        return summary

    async def _flight(
        self, key: str, invocation: Mapping[str, Any], summarizer: Summarizer, max_chars: int
    ) -> Summary:
        sid = summarizer.id(max_chars)

        async def compute() -> str:
            self.calls += 1
            try:
                text = await summarizer.summarize(invocation, max_chars)
            except SummarizerError:
                self.metrics.summarizer_calls.labels(summarizer.name, "failed").inc()
                raise
            self.metrics.summarizer_calls.labels(summarizer.name, "ok").inc()
            return text

        try:
            text, cached = await self._single_flight(key, compute)
        except SummarizerError as exc:
            log.warning("summarizer %s failed, using extractive: %s", sid, exc)
            return await self._fallback(invocation, summarizer, max_chars)
        except RedisError as exc:
            raise self._unavailable(exc) from None
        return Summary(text, sid, cached=cached, fallback=False)

    async def _fallback(
        self, invocation: Mapping[str, Any], summarizer: Summarizer, max_chars: int
    ) -> Summary:
        backup = self.summarizers[extractive.NAME]
        text = await backup.summarize(invocation, max_chars)
        failed = summarizer.name != extractive.NAME and not invocation.get("isError")
        return Summary(text, backup.id(max_chars), cached=False, fallback=failed)

    async def _single_flight(
        self, key: str, compute: Callable[[], Awaitable[str]]
    ) -> tuple[str, bool]:
        """(summary, made elsewhere): compute under the lock, or wait for whoever holds it."""
        lock = key + ":lock"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait
        while True:
            token = uuid.uuid4().hex
            if await self.redis.set(lock, token, nx=True, px=self.lock_ms):
                return await self._compute_holding(key, lock, compute), False
            poll = 0.02
            while True:
                if loop.time() >= deadline:
                    raise SummarizerError(f"no summary after waiting {self.wait}s for another")
                await asyncio.sleep(poll)
                poll = min(poll * 1.5, 0.2)
                pipe = self.redis.pipeline(transaction=False)
                pipe.get(key)  # two GETs, not MGET: on a cluster they may sit in two slots
                pipe.get(lock)
                value, holder = await pipe.execute()
                if value is not None:
                    await self.redis.expire(key, self.ttl)
                    return value.decode() if isinstance(value, bytes) else str(value), True
                if holder == _FAILED:
                    raise SummarizerError("the request computing this summary failed")
                if holder is None:
                    break  # the holder is gone without a value: take the lock ourselves

    async def _compute_holding(
        self, key: str, lock: str, compute: Callable[[], Awaitable[str]]
    ) -> str:
        try:
            text = await compute()
        except SummarizerError:
            # Tell the waiters to fall back now; the mark expires, so the next ask retries.
            with suppress(RedisError):
                await self.redis.set(lock, _FAILED, px=_FAILED_MS)
            raise
        except BaseException:
            with suppress(RedisError):
                await self.redis.delete(lock)
            raise
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(key, text.encode(), ex=self.ttl)
        pipe.delete(lock)
        await pipe.execute()
        return text

    def _unavailable(self, exc: Exception) -> StoreUnavailableError:
        self.metrics.store_errors.labels("summary").inc()
        return StoreUnavailableError(
            f"the summary cache (Redis) is unreachable ({type(exc).__name__}); retry after "
            f"{self.retry_after}s, or hydrate in full mode",
            retry_after=self.retry_after,
        )
