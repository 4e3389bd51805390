"""The summary cache: one computation per (tenant, invocation, summarizer id), ever.

A summary not yet kept (`toolref_server.storage.summary_store`: where and how) is computed once
however many requests, replicas or processes ask at the same time
(`toolref_server.registry.single_flight`). This module holds the policy: which summarizer,
which budget, when a model may be asked, and what to answer when it is not.

No request waits without bound: each waits for the computation it started or joined at
most `wait_seconds` (the LLM's total timeout plus a margin, at most the lock's expiry), then
uses the extractive summary; the computation itself is cut off after `compute_seconds`,
whatever the summarizer does.

Failures are never cached: when the requested summarizer fails (an LLM timing out, a
malformed answer, any exception), the answer uses the extractive summary and nothing is
kept under the failed summarizer's id. A failure mark is kept instead for
`failure_seconds`, so the waiting requests fall back at once, and so do later ones until the
mark expires (the model is not asked again for that result meanwhile). Error results are
never sent to a model. Model calls are also held to the `ModelCallQuotas` (per request, per
tenant per minute, per tenant at once, a circuit breaker): a call a quota refuses is not
made, and not a failure; nor is one that found no free connection to the model
(`SummarizerBusy`: that is other calls' load, not the model's health). A call the model
refuses as its input (`SummarizerRefused`: 400, 413, 422) fails that summary (its failure
mark) without counting in the breaker: a tenant's inputs are not the model's health. One it
answers with no text (`SummarizerEmpty`: an output filter's) fails that summary alike
(never kept as its summary), and counts in the breaker as an answer: the model is up. A
half-open breaker's probe that told it nothing (not sent, refused, cancelled) is abandoned:
the next call probes, not one cool-down later.

Summaries count in the tenant's stored-bytes quota (`toolref_server.storage.quotas`) like
records. A summary that does not fit is still answered, computed and not kept (`cached`
false): a summary is a read of a ref the tenant holds, and reads are never refused; the
model calls it then repeats are held to the `ModelCallQuotas` above.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from toolref.kit import extractive
from toolref.kit.breaker import BreakerState
from toolref.kit.quieted import Quieted
from toolref.wire.canonical import Ref
from toolref.wire.errors import ValidationError
from toolref_server.metrics import Metrics
from toolref_server.registry.llm_quotas import ModelCallQuotas
from toolref_server.registry.single_flight import Create, SingleFlight, Skipped
from toolref_server.registry.summarizers import (
    OpenAICompatibleSummarizer,
    Summarizer,
    SummarizerBusy,
    SummarizerEmpty,
    SummarizerError,
    SummarizerRefused,
)
from toolref_server.storage.summary_store import Slot, SummaryStore, well_formed

log = logging.getLogger(__name__)
# a breaker open or a busy model refuses every summary asked: said once a minute
quiet = Quieted(log)

_CONCURRENCY: Final = 16

__all__ = ["Skipped", "Slot", "Summary", "SummaryCache"]


@dataclass(frozen=True, slots=True)
class Summary:
    text: str
    summarizer: str  # the id of the summarizer that made `text`
    cached: bool  # made earlier (or by another request), not by this one
    fallback: bool  # the requested summarizer failed or was not asked; this is extractive


class SummaryCache:
    """`store`: where summaries are kept, counted and locked (`SummaryStore`)."""

    def __init__(
        self,
        store: SummaryStore,
        summarizers: Mapping[str, Summarizer],
        *,
        wait_seconds: float,
        quotas: ModelCallQuotas,
        compute_seconds: float | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.store = store
        self.summarizers = summarizers
        self.wait = min(wait_seconds, store.lock_seconds)
        self.compute_seconds = compute_seconds if compute_seconds is not None else self.wait
        self.quotas = quotas
        self.flight = SingleFlight(store, wait=self.wait)
        self.metrics = metrics or Metrics()

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
        slots = [self.store.invocation(tenant, ref, sid) for ref, _ in items]
        if not slots:
            return []
        # One round trip (a GET per key on a cluster), lifetimes extended, counted for the quota.
        texts = await self.store.read(tenant, slots)
        found: list[Summary | None] = [
            None if text is None else Summary(text, sid, cached=True, fallback=False)
            for text in texts
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
                    tenant, slots[index], invocation, summarizer, max_chars
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
        slot = self.store.dialogue(tenant, transcript, sid)
        (text,) = await self.store.read(tenant, [slot])
        if text is not None:
            self.metrics.summary_cache.labels("hit").inc()
            return Summary(text, sid, cached=True, fallback=False)
        self.metrics.summary_cache.labels("miss").inc()
        try:
            text, cached = await self._shared(
                tenant,
                slot,
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
        slot: Slot,
        invocation: Mapping[str, Any],
        summarizer: Summarizer,
        max_chars: int,
    ) -> Summary:
        if invocation.get("isError") and self._guarded(summarizer.name):
            return await self._fallback(invocation, summarizer, max_chars)

        def compute() -> Awaitable[str]:
            return summarizer.summarize(invocation, max_chars)

        try:
            text, cached = await self._shared(tenant, slot, summarizer.name, compute)
        except SummarizerError as exc:
            self._fell_back(summarizer.name, exc)
            return await self._fallback(invocation, summarizer, max_chars)
        return Summary(text, summarizer.id(max_chars), cached=cached, fallback=False)

    async def _shared(
        self, tenant: str, slot: Slot, name: str, compute: Create
    ) -> tuple[str, bool]:
        """(text, made elsewhere) for `slot`, made once (`SingleFlight`) by a call the
        quotas admit. Raises `SummarizerError` when the summarizer failed or was not asked."""
        guarded = self._guarded(name)
        if guarded and self.quotas.breaker(name).state is BreakerState.OPEN:
            raise Skipped("breaker", f"{name} failed repeatedly; not asked during its cool-down")

        async def call() -> str:
            if not guarded:
                return await made(probe=0)
            if not self.quotas.enter(tenant):
                raise Skipped(
                    "tenant-in-flight",
                    f"tenant {tenant!r} has {self.quotas.per_tenant_in_flight} model calls "
                    "under way (TOOLREF_LLM_TENANT_CALLS_IN_FLIGHT)",
                )
            try:
                probe = await self._admit(tenant, name)
                return await made(probe)
            finally:
                self.quotas.leave(tenant)

        async def made(probe: int) -> str:  # the probe number, 0: no probe
            heard = False  # the breaker told of this call; a probe it was not: abandoned
            try:
                async with asyncio.timeout(self.compute_seconds):
                    # A lone surrogate (a model's `"\\ud800"`) would fail the store, leave
                    # the lock held and the request a 500, every time: U+FFFD instead.
                    text = well_formed(await compute())
            except SummarizerBusy as exc:  # the model was not asked: no failure of it
                quiet.warning("summarizer %s not asked for %s: %s", name, slot, exc)
                raise Skipped("model-busy", str(exc)) from exc
            except SummarizerEmpty as exc:
                # The model answered, with no text (an output filter): that summary fails
                # (its failure mark, never kept), and the model answered: it is healthy.
                self._failed(name, guarded=False)
                if guarded:
                    self.quotas.breaker(name).success()
                    heard = True
                log.warning("summarizer %s answered no text for %s: %s", name, slot, exc)
                raise
            except Exception as exc:  # any failure of the summarizer is its failure
                # but its refusal of this input (its slot's failure mark): one tenant's
                # inputs never open the breaker every tenant's summaries share
                heard = guarded and not isinstance(exc, SummarizerRefused)
                self._failed(name, heard)
                failure = exc if isinstance(exc, SummarizerError) else _failure(name, exc)
                log.warning(
                    "summarizer %s failed for %s, using extractive: %s", name, slot, failure
                )
                if failure is exc:
                    raise
                raise failure from exc
            else:
                if guarded:
                    self.quotas.breaker(name).success()
                    heard = True
            finally:
                if probe and not heard:  # not sent, refused or cancelled: the next call probes
                    self.quotas.breaker(name).abandon(probe)
            self.metrics.summarizer_calls.labels(name, "ok").inc()
            return text

        return await self.flight.get_or_create(slot, call)

    async def _admit(self, tenant: str, name: str) -> int:
        """May the model be called now? The tenant's minute quota, then the breaker (whose
        half-open state lets one probe through, so it is asked last). The breaker's probe
        number when this call is its probe (its caller tells the breaker what came of it,
        or abandons it by that number), else 0."""
        if not await self.quotas.take(tenant):
            raise Skipped(
                "tenant-quota",
                f"tenant {tenant!r} started {self.quotas.per_tenant_minute} model calls this "
                "minute (TOOLREF_LLM_CALLS_PER_TENANT_MINUTE)",
            )
        breaker = self.quotas.breaker(name)
        probe = breaker.state is BreakerState.HALF_OPEN
        if not breaker.allow():
            raise Skipped("breaker", f"{name} failed repeatedly; a probe is under way")
        return breaker.probe if probe else 0

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


def _failure(name: str, exc: Exception) -> SummarizerError:
    """A summarizer's exception other than `SummarizerError`, as one (logged with its
    traceback unless it is the timeout)."""
    if not isinstance(exc, TimeoutError):
        log.exception("summarizer %s raised", name)
    return SummarizerError(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
