"""The steps of a hydrate, over a request already read (`Ask`), from HTTP
(`toolref_server.routes.hydration`) or handed over in process (the gateway's registry port):

    read the conversation -> resolve -> register -> fill -> (summarize)

Each step is linear in the request's messages; the work on a large body runs in a worker
thread (`Workers`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from toolref.asgi.budget import Account, charge
from toolref.formats import source
from toolref.formats.source import Payload
from toolref.wire.canonical import Ref
from toolref.wire.errors import DecompressedTooLargeError, ValidationError
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
from toolref_server.storage.record import Record


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
    registration = await register(services, ask.tenant, conversation)
    filled = await fill(services, ask, conversation, held, registration)
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


async def fill(
    services: Hydrating,
    ask: Ask,
    conversation: Conversation,
    held: dict[str, Record],
    registration: Registration,
) -> Filled:
    """Every marker filled with the payload text held for its ref: stored bytes, never
    written again. What the filled conversation will take is bounded first: at most the
    inflated limit (what the client could have sent in full), and charged to the request's
    share of the budget of bodies in flight, since a small body of markers may fill to many
    times its size."""
    payloads = {ref: rec.payload for ref, rec in held.items()}
    added = filled_growth(conversation, payloads)
    _bound(services, ask, conversation.size + added, added)
    texts = await services.workers.run(
        conversation.size + added, source.fill, conversation.texts, conversation.scan, payloads
    )
    return Filled(conversation, held, registration, texts)


def filled_growth(conversation: Conversation, payloads: Mapping[str, Payload]) -> int:
    """At most how many bytes filling the markers adds: each marker's payload, as often as
    a marker names it (a body of 200 markers to one 100 KB record fills to 20 MB)."""
    added = 0
    for pair in conversation.scan.marked:
        payload = payloads.get(pair.ref) if pair.ref is not None else None
        if payload is not None:
            added += len(payload.args) + len(payload.result)
    return added


def _bound(services: Hydrating, ask: Ask, size: int, added: int) -> None:
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
    services: Hydrating, ask: Ask, filled: Filled, summarizer: str
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
