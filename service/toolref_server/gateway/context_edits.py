"""Context editing at the gateway (docs/context-editing.md): a request's old tool results
replaced by their summaries before it is sent upstream, for every format the gateway reads.

A pipeline over the body, decoded once: its facts (`toolref_server.context.facts`,
remembered from the turn before), the request left to the client when it manages its own
context, the plan (`toolref_server.context.batches`: a pure function of the conversation, so
every replica and every turn choose the same), what stands in for each result newly
replaced (its summary from the summary cache: one per result, ever), and the body
rewritten (`toolref_server.context.replacing`): every byte but the replaced results' as the
client sent it. The CPU work runs off the loop when the body is large (`Workers`).

What it did travels back in `Toolref-Context` and `Toolref-Savings` (`Outcome.headers`),
and is counted per tenant and upstream (`Metrics.context_*`, the savings page).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from starlette.types import Message, Send

from toolref import formats
from toolref.asgi.hops import decoded
from toolref.asgi.workers import Workers
from toolref.kit.payload import without_media
from toolref.kit.pending import Pending
from toolref.wire.canonical import Ref, invocation_digest
from toolref.wire.endpoints import Endpoint
from toolref.wire.errors import CanonicalizationError, ToolrefError
from toolref.wire.headers import CONTEXT_HEADER
from toolref_server.context import facts as facts_module
from toolref_server.context.batches import BYTES_PER_TOKEN, Cleared, Plan, plan
from toolref_server.context.client import clears_tool_results
from toolref_server.context.facts import Call, Facts, Result, unmarked
from toolref_server.context.provider_usage import Usage, UsageReader
from toolref_server.context.replacing import PINNED, as_json, escaped, rewritten, stand_in
from toolref_server.metrics import Metrics
from toolref_server.registry.summary_cache import SummaryCache
from toolref_server.settings.context import Policy
from toolref_server.usage import Counts

log = logging.getLogger(__name__)
_CONTEXT: Final = CONTEXT_HEADER.lower().encode()
_MEDIA_NOTE: Final = "cleared"  # what a media block is named with in a summary


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
        read = await workers.run(len(body), _read, body, tenant, llm, policy, max_containers)
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
    made: set[Cleared] = set()
    try:
        made = await _stand_ins(
            found,
            chosen.cleared,
            tenant=tenant,
            policy=policy,
            summaries=summaries,
            workers=workers,
        )
    except Exception as exc:  # the store, or a summarizer: the new batch waits
        if not isinstance(exc, ToolrefError | OSError):
            log.exception("context editing: the summaries of a new batch failed")
        log.warning("context editing: a new batch waits, its summaries failed (%s)", exc)
        # The stand-ins already held still stand (`_replaced`): the batches before stay
        # replaced, so the provider's cache is not written twice; no rewrite is said.
        chosen = dataclasses.replace(chosen, rewrote=False)
    try:
        kept = _replaced(found, chosen.cleared, policy)
        # The cache is written again where a result of a batch made at this turn is
        # replaced, and where a stand-in made at this request is sent: none was pinned, so
        # no turn before sent it (its batch held back: the store was down, or could not keep
        # it), or the store lost it since (a flush, an eviction) and it is made again, in
        # other bytes where a model summarizes (the extractive summary's are the same).
        rewrote = chosen.rewrote and not set(chosen.cleared[chosen.newest :]).isdisjoint(kept)
        rewrote = rewrote or not made.isdisjoint(kept)
        chosen = dataclasses.replace(chosen, cleared=kept, rewrote=rewrote)
        out = await workers.run(len(body), _rewritten, found, chosen.cleared, policy)
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
    sid = _sid(policy)
    kept = []
    for item in cleared:
        result = found.messages[item.message].results[item.result]
        held = result.stand_in.get(sid)
        if held is not None and len(held.encode("utf-8")) < result.size:
            kept.append(item)
    return tuple(kept)


def _rewritten(found: Facts, cleared: Sequence[Cleared], policy: Policy) -> bytes:
    replaced: dict[int, list[tuple[int, str]]] = {}
    sid = _sid(policy)
    for item in cleared:
        held = found.messages[item.message].results[item.result].stand_in.get(sid)
        if held is not None:
            replaced.setdefault(item.message, []).append((item.result, held))
    return rewritten(found, replaced)


def _sid(policy: Policy) -> str:
    return f"{policy.summarizer}:{policy.summary_chars}"


async def _stand_ins(
    found: Facts,
    cleared: Sequence[Cleared],
    *,
    tenant: str,
    policy: Policy,
    summaries: SummaryCache,
    workers: Workers,
) -> set[Cleared]:
    """What stands in for each result of `cleared` that has none yet, kept on its `Result`;
    the results whose stand-in this request made (none was pinned: sent for the first time,
    or again after the store lost it), the rest held in memory or read pinned.
    Each result's stand-in is pinned in the store the first time any replica makes one
    (`SummaryStore.pin`: first writer wins), so every replica, and this one after its memo
    is gone, sends the same bytes for it, even where a summary was the extractive fallback
    of a model that failed. One read of the pinned ones, then the summaries of the rest
    (the summary cache: one per result, ever), then one write. A result whose invocation
    cannot be read is left as it is; so is one whose tool the model could not call again
    (`Invoked.runnable`) that has no stand-in pinned (one pinned before stays)."""
    sid = _sid(policy)
    wanted = []
    for item in cleared:
        result = found.messages[item.message].results[item.result]
        if sid not in result.stand_in and sid not in result.unmade:
            wanted.append(item)
    if not wanted:
        return set()
    # each message parsed once; off the loop when the messages are large
    size = sum(len(found.messages[c.message].text) for c in wanted)
    invocations = await workers.run(size, _invocations, found, wanted)
    if not invocations:
        return set()
    store = summaries.store
    slots = {
        item: store.invocation(tenant, made.ref, PINNED + sid) for item, made in invocations.items()
    }
    pinned = await store.read(tenant, list(slots.values()))
    missing = []
    for item, text in zip(slots, pinned, strict=True):
        result = found.messages[item.message].results[item.result]
        if text is not None:
            result.stand_in[sid] = text
        elif not invocations[item].runnable:
            result.unmade.add(sid)  # the model could not call it again: left as it came
        else:
            missing.append(item)
    if not missing:
        return set()
    items = [(invocations[item].summarized, invocations[item].invocation) for item in missing]
    made = await summaries.many(tenant, items, policy.summarizer, policy.summary_chars)
    texts = []
    for item, summary in zip(missing, made, strict=True):
        result = found.messages[item.message].results[item.result]
        args = invocations[item].invocation["args"]
        shown = args if isinstance(args, str) else as_json(args)
        text = stand_in(item.name, shown, result.size, summary.text)
        # a result returned as text stays text; a format's own takes the format's form
        value = text if result.text is not None else _text_result(found.format, text)
        texts.append(as_json(value))
    kept = await store.pin(tenant, [slots[item] for item in missing], texts)
    # None: not kept (the tenant past its stored-bytes quota). Another replica, or this one
    # once its memo is gone, would make its own, in other bytes where a model summarizes or
    # its summary fell back (the provider's cache broken on each such turn): the result
    # waits, as it came, for a turn that can keep its stand-in.
    for item, text in zip(missing, kept, strict=True):
        if text is not None:
            found.messages[item.message].results[item.result].stand_in[sid] = text
    return set(missing)


def _text_result(format_name: str, text: str) -> Any:
    return formats.get(format_name).text_result(text)  # type: ignore[arg-type]


def _invocations(found: Facts, wanted: Sequence[Cleared]) -> dict[Cleared, Invoked]:
    """The invocation (ref, wire form) of each result of `wanted`: its call paired as the
    SDK pairs them (`toolref.kit.pending.Pending`), both parsed from
    their messages' text. Every result of the format's own takes its call, wanted or not,
    so the pairing is the conversation's alone, the same on every turn; a second result
    for an answered call has none (as an orphan: its args `{}`). Each call's arguments are
    so read for one result at most: O(messages, calls and results) steps, plus each message
    parsed once."""
    unanswered: Pending[Call] = Pending()
    wanted_at = {(c.message, c.result): c for c in wanted}
    out: dict[Cleared, Invoked] = {}
    parsed: dict[int, Any] = {}

    def value_of(index: int) -> Any:
        if index not in parsed:
            parsed[index] = json.loads(found.messages[index].text)
        return parsed[index]

    for index, message in enumerate(found.messages):
        for call in message.calls:
            unanswered.add(call, call.call_id, call.name)
        for at, result in enumerate(message.results):
            paired = (
                unanswered.answered_by(result.call_id, result.name or "")
                if result.text is None
                else None
            )
            item = wanted_at.get((index, at))
            if item is None:
                continue
            try:
                out[item] = _invocation(value_of, item, result, paired)
            except (ValueError, KeyError, IndexError, TypeError, RecursionError, ToolrefError):
                continue  # left as it is: the plan counted it, the bytes stay the client's
    return out


def _invocation(
    value_of: Callable[[int], Any], item: Cleared, result: Result, call: Call | None
) -> Invoked:
    """The invocation of `result` (its call's arguments from its message, `value_of` its
    index; for a result returned as text, the arguments its text names), its ref made of
    its value less its cache marks; the summarizer reads each media block of its content
    named (`[image/png image: cleared]`), not its base64."""
    site = result.site
    value = unmarked(_member(value_of(item.message), site.path, site.result_key))
    args: Any = result.text if result.text is not None else {}
    if call is not None:
        args = _member(value_of(call.message), call.site.path, call.site.args_key)
    error = site.is_error
    try:
        ref = invocation_digest(item.name, args, value, error).ref
    except CanonicalizationError:  # a lone surrogate (`\ud800`): summarized as its escape
        args, value = escaped(args), escaped(value)
        ref = invocation_digest(item.name, args, value, error).ref
    # an image, a document or audio is named, not summarized as its base64 (`_MEDIA_NOTE`);
    # such a summary is kept under what it summarizes: the registry's summaries of `ref`
    # (hydrate's summary mode, GET .../summary) are of the whole result
    shown = without_media(value, _MEDIA_NOTE)
    summarized = ref if shown == value else invocation_digest(item.name, args, shown, error).ref
    invocation = {"name": item.name, "args": args, "result": shown, "isError": error}
    runnable = bool(item.name) and (call is None or call.direct)
    return Invoked(ref, summarized, invocation, runnable)


class Invoked(NamedTuple):
    """A replaced result's invocation: `ref`, its stand-in's (pinned); `summarized`, what
    its summary is kept under (`ref`, or the digest of `invocation` where media blocks were
    named in it); `invocation`, what the summarizer reads; `runnable`: the model can call
    its tool again as the stand-in says (False: its tool unknown, its call not in the
    conversation; or code made the call, a tool code alone may call): no new stand-in is
    made for it, one pinned before stays."""

    ref: Ref
    summarized: Ref
    invocation: dict[str, Any]
    runnable: bool = True


def _member(value: Any, path: Sequence[Any], key: str | None) -> Any:
    for step in path[1:]:
        value = value[step]
    return value[key]
