"""Messages: optimize (payloads -> refs) and hydrate (refs -> payloads) whole conversations.

Everything is checked before anything is stored: the format, the markers, duplicate results,
and (hydrate) that every ref is held. A rejected request registers nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from toolref import formats
from toolref.canonical import Ref, invocation_digest
from toolref.encoding import dumps_json
from toolref.errors import (
    BatchTooLargeError,
    MissingRefsError,
    ProtocolRequiredError,
    ValidationError,
)
from toolref.formats import Format, Pair, Scan
from toolref.history import HISTORY_HEADER, continued_ref, history_header
from toolref.models import FormatName, HandoffRequest, HydrateRequest, OptimizeRequest
from toolref.protocol import PROTOCOL_HEADER, PROTOCOL_REFS
from toolref_server import codec, compaction, record
from toolref_server.routes import context, continuation
from toolref_server.store import NewRecord

Body = TypeVar("Body", OptimizeRequest, HydrateRequest, HandoffRequest)


@dataclass(frozen=True, slots=True)
class Conversation:
    fmt: Format
    messages: list[Any]
    scan: Scan


@dataclass(frozen=True, slots=True)
class Registration:
    refs: dict[str, str]  # pair key -> ref, for the pairs now safely held
    new: int
    hits: int


async def conversation_of(request: Request, model: type[Body]) -> tuple[Conversation, Body]:
    value = await context.body(request, echoed=True)
    return _conversation(request, value, model, None)


def _check_length(request: Request, count: int, note: str = "") -> None:
    limit = context.services(request).settings.max_messages
    if count > limit:
        raise BatchTooLargeError(
            f"the conversation has {count} messages{note}, over the limit of {limit}; send fewer",
            limit=limit,
        )


async def _register(request: Request, tenant: str, pairs: list[Pair]) -> Registration:
    """Store the complete invocations; a ref that collides is left out (sent in full)."""
    threshold = context.services(request).settings.compress_threshold
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
            data = record.encode(invocation, digest.sha256, digest.size, threshold)
            items[ref] = NewRecord(digest.ref, digest.sha256, data)
    outcomes = await context.services(request).store.register(tenant, list(items.values()))
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


def _size(messages: Sequence[Any]) -> int:
    return len(dumps_json(messages))


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
    messages: list[Any],
    references: dict[str, str] | None,
    stats: dict[str, int],
    *,
    encoded: bytes | None = None,
    history: str | None = None,
) -> Response:
    body: dict[str, Any] = {"format": conversation.fmt.name, "messages": messages}
    if references is not None:
        body["toolReferences"] = references
    body["optimizationStats"] = stats
    headers = None
    if history is not None:
        body["historyRef"] = history
        headers = {HISTORY_HEADER: history}
    return codec.render(
        request, body, headers=headers, encoded={"messages": encoded} if encoded else None
    )


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
    registration = await _register(request, tenant, conversation.scan.complete)
    optimized = formats.replace(conversation.messages, conversation.scan, registration.refs)
    used = formats.scan(optimized, conversation.fmt).refs
    stats = _stats(
        _size(conversation.messages),
        _size(optimized),
        len(used),
        registration.new,
        registration.hits,
    )
    return _answer(
        request, conversation, optimized, _references(conversation, registration.refs), stats
    )


async def hydrate(request: Request) -> Response:
    tenant = context.tenant(request)
    keep, continues = history_header(request.headers.get(HISTORY_HEADER))
    before: continuation.Continuation | None = None
    dictionary: context.Dictionary | None = None
    if continues is not None:
        named = continues

        async def rebuild() -> bytes:
            nonlocal before
            before = await continuation.load(request, tenant, named)
            return before.dictionary()

        dictionary = (named, rebuild)
    value = await context.body(request, echoed=True, dictionary=dictionary)
    member = value.get("historyRef") if isinstance(value, dict) else None
    ref = continued_ref(member, continues)
    if ref is not None and context.protocol(request) < PROTOCOL_REFS:
        raise ProtocolRequiredError(
            f"a history ref needs `{PROTOCOL_HEADER}: {PROTOCOL_REFS}`; protocol 1 sends the "
            "whole conversation"
        )
    if ref is not None and (before is None or before.ref != ref):
        before = await continuation.load(request, tenant, ref)
    conversation, body = _conversation(request, value, HydrateRequest, before)
    keep = (keep and context.protocol(request) >= PROTOCOL_REFS) or before is not None
    refs = conversation.scan.refs
    summary = body.mode == "summary"
    if context.protocol(request) < PROTOCOL_REFS:
        if refs or summary:
            what = "toolRef markers" if refs else "summary mode (its placeholders name refs)"
            raise ProtocolRequiredError(
                f"the request uses {what}, which needs `{PROTOCOL_HEADER}: {PROTOCOL_REFS}`; "
                "protocol 1 sends and receives full payloads"
            )
        size = _size(conversation.messages)
        return _answer(
            request, conversation, conversation.messages, None, _stats(size, size, 0, 0, 0)
        )
    summarizer = (
        body.summarizer
        if body.summarizer is not None
        else context.services(request).settings.summarizer
    )
    context.services(request).summaries.summarizer(summarizer)  # 422 before any work
    known = before.held if before is not None else {}
    held = {**known, **await resolve_markers(request, tenant, [r for r in refs if r not in known])}
    _check_names(conversation, held)
    registration = await _register(request, tenant, conversation.scan.complete)
    hydrated = formats.fill(conversation.messages, conversation.scan, held)
    references = _references(conversation, registration.refs)
    full = dumps_json(hydrated)  # measured for the stats, and reused as the answer
    stats = _stats(
        len(full),
        _size(conversation.messages),
        len(refs),
        registration.new,
        registration.hits + len(held),
    )
    answer = hydrated
    if summary:
        answer, summary_stats = await _summarized(
            request,
            tenant=tenant,
            body=body,
            fmt=conversation.fmt,
            hydrated=hydrated,
            references=references,
            summarizer=summarizer,
        )
        stats.update(summary_stats)
        if body.shadow:
            answer = hydrated
    head = None
    if keep and conversation.messages:
        head = await _keep(request, tenant, conversation, registration, before)
    encoded = full if answer is hydrated else None
    return _answer(request, conversation, answer, references, stats, encoded=encoded, history=head)


def _conversation(
    request: Request, value: Any, model: type[Body], before: continuation.Continuation | None
) -> tuple[Conversation, Body]:
    """The request's conversation; with `before`, that history followed by the request's
    messages (the limit on messages applies to the whole)."""
    messages = value.get("messages") if isinstance(value, dict) else None
    if messages is not None:
        formats.check_messages(messages)
        _check_length(request, len(messages))
    body = context.validate(model, value)
    if before is None:
        fmt = formats.detect(body.messages, body.format)
        return Conversation(fmt, body.messages, formats.scan(body.messages, fmt)), body
    return _continued(request, body.messages, body.format, before), body


def _continued(
    request: Request,
    messages: list[Any],
    named: FormatName | None,
    before: continuation.Continuation,
) -> Conversation:
    """The history followed by the new messages, read as one conversation: its format is
    detected over the whole (a history of plain text fits every format, so the one stored
    with it is not binding), and the limit on messages applies to the whole."""
    whole = [*before.form, *messages]
    _check_length(request, len(whole), f" (history {before.ref} has {len(before.form)})")
    fmt = formats.detect(whole, named)
    return Conversation(fmt, whole, formats.scan(whole, fmt))


async def _keep(
    request: Request,
    tenant: str,
    conversation: Conversation,
    registration: Registration,
    before: continuation.Continuation | None,
) -> str:
    """Store the conversation as a history (chain form) and return its ref. Messages it
    shares with the history it continued are stored already."""
    form = formats.replace(conversation.messages, conversation.scan, registration.refs)
    start = 0
    if before is not None:
        while start < len(before.form) and form[start] is before.form[start]:
            start += 1
    services = context.services(request)
    known = before.encoded if before is not None else ()
    ref = await services.histories.save(tenant, conversation.fmt.name, form, start, known)
    outcome = "kept" if before is None else "continued"
    services.metrics.histories.labels(outcome=outcome).inc()
    return ref


async def _summarized(
    request: Request,
    *,
    tenant: str,
    body: HydrateRequest,
    fmt: Format,
    hydrated: list[Any],
    references: dict[str, str],
    summarizer: str,
) -> tuple[list[Any], dict[str, int]]:
    found = formats.scan(hydrated, fmt)
    candidates = compaction.older_results(found, references, body.keep_recent, body.exclude_tools)
    max_chars = body.max_chars or context.services(request).settings.summary_max_chars
    summaries = await context.services(request).summaries.many(
        tenant, [(Ref(c.ref), c.invocation) for c in candidates], summarizer, max_chars
    )
    chosen = compaction.replacements(fmt, candidates, [s.text for s in summaries])
    condensed = compaction.apply(hydrated, found, chosen)
    return condensed, {
        "summarized": len(chosen),
        "summaryCacheHits": sum(s.cached for s in summaries),
        "hydratedBytes": _size(condensed),
    }


async def resolve_markers(
    request: Request, tenant: str, refs: list[str]
) -> dict[str, dict[str, Any]]:
    """Invocations for every ref, or 409 listing all the refs that are not held."""
    held, missing = await context.held(request, tenant, refs)
    if missing:
        raise MissingRefsError(
            f"{len(missing)} ref(s) in the messages are not held (expired, evicted, or never "
            "registered for this API key); resend those invocations in full",
            missing,
        )
    return held


def _check_names(conversation: Conversation, held: dict[str, dict[str, Any]]) -> None:
    for pair in conversation.scan.marked:
        ref = pair.ref
        stored = held[ref]["name"] if ref is not None else None
        if pair.name and stored is not None and pair.name != stored:
            raise ValidationError(
                f"tool call {pair.key!r} names tool {pair.name!r} but its ref {ref} is an "
                f"invocation of {stored!r}; send the ref of this call's own invocation",
            )


routes = [
    Route("/v1/messages:optimize", optimize, methods=["POST"]),
    Route("/v1/messages:hydrate", hydrate, methods=["POST"]),
]
