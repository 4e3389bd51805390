"""The steps of a hydrate, over a request already read (`Ask`), from HTTP
(`toolref_server.routes.hydration`) or handed over in process (the gateway's registry port):

    continue the history -> resolve -> register -> fill -> (summarize) -> keep

Continuing a history costs time in the new messages when its node allows (see
`continuation`): the node alone gives the chain head and where format detection and
pairing stand, so only the new messages are scanned, filled and chained. The history
itself is then needed only for an answer holding the whole conversation, and comes from
this process's `HistoryCache` when it holds it; otherwise it is read whole (one batched
read) and the whole conversation goes through the same steps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from toolref.formats import source
from toolref.formats.source import Payload
from toolref.receiving.budget import Account, charge
from toolref.wire.canonical import Ref
from toolref.wire.errors import DecompressedTooLargeError, ValidationError
from toolref.wire.models import HydrateRequest
from toolref_server import documents
from toolref_server.registry import compaction, continuation
from toolref_server.registry.continuation import Continuation, Tail
from toolref_server.registry.conversation import (
    Conversation,
    Registration,
    conversation_of_decoded,
    held_records,
    joined_size,
    missing_refs,
    references_of,
    register,
    resolve_markers,
)
from toolref_server.services import Services
from toolref_server.storage.history_cache import Hydrated
from toolref_server.storage.record import Record


@dataclass(frozen=True, slots=True)
class Ask:
    """A hydrate request, read: the body decoded once."""

    tenant: str
    protocol: int
    body: HydrateRequest
    decoded: documents.Decoded
    keep: bool  # keep the conversation as a history
    ref: str | None  # the history it continues
    loaded: Continuation | None  # that history, when its dictionary needed it whole
    account: Account | None = None  # the request's share of the budget of bodies in flight

    @property
    def new_only(self) -> bool:
        return self.body.return_messages == "new"


@dataclass(frozen=True, slots=True)
class Work:
    """What the steps work on: the whole conversation (after `before`, a history read
    whole, if any), or only the request's messages after a history known by its node
    (`tail`). The request's own messages are the last `requested`."""

    conversation: Conversation
    requested: int
    before: Continuation | None = None
    tail: Tail | None = None


@dataclass(frozen=True, slots=True)
class Filled:
    """The conversation worked on, in full; `ahead`: the history before it, in full, when
    only the tail was worked on and this process holds that history."""

    work: Work
    held: dict[str, Record]
    registration: Registration
    texts: list[str]
    ahead: Hydrated | None

    @property
    def conversation(self) -> Conversation:
        return self.work.conversation


@dataclass(frozen=True, slots=True)
class Done:
    """What the steps made of a request: the conversation filled, the texts to answer
    (summarized in summary mode), summary mode's figures, and what was kept."""

    filled: Filled
    texts: list[str]
    summary: dict[str, int]
    kept: Kept

    def references(self) -> dict[str, str]:
        """The ref of every tool call of the conversation worked on."""
        return references_of(self.filled.conversation, self.filled.registration.refs)


async def run(services: Services, ask: Ask) -> Done:
    """The steps after `read`, for a request read from HTTP or handed over in process
    (`toolref_server.gateway.inprocess`)."""
    summarizer = _summarizer(services, ask.body)
    work = await continue_history(services, ask)
    held = await resolve(services, ask.tenant, work)
    registration = await register(services, ask.tenant, work.conversation)
    filled = await fill(services, ask, work, held, registration)
    texts, summary = filled.texts, dict[str, int]()
    if ask.body.mode == "summary":
        texts, summary = await summarize(services, ask, filled, summarizer)
    kept = await keep(services, ask, filled) if ask.keep else Kept(None)
    return Done(filled, texts, summary, kept)


def _summarizer(services: Services, body: HydrateRequest) -> str:
    """The summarizer summary mode would use, refused (422) before any work if unknown."""
    name = body.summarizer if body.summarizer is not None else services.settings.summarizer
    services.summaries.summarizer(name)
    return name


async def continue_history(services: Services, ask: Ask) -> Work:
    """The conversation to work on. A continuation takes the tail path when the node
    vouches for it and the answer does not need the history (or the cache holds it); any
    doubt (an older node, a call the new messages answer, a refresh due, summary mode)
    takes the whole path."""
    limit = services.settings.max_messages
    decoded, named = ask.decoded, ask.body.format
    if ask.ref is None:
        conversation = await services.workers.run(
            decoded.size, conversation_of_decoded, limit, decoded, named
        )
        return Work(conversation, len(conversation.messages))
    if ask.loaded is None and ask.body.mode == "full":
        tail = await continuation.tail(services, ask.tenant, ask.ref, ask.new_only)
        if tail is not None:
            found = await services.workers.run(
                decoded.size, continuation.tail_conversation, limit, decoded, named, tail
            )
            if found is not None:
                return Work(found, len(found.messages), tail=tail)
    before = ask.loaded or await continuation.load(services, ask.tenant, ask.ref)
    # A small turn may continue a large history: what reading it whole holds (its texts,
    # chain form and encoding) is the request's to pay for.
    charge(ask.account, 2 * before.size)
    conversation = await services.workers.run(
        decoded.size + before.size,
        continuation.whole_conversation,
        limit,
        decoded,
        named,
        before,
    )
    return Work(conversation, len(conversation.messages) - len(before.form), before=before)


async def resolve(services: Services, tenant: str, work: Work) -> dict[str, Record]:
    """The record of every ref the markers name (a history read whole brings its own), or
    409 listing every one that is not held: `missing-history` when a marker of the history
    is among them (the client sent a history ref, not those markers, so it can only resend
    the whole conversation), else `missing-refs`."""
    before = work.before
    known = before.held if before is not None else {}
    wanted = [r for r in work.conversation.scan.refs if r not in known]
    if before is None or not wanted:
        held = {**known, **await resolve_markers(services, tenant, wanted)}
    else:
        # The history read whole in the conversation's format: a marker of it that its
        # stored format did not show (an older node) is the history's, not the client's.
        stored = len(before.form)
        ahead = {
            pair.ref
            for pair in work.conversation.scan.marked
            if any(site.message < stored for site, _ in pair.sides)
        }
        found, missing = await held_records(services, tenant, wanted)
        lost = next((ref for ref in missing if ref in ahead), None)
        if lost is not None:
            raise continuation.lost_ref(before.ref, lost)
        missing_refs(missing)
        held = {**known, **found}
    _check_names(work.conversation, held)
    return held


def _check_names(conversation: Conversation, held: dict[str, Record]) -> None:
    for pair in conversation.scan.marked:
        ref = pair.ref
        stored = held[ref].name if ref is not None else None
        if pair.name and stored is not None and pair.name != stored:
            raise ValidationError(
                f"tool call {pair.key!r} names tool {pair.name!r} but its ref {ref} is an "
                f"invocation of {stored!r}; send the ref of this call's own invocation",
            )


async def fill(
    services: Services, ask: Ask, work: Work, held: dict[str, Record], registration: Registration
) -> Filled:
    """Every marker filled with the payload text held for its ref: stored bytes, never
    written again. What the filled conversation (and the history held before it, when the
    answer joins it) will take is bounded first: at most the inflated limit (what the
    client could have sent in full), and charged to the request's share of the budget of
    bodies in flight, since a small body of markers may fill to many times its size."""
    conversation = work.conversation
    payloads = {ref: rec.payload for ref, rec in held.items()}
    ahead = work.tail.hydrated if work.tail is not None else None
    added = _filled_growth(conversation, payloads)
    before = ahead.size if ahead is not None and not ask.new_only else 0
    _bound(services, ask, conversation.size + added + before, added + before)
    texts = await services.workers.run(
        conversation.size + added, source.fill, conversation.texts, conversation.scan, payloads
    )
    return Filled(work, held, registration, texts, ahead)


def _filled_growth(conversation: Conversation, payloads: dict[str, Payload]) -> int:
    """At most how many bytes filling the markers adds: each marker's payload, as often as
    a marker names it (a body of 200 markers to one 100 KB record fills to 20 MB)."""
    added = 0
    for pair in conversation.scan.marked:
        payload = payloads.get(pair.ref) if pair.ref is not None else None
        if payload is not None:
            added += len(payload.args) + len(payload.result)
    return added


def _bound(services: Services, ask: Ask, size: int, added: int) -> None:
    """Refuse an answer of more than the inflated limit (413), and charge what filling and
    joining it add to the request's account: the filled texts, and the answer joined from
    them (twice `added`), before they are made."""
    limit = services.limits.max_decompressed_bytes
    if size > limit:
        raise DecompressedTooLargeError(
            f"the conversation hydrates to at least {size} bytes, over the limit of {limit} "
            "(TOOLREF_MAX_DECOMPRESSED_BYTES, the most the service takes a body in full); "
            "send fewer messages, or start a new conversation from a summary",
            limit=limit,
        )
    charge(ask.account, 2 * added)


async def summarize(
    services: Services, ask: Ask, filled: Filled, summarizer: str
) -> tuple[list[str], dict[str, int]]:
    """Results older than the last `keepRecent` replaced by their summary placeholders in
    the full texts (every other byte as sent); with `shadow`, the full texts and the
    figures. Summary mode always works on the whole conversation."""
    body, conversation = ask.body, filled.conversation
    candidates = compaction.older_results(
        conversation.scan,
        references_of(conversation, filled.registration.refs),
        body.keep_recent,
        body.exclude_tools,
        {ref: rec.invocation for ref, rec in filled.held.items()},
    )
    max_chars = body.max_chars or services.settings.summary_max_chars
    summaries = await services.summaries.many(
        ask.tenant, [(Ref(c.ref), c.invocation) for c in candidates], summarizer, max_chars
    )
    chosen = compaction.replacements(conversation.fmt, candidates, [s.text for s in summaries])
    condensed = compaction.apply_text(filled.texts, conversation.scan, chosen)
    figures = {
        "summarized": len(chosen),
        "summaryCacheHits": sum(s.cached for s in summaries),
        "hydratedBytes": joined_size(condensed),
    }
    return (filled.texts if body.shadow else condensed), figures


@dataclass(frozen=True, slots=True)
class Kept:
    """The history kept (its ref), and the checkpoint kept with it, if asked and new."""

    head: str | None
    checkpoint: str | None = None
    checkpoint_length: int = 0


async def keep(services: Services, ask: Ask, filled: Filled) -> Kept:
    """Store the conversation as a history (chain form, as written) and return its ref;
    the history in full goes to the cache for the next turn. Messages it shares with the
    history it continued are stored already. With `checkpoint`, its checkpoint too."""
    work = filled.work
    conversation = work.conversation
    if work.tail is not None and not conversation.messages:
        return Kept(work.tail.ref)  # nothing new: the same history
    if not conversation.messages:
        return Kept(None)
    chained = await services.workers.run(
        conversation.size, continuation.chained, conversation, filled.registration.refs, work.before
    )
    if work.tail is not None:
        ref = await services.histories.extend(
            ask.tenant,
            work.tail.node,
            chained.texts,
            chained.encoded,
            format=conversation.fmt.name,
            detection=chained.detection,
            pending=chained.pending,
        )
    else:
        ref = await services.histories.save(
            ask.tenant,
            conversation.fmt.name,
            chained.texts,
            chained.encoded,
            chained.start,
            detection=chained.detection,
            pending=chained.pending,
        )
    outcome = "kept" if ask.ref is None else "continued"
    services.metrics.histories.labels(outcome=outcome).inc()
    whole = _remember(services, ask, filled, ref)
    if not ask.body.checkpoint:
        return Kept(ref)
    before = work.tail.node if work.tail is not None else None
    node = await services.workers.run(
        conversation.size,
        continuation.checkpoint_node,
        conversation,
        chained,
        before,
        int(time.time()),
    )
    if node is None:
        return Kept(ref)
    checkpoint = await services.histories.checkpoint(ask.tenant, node)
    services.metrics.histories.labels(outcome="checkpoint").inc()
    length = len(node.ids)
    if whole is not None:  # the checkpoint is the head's prefix: held too, for its next turn
        prefix = whole.texts[:length]
        services.history_cache.put(ask.tenant, checkpoint, Hydrated.of(prefix, whole.references))
        services.history_cache.pair(ask.tenant, ref, checkpoint)
    return Kept(ref, checkpoint, length)


def _remember(services: Services, ask: Ask, filled: Filled, ref: str) -> Hydrated | None:
    """The history just kept, in full, for this process's next turn of it (None when the
    history before the tail is not held here)."""
    references = references_of(filled.conversation, filled.registration.refs)
    ahead = filled.ahead
    if filled.work.tail is not None and ahead is None:
        return None
    texts = tuple(filled.texts) if ahead is None else (*ahead.texts, *filled.texts)
    if ahead is not None:
        references = {**ahead.references, **references}
    whole = Hydrated.of(texts, references)
    services.history_cache.put(ask.tenant, ref, whole, ask.ref)
    return whole
