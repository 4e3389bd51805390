"""The OpenAPI 3.1 document, generated: every route of the app with the operation it
declares (`toolref_server.http.operation.ApiRoute`), the gateway's operation
(`/llm/{name}/{path}`) when it has upstreams, and the schemas of the pydantic models those
operations take and answer. What every operation shares (the protocol header, problems,
admission, security) is added here, once."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from starlette.routing import BaseRoute

from toolref import __version__
from toolref.wire.canonical import REF_LENGTH
from toolref.wire.encoding import JSON_TYPE, MSGPACK_TYPE, PROBLEM_TYPE
from toolref.wire.errors import PROBLEM_BASE
from toolref.wire.headers import KEY_HEADER, PROTOCOL_HEADER
from toolref.wire.models import Problem
from toolref.wire.protocol import MAX_VERSION_DIGITS, PROTOCOL_HIGH, PROTOCOL_LOW
from toolref_server.http.operation import (
    HEADER_SPACE,
    ApiRoute,
    Header,
    Operation,
    Parameter,
    Reply,
    Schema,
)

_REF_PATTERN = "^tr_[a-z2-7]{25}[aeimquy4]$"

# Every registry endpoint sits behind the protocol middleware, so each can answer this 400.
_BAD_PROTOCOL = (
    f"Malformed Toolref-Protocol header (not a version: ASCII digits, at most "
    f"{MAX_VERSION_DIGITS} but leading zeros, and at least {PROTOCOL_LOW})."
)
PROBLEMS: Final = {
    400: "Malformed body or Toolref-Protocol header, or a ref endpoint called as protocol 1.",
    401: "Missing or unknown API key.",
    403: "No metrics key is configured (TOOLREF_METRICS_KEY) and the request was not made on "
    "the service's own machine (a loopback peer, no proxy header, a Host of localhost or a "
    "loopback address): set one to read it from elsewhere.",
    404: "Unknown ref (never registered, expired, evicted, or another tenant's).",
    409: "Conflict: a 128-bit ref collision, or (hydrate) refs not held, all listed in "
    "`missingRefs`, or a history ref not held, named in `missingHistory`.",
    413: "Body, inflated body or batch over its limit.",
    415: "Unsupported Content-Type or Content-Encoding.",
    422: "Body parsed but invalid: shape, nesting depth, NaN/Infinity, or a malformed ref.",
    429: "The tenant's quota (`quota`: requestsPerSecond, storedBytes or "
    "inflatedBytesInFlight) is used up; retry after Retry-After seconds, sending full "
    "payloads meanwhile.",
    503: "The store is unreachable (`store-unavailable`), or the service is serving as many "
    "requests or connections as it is set to (`overloaded`); retry after Retry-After seconds.",
}
_INFO = (
    "Content-addressed references for LLM tool-call payloads. Any request may also be "
    "refused by the HTTP layer before it reaches an operation, as application/problem+json, "
    "closing the connection: 400 `malformed-request` (not valid HTTP/1.1), 408 "
    "`request-timeout` (head or body too slow), 431 `headers-too-large`, 503 `overloaded` "
    "(every connection busy)."
)
# Told when the service has no API keys (`http.hosts.KeylessHosts`).
_KEYLESS: Final = (
    " This service has no API keys: every request but /healthz and /readyz (WebSocket "
    "upgrades too) must name localhost or a loopback address as its Host (any port), else "
    "403 `forbidden`, so that no web page can use it through DNS rebinding."
)
_BEARER: Final = {"type": "http", "scheme": "bearer", "description": "API key."}
_TOOLREF_KEY: Final = {
    "type": "apiKey",
    "in": "header",
    "name": KEY_HEADER,
    "description": "API key, for the gateway (`Authorization` is the upstream's).",
}
_METRICS_KEY: Final = {
    "type": "http",
    "scheme": "bearer",
    "description": "The key whose SHA-256 is TOOLREF_METRICS_KEY.",
}


@dataclass(frozen=True, slots=True)
class _Settings:
    """What the operations' security depends on: API keys, the metrics key."""

    secured: bool
    metrics_secured: bool


def document(
    routes: Iterable[BaseRoute],
    *,
    secured: bool = True,
    summarizers: tuple[str, ...] = ("extractive",),
    metrics_secured: bool = False,
    upstreams: tuple[str, ...] = (),
    mounted: Sequence[tuple[str, str, Operation]] = (),
) -> dict[str, Any]:
    """OpenAPI 3.1 description of `routes` (each an `ApiRoute`: a route that declares no
    operation is a `TypeError`) and of what is `mounted` beside them ((path, method,
    operation): the gateway's, `gateway.gateway.operations`). `secured`: API keys are
    configured; `summarizers`: the summarizers offered; `metrics_secured`: /metrics needs
    its key (else it answers this machine only); `upstreams`: the gateway's upstream names."""
    served: list[tuple[str, str, Operation]] = []
    for route in routes:
        if not isinstance(route, ApiRoute):
            raise TypeError(f"{route!r} declares no operation: declare it as an ApiRoute")
        served.append((route.path, route.method, route.operation))
    served += mounted
    settings = _Settings(secured, metrics_secured)
    paths: dict[str, Any] = {}
    for path, method, operation in served:
        paths.setdefault(path, {})[method.lower()] = _operation(operation, method, settings)
    components: dict[str, Any] = {"schemas": _schemas(served, summarizers, upstreams)}
    schemes: dict[str, Any] = {}
    if secured:
        schemes["bearer"] = _BEARER
        if upstreams:
            schemes["toolrefKey"] = _TOOLREF_KEY
    if metrics_secured:
        schemes["metricsKey"] = _METRICS_KEY
    if schemes:
        components["securitySchemes"] = schemes
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "toolref",
            "version": __version__,
            "description": _INFO if secured else _INFO + _KEYLESS,
        },
        "paths": paths,
        "components": components,
    }
    if secured:
        doc["security"] = [{"bearer": []}]
    return doc


# --- schemas ------------------------------------------------------------------------------


def _schemas(
    served: list[tuple[str, str, Operation]],
    summarizers: tuple[str, ...],
    upstreams: tuple[str, ...],
) -> dict[str, Any]:
    """The models' schemas, with refs typed by their grammar and the server's choices
    (summarizers, upstreams) as enums."""
    models: dict[type[BaseModel], None] = {Problem: None}
    for _, _, operation in served:
        replies = [operation.ok, *operation.replies.values()]
        for model in (operation.request, *(reply.model for reply in replies)):
            if model is not None:
                models[model] = None
    _, top = models_json_schema(
        [(model, "validation") for model in models],
        ref_template="#/components/schemas/{model}",
    )
    schemas: dict[str, Any] = top.get("$defs", {})
    schemas["Problem"]["properties"]["type"]["description"] = (
        f"Stable problem type, `{PROBLEM_BASE}<slug>`."
    )
    # The models type refs as plain strings; on the wire a ref is always this (anything else
    # in a request is answered with 422).
    schemas["Ref"] = {
        "description": "`tr_` plus 26 lowercase base32 characters: 16 bytes of the SHA-256.",
        "type": "string",
        "minLength": REF_LENGTH,
        "maxLength": REF_LENGTH,
        "pattern": _REF_PATTERN,
    }
    ref = {"$ref": "#/components/schemas/Ref"}
    typed = {
        ("RefsRequest", "refs"): "items",
        ("FindMissingResponse", "missing"): "items",
        ("ResolveResponse", "missing"): "items",
        ("ResolveResponse", "invocations"): "propertyNames",
    }
    for (name, member), where in typed.items():
        if name in schemas:
            schemas[name]["properties"][member][where] = ref
    if "RegisteredRef" in schemas:
        schemas["RegisteredRef"]["properties"]["ref"].update(ref)
    schemas["Summarizer"] = {
        "description": "A summarizer this server offers.",
        "type": "string",
        "enum": list(summarizers),
    }
    if "HydrateRequest" in schemas:
        named = schemas["HydrateRequest"]["properties"]["summarizer"]
        named["anyOf"] = [{"$ref": "#/components/schemas/Summarizer"}, {"type": "null"}]
    if upstreams:
        schemas["Upstream"] = {
            "description": "An upstream of this gateway (TOOLREF_UPSTREAMS).",
            "type": "string",
            "enum": list(upstreams),
        }
    return schemas


# --- operations ---------------------------------------------------------------------------


def _operation(operation: Operation, method: str, settings: _Settings) -> dict[str, Any]:
    forwarded = operation.forwarded
    parameters = [_parameter(p) for p in operation.parameters]
    if not forwarded:
        parameters.insert(0, _parameter(_protocol_parameter(operation.protocol)))
    found: dict[str, Any] = {
        "summary": operation.summary,
        "operationId": operation.id + (method.title() if forwarded else ""),
    }
    if operation.description is not None:
        found["description"] = operation.description
    found["parameters"] = parameters
    responses = {
        ("default" if forwarded else str(operation.status)): _reply(operation.ok, forwarded)
    }
    responses.update((str(code), _reply(r, forwarded)) for code, r in operation.replies.items())
    for code in _problems(operation, settings):
        note = operation.notes.get(code) or PROBLEMS.get(code)
        if code == 400 and 400 not in operation.problems:
            note = _BAD_PROTOCOL
        responses[str(code)] = _problem(code, note or "", forwarded)
    found["responses"] = responses
    if operation.request is not None:
        found["requestBody"] = {"required": True, "content": _bodies(operation.request)}
    elif operation.media is not None:
        content = {media: {"schema": schema} for media, schema in operation.media.items()}
        found["requestBody"] = {"required": True, "content": content}
    elif forwarded:
        found["requestBody"] = {
            "required": False,
            "description": "Any body, forwarded (hydrated first where the description says).",
            "content": {"*/*": {"schema": {}}},
        }
    security = _security(operation, settings)
    if security is not None:
        found["security"] = security
    return found


def version_pattern(lowest: int) -> str:
    """A version of at least `lowest` (1-9) as `toolref.wire.protocol.negotiate` reads a
    `Toolref-Protocol` header: ASCII digits, at most MAX_VERSION_DIGITS of them but leading
    zeros (a version above the server's highest is answered with that), the value
    stripped. A header's text, so a pattern: an integer schema could not say the rest."""
    more = MAX_VERSION_DIGITS - 1
    version = f"0*(?:[{lowest}-9]|[1-9][0-9]{{1,{more}}})"
    return f"^{HEADER_SPACE}{version}{HEADER_SPACE}$"


def _protocol_parameter(lowest: int) -> Parameter:
    """`Toolref-Protocol` as an operation taking protocol `lowest` and up reads it;
    required when protocol 1 (no header) is refused."""
    schema = {"type": "string", "pattern": version_pattern(lowest)}
    if lowest <= PROTOCOL_LOW:
        return Parameter(
            PROTOCOL_HEADER,
            "header",
            schema,
            "Highest protocol version the client speaks; absent means 1.",
        )
    return Parameter(
        PROTOCOL_HEADER,
        "header",
        schema,
        f"Highest protocol version the client speaks: at least {lowest}, since this "
        f"operation answers with refs (protocol 1, and a request without the header, get a "
        f"400 `protocol-required`).",
        required=True,
    )


def _problems(operation: Operation, settings: _Settings) -> list[int]:
    """Every problem status the operation may answer: its own, its auth's (401, and 429 for
    a tenant's quota; the metrics endpoints' 401 with their key, else 403), the protocol
    header's (400) and admission's (503)."""
    codes = set(operation.problems)
    if not operation.forwarded:
        codes.add(400)
    if operation.auth in ("key", "gateway"):
        codes.add(429)
    if (operation.auth in ("key", "gateway") and settings.secured) or (
        operation.auth == "metrics" and settings.metrics_secured
    ):
        codes.add(401)
    if operation.auth == "metrics" and not settings.metrics_secured:
        codes.add(403)
    if not operation.admitted:
        codes.add(503)
    return sorted(codes)


def _security(operation: Operation, settings: _Settings) -> list[dict[str, list[str]]] | None:
    """The operation's security requirement; None: the document's (a bearer key)."""
    if operation.auth == "key":
        return None if settings.secured else []
    if operation.auth == "gateway":
        return [{"toolrefKey": []}] if settings.secured else []
    if operation.auth == "metrics" and settings.metrics_secured:
        return [{"metricsKey": []}]
    return []


def _parameter(parameter: Parameter) -> dict[str, Any]:
    found: dict[str, Any] = {"name": parameter.name, "in": parameter.where}
    found["required"] = parameter.required or parameter.where == "path"
    if parameter.description is not None:
        found["description"] = parameter.description
    found["schema"] = dict(parameter.schema)
    return found


def _bodies(model: type[BaseModel]) -> dict[str, Any]:
    schema = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {JSON_TYPE: {"schema": schema}, MSGPACK_TYPE: {"schema": schema}}


def _protocol_header(forwarded: bool) -> Header:
    # Every registry response carries it, error responses included (1 when the request's
    # header was bad); a forwarded one when the gateway hydrated its request.
    schema = {"type": "integer", "minimum": PROTOCOL_LOW, "maximum": PROTOCOL_HIGH}
    return Header(PROTOCOL_HEADER, "Protocol version the server used.", schema, not forwarded)


def _reply(reply: Reply, forwarded: bool) -> dict[str, Any]:
    headers = (_protocol_header(forwarded), *reply.headers)
    found: dict[str, Any] = {"description": reply.description, "headers": _headers(headers)}
    if reply.model is not None:
        found["content"] = _bodies(reply.model)
    elif reply.media is not None:
        found["content"] = {media: {"schema": dict(s)} for media, s in reply.media.items()}
    return found


def _headers(headers: Iterable[Header]) -> dict[str, Any]:
    return {
        h.name: {"description": h.description, "required": h.required, "schema": dict(h.schema)}
        for h in headers
    }


def _problem(code: int, description: str, forwarded: bool) -> dict[str, Any]:
    """A problem+json answer; forwarded, or the upstream's own answer with that status."""
    headers = [_protocol_header(forwarded)]
    if code == 401:
        challenge = (
            f"The `{KEY_HEADER}` challenge (the key goes in that header; `error_description` "
            "says how to get one)."
            if forwarded
            else "The Bearer challenge."
        )
        headers.append(Header("WWW-Authenticate", challenge, {"type": "string"}))
    if code in (429, 503):
        after: Schema = {"type": "integer", "minimum": 0}
        headers.append(Header("Retry-After", "Seconds to wait before retrying.", after))
    if forwarded:
        headers = [Header(h.name, h.description, h.schema, required=False) for h in headers]
    content: dict[str, Any] = {PROBLEM_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}
    if forwarded:
        content["*/*"] = {"schema": {}}
    return {"description": description, "headers": _headers(headers), "content": content}
