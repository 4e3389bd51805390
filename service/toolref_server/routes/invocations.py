"""Invocations: register, findMissing, resolve, and GET by ref."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from toolref.formats.source import Payload
from toolref.kit import spans
from toolref.wire import endpoints
from toolref.wire.canonical import Digest, Ref, canonical_json
from toolref.wire.encoding import dumps_json
from toolref.wire.errors import NotFoundError, RefCollisionError, ValidationError
from toolref.wire.models import (
    MAX_SUMMARY_CHARS,
    MIN_SUMMARY_CHARS,
    FindMissingResponse,
    Invocation,
    RefsRequest,
    RegisteredRef,
    RegisterRequest,
    RegisterResponse,
    ResolveResponse,
    SummaryResponse,
    validated,
)
from toolref.wire.numbers import describe, whole_number
from toolref.wire.protocol import PROTOCOL_REFS
from toolref_server.http import codec
from toolref_server.http.operation import (
    REF,
    SUMMARIZER,
    ApiRoute,
    Header,
    Operation,
    Parameter,
    Reply,
)
from toolref_server.routes import request_context
from toolref_server.storage import record
from toolref_server.storage.record import Record
from toolref_server.storage.store import NewRecord


def _records(
    invocations: Sequence[Invocation], threshold: int, texts: Sequence[str] | None = None
) -> tuple[list[NewRecord], list[tuple[Ref, int]]]:
    """Each invocation's record and (ref, size), in order: the ref hashes the canonical
    JSON, the record keeps the payloads as written (`texts`: each invocation's JSON text as
    sent, None for a msgpack body, whose payloads are kept as compact JSON). Linear in the
    invocations."""
    items: list[NewRecord] = []
    answers: list[tuple[Ref, int]] = []
    written = texts if texts is not None and len(texts) == len(invocations) else None
    for n, invocation in enumerate(invocations):
        digest = Digest.of(canonical_json(invocation.canonical_object()))
        ref = digest.ref
        payload = _as_written(written[n]) if written is not None else None
        data = record.encode(
            invocation.name,
            is_error=invocation.is_error,
            payload=payload or record.payload_of(invocation.to_wire()),
            digest=digest.sha256,
            size=digest.size,
            compress_threshold=threshold,
        )
        items.append(NewRecord(ref, digest.sha256, data))
        answers.append((ref, digest.size))
    return items, answers


def _as_written(text: str) -> Payload | None:
    """The `args` and `result` of one invocation's JSON text, as written (`1e5`, key order,
    escapes kept): what a parser of the text keeps (a repeated key, its last value)."""
    members, _ = spans.members(text, 0, wanted="")
    args, result = members.get("args"), members.get("result")
    if args is None or result is None:
        return None
    return Payload(text[args.start : args.end], text[result.start : result.end])


async def register(request: Request) -> Response:
    tenant = request_context.tenant(request)
    request_context.require_refs_protocol(request)
    # Each invocation's text as sent, kept (payloads are stored as written, as hydrate's).
    decoded = await request_context.document(request, messages_key="invocations")
    value = decoded.value
    request_context.check_batch(value, "invocations", request)
    body = validated(RegisterRequest, value)
    services = request_context.services(request)
    threshold = services.settings.compress_threshold
    # canonical JSON, SHA-256 and the record of each: off the loop when the batch is large
    records, answers = await services.workers.run(
        decoded.size, _records, body.invocations, threshold, decoded.texts
    )
    # each ref written and counted against the quota once, however often the batch names it
    items = list({item.ref: item for item in records}.values())
    stored = await services.store.register(tenant, items)
    outcomes = dict(zip((item.ref for item in items), stored, strict=True))
    collided = [
        str(item.ref)
        for item in items
        if (known := outcomes[item.ref].stored_digest) is not None and known != item.digest
    ]
    if collided:
        raise RefCollisionError(
            f"{len(collided)} invocation(s) share a 128-bit ref with a different stored "
            "invocation; the stored one is kept and never served for yours. Send these "
            "payloads in full.",
            collidingRefs=collided,
        )
    said: set[Ref] = set()
    registered = []
    for ref, size in answers:  # in order; a ref named again is not new the second time
        registered.append(
            RegisteredRef(ref=ref, size=size, new=outcomes[ref].new and ref not in said)
        )
        said.add(ref)
    response = RegisterResponse(refs=registered)
    return codec.render(request, response.model_dump(by_alias=True))


async def _refs_body(request: Request) -> list[Ref]:
    value = await request_context.body(request)
    request_context.check_batch(value, "refs", request)
    return request_context.parse_refs(validated(RefsRequest, value).refs)


def _unique(refs: list[Ref]) -> list[Ref]:
    return list(dict.fromkeys(refs))


async def find_missing(request: Request) -> Response:
    tenant = request_context.tenant(request)
    request_context.require_refs_protocol(request)
    refs = _unique(await _refs_body(request))
    present = await request_context.services(request).store.touch(tenant, refs)
    missing = [str(ref) for ref, here in zip(refs, present, strict=True) if not here]
    return codec.render(request, FindMissingResponse(missing=missing).model_dump(by_alias=True))


async def resolve(request: Request) -> Response:
    tenant = request_context.tenant(request)
    request_context.require_refs_protocol(request)
    refs = _unique(await _refs_body(request))
    services = request_context.services(request)
    # the answer holds every record inflated: their sum bounded before any is inflated
    limit = services.settings.max_decompressed_bytes
    records = await services.store.fetch(tenant, refs, limit=limit)
    found: dict[str, Record] = {}
    missing: list[str] = []
    for ref, rec in zip(refs, records, strict=True):
        if rec is None or rec.digest[: len(ref.digest_prefix)] != ref.digest_prefix:
            missing.append(str(ref))
        else:
            found[str(ref)] = rec
    # The answer's members through its model; the payloads, held as registered, are put in
    # after it. Large answers are assembled in a worker thread (4 MB of payloads is a few
    # copies of 4 MB: milliseconds the loop's other requests would wait).
    answer = ResolveResponse(invocations={}, missing=missing).model_dump(by_alias=True)
    size = sum(len(rec.payload.args) + len(rec.payload.result) for rec in found.values())
    render = as_msgpack if codec.wants_msgpack(request) else as_json
    return await services.workers.run(size, render, request, answer, found)


def as_msgpack(request: Request, answer: dict[str, Any], found: dict[str, Record]) -> Response:
    """`answer` with the invocations found, their payloads parsed, packed for msgpack."""
    answer["invocations"] = {ref: rec.invocation() for ref, rec in found.items()}
    return codec.render(request, answer)


def as_json(request: Request, answer: dict[str, Any], found: dict[str, Record]) -> Response:
    """`answer` with the invocations found spliced in as their stored text (never
    re-encoded): each record's text made and encoded, then all joined once into the body;
    time and memory linear in it (about three times its size at the peak)."""
    pieces = [b"{"]
    for ref, rec in found.items():
        pieces += (dumps_json(ref), b":", rec.wire_text().encode(), b",")
    pieces[-1] = b"}" if found else b"{}"
    return codec.render(request, answer, encoded={"invocations": pieces})


async def get_invocation(request: Request) -> Response:
    tenant = request_context.tenant(request)
    ref = Ref.parse(request.path_params["ref"])
    (rec,) = await request_context.services(request).store.fetch(tenant, [ref])
    if rec is None or rec.digest[: len(ref.digest_prefix)] != ref.digest_prefix:
        raise NotFoundError(
            f"no invocation {ref} is held for this API key (never registered, expired, or "
            f"evicted); register it again with POST {endpoints.INVOCATIONS}"
        )
    etag = f'"{rec.digest.hex()}"'
    ttl = request_context.services(request).settings.ttl_seconds
    headers = {"ETag": etag, "Cache-Control": f"private, max-age={ttl}, immutable"}
    if _etag_matches(etag, request.headers.get("if-none-match")):
        return Response(status_code=304, headers=headers)
    if codec.wants_msgpack(request):
        return codec.render(request, rec.invocation(), headers=headers)
    return codec.raw_json(rec.wire_text().encode(), headers=headers)


async def get_summary(request: Request) -> Response:
    tenant = request_context.tenant(request)
    ref = Ref.parse(request.path_params["ref"])
    services = request_context.services(request)
    name = request.query_params.get("summarizer") or services.settings.summarizer
    max_chars = _max_chars(
        request.query_params.get("maxChars"), services.settings.summary_max_chars
    )
    services.summaries.summarizer(name)  # 422 for an unknown summarizer, before any work
    (rec,) = await services.store.fetch(tenant, [ref])
    if rec is None or rec.digest[: len(ref.digest_prefix)] != ref.digest_prefix:
        raise NotFoundError(
            f"no invocation {ref} is held for this API key, so it has no summary; register "
            f"it with POST {endpoints.INVOCATIONS}"
        )
    invocation = await services.workers.run(rec.size, rec.invocation)
    (summary,) = await services.summaries.many(tenant, [(ref, invocation)], name, max_chars)
    answer = SummaryResponse(
        summarizer=summary.summarizer,
        summary=summary.text,
        cached=summary.cached,
        fallback=summary.fallback,
    )
    return codec.render(request, answer.model_dump(by_alias=True))


def _max_chars(text: str | None, default: int) -> int:
    if text is None:
        return default
    budget = whole_number(text, 9)
    if budget is None or not MIN_SUMMARY_CHARS <= budget <= MAX_SUMMARY_CHARS:
        raise ValidationError(
            f"maxChars={describe(text)} is not a whole number from {MIN_SUMMARY_CHARS} to "
            f"{MAX_SUMMARY_CHARS}; send the summary budget in characters",
        )
    return budget


def _etag_matches(etag: str, header: str | None) -> bool:
    if not header:
        return False
    tags = {tag.strip().removeprefix("W/") for tag in header.split(",")}
    return "*" in tags or etag in tags


# --- the routes and their operations -------------------------------------------------------

_REF = Parameter("ref", "path", REF)
# Problems of the batch endpoints (401, 429 and 503 come with every keyed operation).
_BATCH_PROBLEMS = (400, 413, 415, 422)
_ETAG = Header(
    "ETag",
    "The invocation's SHA-256 in hex, quoted.",
    {"type": "string", "pattern": '^"[0-9a-f]{64}"$'},
)
_CACHE_CONTROL = Header("Cache-Control", "`private, max-age=<TTL>, immutable`.", {"type": "string"})

REGISTER = Operation(
    "registerInvocations",
    "Register invocations (idempotent; never overwrites)",
    Reply("One ref per invocation, in request order.", RegisterResponse),
    (400, 409, 413, 415, 422),
    request=RegisterRequest,
    protocol=PROTOCOL_REFS,
)
FIND_MISSING = Operation(
    "findMissingInvocations",
    "Which refs the registry lacks (extends the lifetime of those present)",
    Reply("Refs not held.", FindMissingResponse),
    _BATCH_PROBLEMS,
    request=RefsRequest,
    protocol=PROTOCOL_REFS,
)
RESOLVE = Operation(
    "resolveInvocations",
    "Invocations for refs (extends the lifetime of those returned)",
    Reply("Invocations held, and refs not held.", ResolveResponse),
    _BATCH_PROBLEMS,
    request=RefsRequest,
    protocol=PROTOCOL_REFS,
)
GET_INVOCATION = Operation(
    "getInvocation",
    "Get one invocation by ref (extends its lifetime)",
    Reply(
        "The invocation. Immutable: the ETag is its SHA-256.",
        Invocation,
        headers=(_ETAG, _CACHE_CONTROL),
    ),
    (404, 422),
    parameters=(_REF, Parameter("If-None-Match", "header", {"type": "string"})),
    replies={
        304: Reply(
            "Not modified (If-None-Match matched the ETag).", headers=(_ETAG, _CACHE_CONTROL)
        )
    },
)
GET_SUMMARY = Operation(
    "getSummary",
    "Summary of one invocation, computed once per summarizer and cached",
    Reply("The summary.", SummaryResponse),
    (404, 422),
    parameters=(
        _REF,
        Parameter(
            "summarizer", "query", SUMMARIZER, "Summarizer (the server's default when absent)."
        ),
        Parameter(
            "maxChars",
            "query",
            {"type": "integer", "minimum": MIN_SUMMARY_CHARS, "maximum": MAX_SUMMARY_CHARS},
            "Summary budget in characters (server default).",
        ),
    ),
)

routes = [
    ApiRoute(endpoints.INVOCATIONS, "POST", register, REGISTER),
    ApiRoute(endpoints.FIND_MISSING, "POST", find_missing, FIND_MISSING),
    ApiRoute(endpoints.RESOLVE, "POST", resolve, RESOLVE),
    ApiRoute(endpoints.INVOCATION, "GET", get_invocation, GET_INVOCATION),
    ApiRoute(endpoints.SUMMARY, "GET", get_summary, GET_SUMMARY),
]
