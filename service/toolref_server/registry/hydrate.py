"""The steps of a hydrate, over a request already read (`Ask`), from HTTP
(`toolref_server.routes.hydration`) or handed over in process (the gateway's registry port):

    read the conversation -> resolve -> bound -> register -> fill -> (summarize)

Bad input changes nothing stored: every check that may refuse the request (the format, the
markers, every ref held, what filling would take) runs before anything is registered.
Registering is a side effect of a read: at the tenant's stored-bytes quota it is skipped
(`Registration.skipped`), and the messages are answered all the same.

Each step is linear in the request's messages; the work on a large body runs in a worker
thread (`Workers`), summary mode's included.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from toolref.asgi.budget import Account, charge
from toolref.formats import source
from toolref.formats.source import Payload
from toolref.wire.canonical import Ref
from toolref.wire.errors import DecompressedTooLargeError, QuotaExceededError, ValidationError
from toolref.wire.models import HydrateRequest
from toolref_server import documents
from toolref_server.registry import compaction
from toolref_server.registry.conversation import (
    Conversation,
    Records,
    Registration,
    conversation_of_decoded,
    joined_size,
    references_of,
    register,
    resolve_markers,
)
from toolref_server.registry.summary_cache import SummaryCache
from toolref_server.storage.quotas import STORED
from toolref_server.storage.record import Record

log = logging.getLogger(__name__)


class Hydrating(Records, Protocol):
    """What the hydrate steps use besides the records' (the service's `Services` holds
    them): the body limits and the summary cache."""

    @property
    def limits(self) -> documents.BodyLimits: ...

    @property
    def summaries(self) -> SummaryCache: ...


@dataclass(frozen=True, slots=True)
class Ask:
    """A hydrate request, read: the body decoded once."""

    tenant: str
    protocol: int
    body: HydrateRequest
    decoded: documents.Decoded
    account: Account | None = None  # the request's share of the budget of bodies in flight


@dataclass(frozen=True, slots=True)
class Filled:
    """The conversation, every marker filled."""

    conversation: Conversation
    held: dict[str, Record]
    registration: Registration
    texts: list[str]
    size: int  # at most the characters of `texts`


@dataclass(frozen=True, slots=True)
class Done:
    """What the steps made of a request: the conversation filled, the texts to answer
    (summarized in summary mode), and summary mode's figures."""

    filled: Filled
    texts: list[str]
    summary: dict[str, int]

    def references(self) -> dict[str, str]:
        """The ref of every tool call of the conversation worked on."""
        return references_of(self.filled.conversation, self.filled.registration.refs)


async def run(services: Hydrating, ask: Ask) -> Done:
    """The steps after `read`, for a request read from HTTP or handed over in process
    (`toolref_server.gateway.inprocess`)."""
    summarizer = _summarizer(services, ask.body)
    limit, decoded = services.settings.max_messages, ask.decoded
    conversation = await services.workers.run(
        decoded.size, conversation_of_decoded, limit, decoded, ask.body.format
    )
    held = await resolve(services, ask.tenant, conversation)
    payloads = {ref: rec.payload for ref, rec in held.items()}
    size = bound(services, ask, conversation, payloads)  # before anything is registered
    registration = await register_read(services, ask.tenant, conversation)
    work = services.workers.weigh(*conversation.texts) + size - conversation.size  # + the fill
    texts = await services.workers.run(
        work, source.fill, conversation.texts, conversation.scan, payloads
    )
    filled = Filled(conversation, held, registration, texts, size)
    texts, summary = filled.texts, dict[str, int]()
    if ask.body.mode == "summary":
        texts, summary = await summarize(services, ask, filled, summarizer)
    return Done(filled, texts, summary)


def _summarizer(services: Hydrating, body: HydrateRequest) -> str:
    """The summarizer summary mode would use, refused (422) before any work if unknown."""
    name = body.summarizer if body.summarizer is not None else services.settings.summarizer
    services.summaries.summarizer(name)
    return name


async def resolve(
    services: Hydrating, tenant: str, conversation: Conversation
) -> dict[str, Record]:
    """The record of every ref the markers name, or 409 `missing-refs` listing every one
    that is not held."""
    held = await resolve_markers(services, tenant, conversation.scan.refs)
    _check_names(conversation, held)
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


def bound(
    services: Hydrating, ask: Ask, conversation: Conversation, payloads: Mapping[str, Payload]
) -> int:
    """What the filled conversation will take, at most, bounded before it is made (and
    before anything is registered): an answer of more than the inflated limit (what the
    client could have sent in full) is refused (413), and what filling and joining it add
    (the filled texts, and the answer joined from them: twice the growth) is charged to the
    request's share of the budget of bodies in flight, since a small body of markers may
    fill to many times its size."""
    added = filled_growth(conversation, payloads)
    size = conversation.size + added
    limit = services.limits.max_decompressed_bytes
    if size > limit:
        raise DecompressedTooLargeError(
            f"the conversation hydrates to at least {size} bytes, over the limit of {limit} "
            "(TOOLREF_MAX_DECOMPRESSED_BYTES, the most the service takes a body in full); "
            "send fewer messages, or start a new conversation from a summary",
            limit=limit,
        )
    charge(ask.account, 2 * added)
    return size


async def register_read(
    services: Hydrating, tenant: str, conversation: Conversation
) -> Registration:
    """`register` the full payloads of the conversation, as a read does: at the tenant's
    stored-bytes quota nothing is registered (`skipped`), and the hydrate is answered all
    the same; its calls sent in full get no ref, so the client keeps sending them in full."""
    try:
        return await register(services, tenant, conversation)
    except QuotaExceededError as exc:
        if exc.extra.get("quota") != STORED:
            raise
        log.info("hydrate for tenant %r registered nothing: %s", tenant, exc.detail)
        return Registration(refs={}, new=0, hits=0, skipped=STORED)


def filled_growth(conversation: Conversation, payloads: Mapping[str, Payload]) -> int:
    """At most how many bytes filling the markers adds: each marker's payload, as often as
    a marker names it (a body of 200 markers to one 100 KB record fills to 20 MB)."""
    added = 0
    for pair in conversation.scan.marked:
        payload = payloads.get(pair.ref) if pair.ref is not None else None
        if payload is not None:
            added += len(payload.args) + len(payload.result)
    return added


async def summarize(
    services: Hydrating, ask: Ask, filled: Filled, summarizer: str
) -> tuple[list[str], dict[str, int]]:
    """Results older than the last `keepRecent` replaced by their summary placeholders in
    the full texts (every other byte as sent); with `shadow`, the full texts and the
    figures. Summary mode always works on the whole conversation; its own work (which
    results, their placeholders, the texts with them) runs where the fill did."""
    body = ask.body
    work = services.workers.weigh(*filled.texts)  # their objects and arrays too
    candidates = await services.workers.run(work, _older, filled, body)
    max_chars = body.max_chars or services.settings.summary_max_chars
    summaries = await services.summaries.many(
        ask.tenant, [(Ref(c.ref), c.invocation) for c in candidates], summarizer, max_chars
    )
    texts = [s.text for s in summaries]
    condensed, replaced, size = await services.workers.run(
        work, _condensed, filled, candidates, texts
    )
    figures = {
        "summarized": replaced,
        "summaryCacheHits": sum(s.cached for s in summaries),
        "hydratedBytes": size,
    }
    return (filled.texts if body.shadow else condensed), figures


def _older(filled: Filled, body: HydrateRequest) -> list[compaction.Candidate]:
    """The results summary mode may replace (their invocations parsed): linear in them."""
    conversation = filled.conversation
    marked: dict[str, Callable[[], dict[str, Any]]] = {
        ref: rec.invocation for ref, rec in filled.held.items()
    }
    return compaction.older_results(
        conversation.scan,
        references_of(conversation, filled.registration.refs),
        body.keep_recent,
        body.exclude_tools,
        marked,
    )


def _condensed(
    filled: Filled, candidates: list[compaction.Candidate], summaries: Sequence[str]
) -> tuple[list[str], int, int]:
    """The filled texts with each placeholder shorter than its result in its place, how
    many, and the bytes of the messages they make: linear in the texts."""
    conversation = filled.conversation
    chosen = compaction.replacements(conversation.fmt, candidates, list(summaries))
    condensed = compaction.apply_text(filled.texts, conversation.scan, chosen)
    return condensed, len(chosen), joined_size(condensed)
