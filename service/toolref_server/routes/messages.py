"""Messages: optimize (payloads -> refs) and hydrate (refs -> payloads) whole conversations.

Each message travels as the text its sender wrote: payloads are cut from that text and
markers filled back into it (`toolref.formats.source`), so everything else in a message,
and every payload, reaches the receiver byte for byte (key order, `1.0`, `-0.0`). The values
parsed with the text decide what to do: format, pairing, refs.

Everything is checked before anything is stored: the format, the markers, and (hydrate)
that every ref is held. A rejected request registers nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from toolref import formats
from toolref.canonical import Ref, canonical_json, invocation_digest
from toolref.encoding import dumps_json
from toolref.errors import (
    BatchTooLargeError,
    MissingRefsError,
    ProtocolRequiredError,
    ValidationError,
)
from toolref.formats import Format, Scan, source
from toolref.history import HISTORY_HEADER, continued_ref, history_header
from toolref.models import FormatName, HandoffRequest, HydrateRequest, OptimizeRequest
from toolref.protocol import PROTOCOL_HEADER, PROTOCOL_REFS
from toolref_server import codec, compaction, record
from toolref_server.record import Record
from toolref_server.routes import context, continuation
from toolref_server.store import NewRecord

Body = TypeVar("Body", OptimizeRequest, HydrateRequest, HandoffRequest)


@dataclass(frozen=True, slots=True)
class Conversation:
    fmt: Format
    messages: list[Any]
    texts: list[str]  # each message as its sender wrote it
    scan: Scan

    @property
    def size(self) -> int:
        """Characters of its text: what the CPU work on it scales with."""
        return sum(map(len, self.texts))


@dataclass(frozen=True, slots=True)
class Registration:
    refs: dict[str, str]  # pair key -> ref, for the pairs now safely held
    new: int
    hits: int


@dataclass(frozen=True, slots=True)
class Hydration:
    """A hydrate request, read: the body decoded once, with the history it continues."""

    tenant: str
    protocol: int
    body: HydrateRequest
    conversation: Conversation
    before: continuation.Continuation | None
    keep: bool


def joined(texts: list[str]) -> bytes:
    """The JSON array of messages given as texts."""
    return ("[" + ",".join(texts) + "]").encode()


async def conversation_of(request: Request, model: type[Body]) -> tuple[Conversation, Body]:
    decoded = await context.document(request)
    limit = context.services(request).settings.max_messages
    workers = context.services(request).workers
    return await workers.run(decoded.size, _conversation, limit, decoded, model, None)


def _check_length(limit: int, count: int, note: str = "") -> None:
    if count > limit:
        raise BatchTooLargeError(
            f"the conversation has {count} messages{note}, over the limit of {limit}; send fewer",
            limit=limit,
        )


async def _register(request: Request, tenant: str, conversation: Conversation) -> Registration:
    """Store the complete invocations, payloads as written; a ref that collides is left
    out (sent in full)."""
    services = context.services(request)
    threshold = services.settings.compress_threshold
    items, refs = await services.workers.run(conversation.size, _records, conversation, threshold)
    outcomes = await services.store.register(tenant, list(items.values()))
    held = {
        str(item.ref)
        for item, outcome in zip(items.values(), outcomes, strict=True)
        if outcome.stored_digest == item.digest
    }
    new = sum(o.new for o in outcomes)
    return Registration(
        refs={key: ref for key, ref in refs.items() if ref in held},
        new=new,
        hits=len(held) - new,
    )


def _records(
    conversation: Conversation, threshold: int
) -> tuple[dict[str, NewRecord], dict[str, str]]:
    """The record of each distinct complete invocation (by ref), and each pair's ref: the
    digests, linear in the payloads."""
    pairs = conversation.scan.complete
    texts = source.payloads(conversation.texts, pairs)
    items: dict[str, NewRecord] = {}
    refs: dict[str, str] = {}
    for pair in pairs:
        invocation = pair.invocation()
        digest = invocation_digest(
            invocation["name"], invocation["args"], invocation["result"], invocation["isError"]
        )
        ref = str(digest.ref)
        refs[pair.key] = ref
        if ref not in items:
            data = record.encode(
                invocation["name"],
                is_error=invocation["isError"],
                payload=texts[pair.key],
                digest=digest.sha256,
                size=digest.size,
                compress_threshold=threshold,
            )
            items[ref] = NewRecord(digest.ref, digest.sha256, data)
    return items, refs


def _references(conversation: Conversation, refs: dict[str, str]) -> dict[str, str]:
    """toolReferences: every call id in the messages whose invocation has a held ref."""
    found = {}
    for pair in conversation.scan.pairs:
        ref = pair.ref or refs.get(pair.key)
        if ref is not None:
            found[pair.key] = ref
    return found


def _answer(
    request: Request,
    conversation: Conversation,
    messages: bytes,
    references: dict[str, str] | None,
    stats: dict[str, int],
    *,
    history: str | None = None,
) -> Response:
    """The answer, its messages spliced in as the JSON text made for them (parsed again only
    for a client that asked for msgpack)."""
    body: dict[str, Any] = {"format": conversation.fmt.name, "messages": None}
    if references is not None:
        body["toolReferences"] = references
    body["optimizationStats"] = stats
    headers = None
    if history is not None:
        body["historyRef"] = history
        headers = {HISTORY_HEADER: history}
    if codec.wants_msgpack(request):
        body["messages"] = json.loads(messages)
        return codec.render(request, body, headers=headers)
    return codec.render(request, body, headers=headers, encoded={"messages": messages})


def _stats(original: int, optimized: int, used: int, new: int, hits: int) -> dict[str, int]:
    return {
        "originalBytes": original,
        "optimizedBytes": optimized,
        "refsUsed": used,
        "newRefs": new,
        "cacheHits": hits,
    }


async def optimize(request: Request) -> Response:
    tenant = context.tenant(request)
    context.require_refs_protocol(request)
    conversation, _ = await conversation_of(request, OptimizeRequest)
    registration = await _register(request, tenant, conversation)
    optimized, _ = await context.services(request).workers.run(
        conversation.size, source.replace, conversation.texts, conversation.scan, registration.refs
    )
    used = dict.fromkeys([*conversation.scan.refs, *registration.refs.values()])
    answer = joined(optimized)
    stats = _stats(
        len(joined(conversation.texts)),
        len(answer),
        len(used),
        registration.new,
        registration.hits,
    )
    references = _references(conversation, registration.refs)
    return _answer(request, conversation, answer, references, stats)


async def hydrate(request: Request) -> Response:
    """Decode the body once (with the history it continues), resolve the markers, register
    the payloads sent in full, fill, summarize if asked, keep the history, answer."""
    ask = await _read_hydration(request)
    conversation = ask.conversation
    if ask.protocol < PROTOCOL_REFS:
        return _as_sent(request, ask)
    summarizer = _summarizer(request, ask.body)
    held = await _resolve(request, ask)
    registration = await _register(request, ask.tenant, conversation)
    payloads = {ref: rec.payload for ref, rec in held.items()}
    size = conversation.size + sum(len(p.args) + len(p.result) for p in payloads.values())
    full = await context.services(request).workers.run(
        size, source.fill, conversation.texts, conversation.scan, payloads
    )
    references = _references(conversation, registration.refs)
    answer = joined(full)
    stats = _stats(
        len(answer),
        len(joined(conversation.texts)),
        len(conversation.scan.refs),
        registration.new,
        registration.hits + len(held),
    )
    if ask.body.mode == "summary":
        condensed, summary_stats = await _summarized(
            request, ask, full=full, held=held, registration=registration, summarizer=summarizer
        )
        stats.update(summary_stats)
        if not ask.body.shadow:
            answer = condensed
    head = None
    if ask.keep and conversation.messages:
        head = await _keep(request, ask, registration)
    return _answer(request, conversation, answer, references, stats, history=head)


async def _read_hydration(request: Request) -> Hydration:
    """The request's conversation, decoded once: a zstd body sent against a history is
    inflated with that history's dictionary, and a continued history comes first."""
    tenant = context.tenant(request)
    protocol = context.protocol(request)
    keep, continues = history_header(request.headers.get(HISTORY_HEADER))
    before: continuation.Continuation | None = None
    dictionary: context.Dictionary | None = None
    if continues is not None:
        named = continues

        async def rebuild() -> bytes:
            nonlocal before
            before = await continuation.load(request, tenant, named)
            workers = context.services(request).workers
            return await workers.run(sum(map(len, before.texts)), before.dictionary)

        dictionary = (named, rebuild)
    decoded = await context.document(request, dictionary=dictionary)
    member = decoded.value.get("historyRef") if isinstance(decoded.value, dict) else None
    ref = continued_ref(member, continues)
    if ref is not None and protocol < PROTOCOL_REFS:
        raise ProtocolRequiredError(
            f"a history ref needs `{PROTOCOL_HEADER}: {PROTOCOL_REFS}`; protocol 1 sends the "
            "whole conversation"
        )
    if ref is not None and (before is None or before.ref != ref):
        before = await continuation.load(request, tenant, ref)
    limit = context.services(request).settings.max_messages
    size = decoded.size + (sum(map(len, before.texts)) if before is not None else 0)
    conversation, body = await context.services(request).workers.run(
        size, _conversation, limit, decoded, HydrateRequest, before
    )
    keep = (keep and protocol >= PROTOCOL_REFS) or before is not None
    return Hydration(tenant, protocol, body, conversation, before, keep)


def _as_sent(request: Request, ask: Hydration) -> Response:
    """Protocol 1: the messages back as they came, no refs, nothing stored."""
    conversation = ask.conversation
    if conversation.scan.refs or ask.body.mode == "summary":
        what = (
            "toolRef markers"
            if conversation.scan.refs
            else "summary mode (its placeholders name refs)"
        )
        raise ProtocolRequiredError(
            f"the request uses {what}, which needs `{PROTOCOL_HEADER}: {PROTOCOL_REFS}`; "
            "protocol 1 sends and receives full payloads"
        )
    messages = joined(conversation.texts)
    size = len(messages)
    return _answer(request, conversation, messages, None, _stats(size, size, 0, 0, 0))


def _summarizer(request: Request, body: HydrateRequest) -> str:
    """The summarizer summary mode would use, refused (422) before any work if unknown."""
    services = context.services(request)
    name = body.summarizer if body.summarizer is not None else services.settings.summarizer
    services.summaries.summarizer(name)
    return name


async def _resolve(request: Request, ask: Hydration) -> dict[str, Record]:
    """The record of every ref the markers name (a continued history's are loaded), or
    409 listing every one that is not held."""
    known = ask.before.held if ask.before is not None else {}
    wanted = [r for r in ask.conversation.scan.refs if r not in known]
    held = {**known, **await resolve_markers(request, ask.tenant, wanted)}
    _check_names(ask.conversation, held)
    return held


def _conversation(
    limit: int,
    decoded: codec.Decoded,
    model: type[Body],
    before: continuation.Continuation | None,
) -> tuple[Conversation, Body]:
    """The request's conversation; with `before`, that history followed by the request's
    messages (the limit on messages, `limit`, applies to the whole)."""
    value = decoded.value
    messages = value.get("messages") if isinstance(value, dict) else None
    if messages is not None:
        formats.check_messages(messages)
        _check_length(limit, len(messages))
    body = context.validate(model, value)
    texts = decoded.texts
    if texts is None or len(texts) != len(body.messages):
        texts = [dumps_json(message).decode() for message in body.messages]
    if before is None:
        fmt = formats.detect(body.messages, body.format)
        return Conversation(fmt, body.messages, texts, formats.scan(body.messages, fmt)), body
    return _continued(limit, body.messages, texts, body.format, before), body


def _continued(
    limit: int,
    messages: list[Any],
    texts: list[str],
    named: FormatName | None,
    before: continuation.Continuation,
) -> Conversation:
    """The history followed by the new messages, read as one conversation: its format is
    detected over the whole (a history of plain text fits every format, so the one stored
    with it is not binding), and the limit on messages applies to the whole."""
    whole = [*before.form, *messages]
    _check_length(limit, len(whole), f" (history {before.ref} has {len(before.form)})")
    fmt = formats.detect(whole, named)
    return Conversation(fmt, whole, [*before.texts, *texts], formats.scan(whole, fmt))


async def _keep(request: Request, ask: Hydration, registration: Registration) -> str:
    """Store the conversation as a history (chain form, as written) and return its ref.
    Messages it shares with the history it continued are stored already."""
    services = context.services(request)
    conversation = ask.conversation
    texts, encoded, start = await services.workers.run(
        conversation.size, _chain, conversation, registration.refs, ask.before
    )
    ref = await services.histories.save(ask.tenant, conversation.fmt.name, texts, encoded, start)
    outcome = "kept" if ask.before is None else "continued"
    services.metrics.histories.labels(outcome=outcome).inc()
    return ref


def _chain(
    conversation: Conversation, refs: dict[str, str], before: continuation.Continuation | None
) -> tuple[list[str], list[bytes], int]:
    """The conversation in chain form, as written and as canonical JSON, and how many of
    its messages the continued history stored already (their encoding is reused)."""
    form = formats.replace(conversation.messages, conversation.scan, refs)
    texts, _ = source.replace(conversation.texts, conversation.scan, refs)
    start = 0
    if before is not None:
        while start < len(before.form) and form[start] is before.form[start]:
            start += 1
    encoded = [*before.encoded[:start]] if before is not None else []
    encoded.extend(canonical_json(message) for message in form[start:])
    return texts, encoded, start


async def _summarized(
    request: Request,
    ask: Hydration,
    *,
    full: list[str],
    held: dict[str, Record],
    registration: Registration,
    summarizer: str,
) -> tuple[bytes, dict[str, int]]:
    """Results older than the last `keepRecent` replaced by their summary placeholders,
    in the full texts (every other byte as sent)."""
    body, conversation = ask.body, ask.conversation

    candidates = compaction.older_results(
        conversation.scan,
        _references(conversation, registration.refs),
        body.keep_recent,
        body.exclude_tools,
        {ref: rec.invocation for ref, rec in held.items()},
    )
    max_chars = body.max_chars or context.services(request).settings.summary_max_chars
    summaries = await context.services(request).summaries.many(
        ask.tenant, [(Ref(c.ref), c.invocation) for c in candidates], summarizer, max_chars
    )
    chosen = compaction.replacements(conversation.fmt, candidates, [s.text for s in summaries])
    condensed = joined(compaction.apply_text(full, conversation.scan, chosen))
    return condensed, {
        "summarized": len(chosen),
        "summaryCacheHits": sum(s.cached for s in summaries),
        "hydratedBytes": len(condensed),
    }


async def resolve_markers(request: Request, tenant: str, refs: list[str]) -> dict[str, Record]:
    """Records for every ref, or 409 listing all the refs that are not held."""
    held, missing = await context.held(request, tenant, refs)
    if missing:
        raise MissingRefsError(
            f"{len(missing)} ref(s) in the messages are not held (expired, evicted, or never "
            "registered for this API key); resend those invocations in full",
            missing,
        )
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


routes = [
    Route("/v1/messages:optimize", optimize, methods=["POST"]),
    Route("/v1/messages:hydrate", hydrate, methods=["POST"]),
]
