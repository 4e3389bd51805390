"""Context editing at the gateway (docs/context-editing.md): a request's old tool results
replaced by their summaries before it is sent upstream, for every format the gateway reads.

A pipeline over the body, decoded once: its facts (`toolref_server.context.facts`,
remembered from the turn before), the request left to the client when it manages its own
context, the plan (`toolref_server.context.batches`: a pure function of the conversation, so
every replica and every turn choose the same), what stands in for each result replaced
(`toolref_server.gateway.stand_ins`: pinned in the store, which decides on every request;
made of its summary from the summary cache, one per result, ever), and the body rewritten
(`toolref_server.context.replacing`): every byte but the replaced results' as the client
sent it. The CPU work runs off the loop when the body is large (`Workers`).

What it did travels back in `Toolref-Context` and `Toolref-Savings` (`Outcome.headers`),
and is counted per tenant and upstream (`Metrics.context_*`, the savings page).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from starlette.types import Message, Send

from toolref.asgi.hops import decoded
from toolref.asgi.workers import Workers
from toolref.kit.quieted import Quieted
from toolref.wire.endpoints import Endpoint
from toolref.wire.errors import ToolrefError
from toolref.wire.headers import CONTEXT_HEADER
from toolref_server.context import facts as facts_module
from toolref_server.context.batches import BYTES_PER_TOKEN, Cleared, Plan, plan
from toolref_server.context.client import clears_tool_results
from toolref_server.context.facts import Facts
from toolref_server.context.provider_usage import Usage, UsageReader
from toolref_server.context.replacing import rewritten
from toolref_server.gateway.stand_ins import sid_of, stand_ins
from toolref_server.metrics import Metrics
from toolref_server.registry.summary_cache import SummaryCache
from toolref_server.settings.context import Policy
from toolref_server.usage import Counts

log = logging.getLogger(__name__)
quiet = Quieted(log)  # a store down fails every request's read: said once a minute
_CONTEXT: Final = CONTEXT_HEADER.lower().encode()


@dataclass(frozen=True, slots=True)
class Outcome:
    """What context editing did to one request: its plan, and the estimated tokens of the
    body as sent and saved (measured on the bytes, not the plan's estimate)."""

    plan: Plan
    tokens: int
    saved: int

    def header(self) -> tuple[bytes, bytes]:
        """`Toolref-Context` (toolref.wire.headers)."""
        value = (
            f"cleared={len(self.plan.cleared)}; batches={self.plan.batches}; "
            f"rewrote={int(self.plan.rewrote)}; tokens={self.tokens}; saved={self.saved}"
        )
        return _CONTEXT, value.encode()


@dataclass(slots=True)
class ContextStep:
    """One request's context editing, as a step of the gateway's pipeline: called with the
    body as it goes upstream, it answers the body edited; `told` is what the answer's head
    says of it."""

    tenant: str
    upstream: str
    llm: Endpoint
    policy: Policy
    summaries: SummaryCache
    workers: Workers
    metrics: Metrics
    max_containers: int = facts_module.MAX_CONTAINERS  # TOOLREF_MAX_CONTAINERS
    outcome: Outcome | None = None

    async def __call__(self, body: bytes) -> bytes:
        edited, self.outcome = await edit_context(
            body,
            tenant=self.tenant,
            upstream=self.upstream,
            llm=self.llm,
            policy=self.policy,
            summaries=self.summaries,
            workers=self.workers,
            metrics=self.metrics,
            max_containers=self.max_containers,
        )
        return edited

    @property
    def saved(self) -> int | None:
        """Estimated tokens saved (None: the body passed as it was)."""
        return None if self.outcome is None else self.outcome.saved

    def watched(self, send: Send) -> Send:
        """`send`, reading the provider's own count of input tokens from the answer as it
        passes (`toolref_server.context.provider_usage`), counted once the answer ends when the
        request was edited (`Metrics.context_provider_tokens`)."""
        reader: UsageReader | None = None

        async def reading(message: Message) -> None:
            nonlocal reader
            if message["type"] == "http.response.start":
                head = dict(decoded(message.get("headers", [])))
                encoding = head.get("content-encoding", "identity").strip().lower()
                reader = UsageReader(head.get("content-type", ""), encoded=encoding != "identity")
            elif message["type"] == "http.response.body" and reader is not None:
                reader.feed(message.get("body", b""))
                if not message.get("more_body", False):
                    self._count(reader.usage)
                    reader = None
            await send(message)

        return reading

    def _count(self, usage: Usage | None) -> None:
        if usage is None or self.outcome is None:
            return
        counted = self.metrics.context_provider_tokens
        for kind, value in (
            ("input", usage.input),
            ("cache_read", usage.cache_read),
            ("cache_write", usage.cache_write),
        ):
            if value:
                counted.labels(kind, self.tenant, self.upstream).inc(value)

    def told(self) -> list[tuple[bytes, bytes]]:
        return [] if self.outcome is None else [self.outcome.header()]


async def edit_context(
    body: bytes,
    *,
    tenant: str,
    upstream: str,
    llm: Endpoint,
    policy: Policy,
    summaries: SummaryCache,
    workers: Workers,
    metrics: Metrics,
    max_containers: int = facts_module.MAX_CONTAINERS,
) -> tuple[bytes, Outcome | None]:
    """`body` with its old tool results replaced as `policy` says, and what was done (None:
    the body passes as it is: not a JSON object of `llm`'s format, one too deep or odd to
    read, or of more than `max_containers` arrays and objects, the client manages its own
    context, the summaries could not be had, or a fault of this step, logged with its
    trace: context editing never fails a request).
    O(the body) at C speed plus O(its new messages) in Python."""
    try:
        read = await workers.run(
            workers.weigh(body), _read, body, tenant, llm, policy, max_containers
        )
    except Exception:  # a fault of this optional step: the request goes on as it came
        log.exception("context editing failed on a request; it was sent as it came")
        read = "failed"
    if isinstance(read, str):
        metrics.context_requests.labels(read).inc()
        return body, None
    found, chosen = read
    if not chosen.cleared:
        metrics.context_requests.labels("below").inc()
        tokens = len(body) // BYTES_PER_TOKEN
        metrics.gateway_usage(tenant, upstream, Counts(tokens=tokens))
        return body, Outcome(chosen, tokens, 0)
    changed: set[Cleared] = set()
    try:
        await stand_ins(
            found,
            chosen.cleared,
            tenant=tenant,
            policy=policy,
            summaries=summaries,
            workers=workers,
            changed=changed,
        )
    except Exception as exc:  # the store, or a summarizer: the new batch waits
        if not isinstance(exc, ToolrefError | OSError):
            log.exception("context editing: the stand-ins of a request failed")
        quiet.warning(
            "context editing: the stand-ins held here are sent, a new batch waits: the "
            "store or the summarizer failed (%s)",
            exc,
        )
        # The stand-ins already held still stand (`_replaced`): the batches before stay
        # replaced, so the provider's cache is not written twice; no rewrite is said.
        chosen = dataclasses.replace(chosen, rewrote=False)
    try:
        kept = _replaced(found, chosen.cleared, policy)
        # The cache is written again where a result of a batch made at this turn is
        # replaced, and where a stand-in is sent in other bytes than this process held:
        # made at this request (none was pinned, so no turn before sent it: its batch held
        # back, the store down or unable to keep it; or the store lost it since, a flush or
        # an eviction, and it is made again, in other bytes where a model summarizes), or
        # another replica's pinned over the one held here; or where one held here is sent
        # as it came, the store unable to keep it again (`toolref_server.gateway.stand_ins`).
        rewrote = chosen.rewrote and not set(chosen.cleared[chosen.newest :]).isdisjoint(kept)
        rewrote = rewrote or any(c in kept or _dropped(found, c, policy) for c in changed)
        chosen = dataclasses.replace(chosen, cleared=kept, rewrote=rewrote)
        out = await workers.run(workers.weigh(body), _rewritten, found, chosen.cleared, policy)
    except Exception:  # as above
        log.exception("context editing failed on a request; it was sent as it came")
        metrics.context_requests.labels("failed").inc()
        return body, None
    tokens = len(out) // BYTES_PER_TOKEN
    saved = max(0, len(body) - len(out)) // BYTES_PER_TOKEN
    metrics.context_requests.labels("rewrote" if chosen.rewrote else "edited").inc()
    metrics.gateway_usage(tenant, upstream, Counts(tokens=tokens, tokens_saved=saved))
    metrics.context_cost_saved.labels(tenant, upstream).inc(saved * policy.price_per_mtok / 1e6)
    return out, Outcome(chosen, tokens, saved)


def _read(
    body: bytes, tenant: str, llm: Endpoint, policy: Policy, max_containers: int
) -> tuple[Facts, Plan] | str:
    """The body's facts and plan, in one piece of work (off the loop when large); or why it
    passes as it came: "unread" (not a JSON object of the endpoint's format, nested deeper
    than a parse goes, or of more messages, arrays and objects than a parse may hold),
    "client" (it clears its own tool results)."""
    try:
        found = facts_module.facts_of(
            body,
            tenant,
            llm.format,
            llm.messages_key,
            policy.max_messages,
            max_containers=max_containers,
        )
        if found is not None and policy.respect_client and clears_tool_results(found):
            return "client"
    except (ValueError, RecursionError):
        found = None
    if found is None:
        return "unread"
    # O(the messages since the turn before, when it was seen; else of all of them)
    chosen = plan(found.messages, policy, found.replay)
    found.replay = chosen.checkpoint
    return found, chosen


def _replaced(found: Facts, cleared: Sequence[Cleared], policy: Policy) -> tuple[Cleared, ...]:
    """The results of `cleared` the request replaces: those a stand-in is held for (the
    rest could not be made, or their invocation read) that is shorter than the result
    (the plan estimates a stand-in's bytes; one longer, a summary of non-ASCII text or a
    long call shown, would send more than the client did). Stand-ins are pinned, so every
    replica and turn keeps the same. O(cleared and their stand-ins' bytes)."""
    sid = sid_of(policy)
    kept = []
    for item in cleared:
        result = found.messages[item.message].results[item.result]
        held = result.stand_in.get(sid)
        if held is not None and len(held.encode("utf-8")) < result.size:
            kept.append(item)
    return tuple(kept)


def _dropped(found: Facts, item: Cleared, policy: Policy) -> bool:
    return sid_of(policy) not in found.messages[item.message].results[item.result].stand_in


def _rewritten(found: Facts, cleared: Sequence[Cleared], policy: Policy) -> bytes:
    replaced: dict[int, list[tuple[int, str]]] = {}
    sid = sid_of(policy)
    for item in cleared:
        held = found.messages[item.message].results[item.result].stand_in.get(sid)
        if held is not None:
            replaced.setdefault(item.message, []).append((item.result, held))
    return rewritten(found, replaced)
