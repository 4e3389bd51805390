"""The OpenAPI 3.1 document, built from the same pydantic models the routes use."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from toolref import __version__
from toolref.wire.canonical import REF_LENGTH
from toolref.wire.encoding import JSON_TYPE, MSGPACK_TYPE, PROBLEM_TYPE
from toolref.wire.errors import PROBLEM_BASE
from toolref.wire.headers import HISTORY_HEADER, PROTOCOL_HEADER
from toolref.wire.models import (
    Capabilities,
    FindMissingResponse,
    HandoffRequest,
    HandoffResponse,
    Health,
    HydrateRequest,
    Invocation,
    MessagesResponse,
    OptimizeRequest,
    Problem,
    RefsRequest,
    RegisterRequest,
    RegisterResponse,
    ResolveResponse,
    SummaryResponse,
)
from toolref.wire.protocol import PROTOCOL_HIGH, PROTOCOL_LOW

_MODELS: tuple[type[BaseModel], ...] = (
    Capabilities,
    FindMissingResponse,
    HandoffRequest,
    HandoffResponse,
    Health,
    HydrateRequest,
    Invocation,
    MessagesResponse,
    OptimizeRequest,
    Problem,
    RefsRequest,
    RegisterRequest,
    RegisterResponse,
    ResolveResponse,
    SummaryResponse,
)
_REF_PATTERN = "^tr_[a-z2-7]{25}[aeimquy4]$"
_HISTORY_PATTERN = "^th_[a-z2-7]{25}[aeimquy4]$"
_HISTORY_HEADER_PATTERN = r"^(\?[01]|th_[a-z2-7]{25}[aeimquy4])$"

# Every endpoint sits behind the protocol middleware, so every endpoint can answer this 400.
_BAD_PROTOCOL = "Malformed Toolref-Protocol header (not an integer of at least 1)."
_ERRORS = {
    "400": "Malformed body or Toolref-Protocol header, or a ref endpoint called as protocol 1.",
    "401": "Missing or unknown API key.",
    "404": "Unknown ref (never registered, expired, evicted, or another tenant's).",
    "409": "Conflict: a 128-bit ref collision, or (hydrate) refs not held, all listed in "
    "`missingRefs`, or a history ref not held, named in `missingHistory`.",
    "413": "Body, inflated body or batch over its limit.",
    "415": "Unsupported Content-Type or Content-Encoding.",
    "422": "Body parsed but invalid: shape, nesting depth, NaN/Infinity, or a malformed ref.",
    "429": "The tenant's quota (`quota`: requestsPerSecond or storedBytes) is used up; retry "
    "after Retry-After seconds, sending full payloads meanwhile.",
    "503": "The store is unreachable (`store-unavailable`), or the service is serving as many "
    "requests or connections as it is set to (`overloaded`); retry after Retry-After seconds.",
}


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _protocol_header() -> dict[str, Any]:
    # Every response carries it, error responses included (1 when the request's header was bad).
    return {
        "description": "Protocol version the server used.",
        "required": True,
        "schema": {"type": "integer", "minimum": PROTOCOL_LOW, "maximum": PROTOCOL_HIGH},
    }


def _string_header(description: str) -> dict[str, Any]:
    return {"description": description, "required": True, "schema": {"type": "string"}}


def _body(model: type[BaseModel]) -> dict[str, Any]:
    return {JSON_TYPE: {"schema": _ref(model)}, MSGPACK_TYPE: {"schema": _ref(model)}}


def _ok(model: type[BaseModel], description: str, **headers: Any) -> dict[str, Any]:
    return {
        "description": description,
        "headers": {PROTOCOL_HEADER: _protocol_header(), **headers},
        "content": _body(model),
    }


def _problem(code: str, description: str | None = None) -> dict[str, Any]:
    headers: dict[str, Any] = {PROTOCOL_HEADER: _protocol_header()}
    if code == "401":
        headers["WWW-Authenticate"] = _string_header("The Bearer challenge.")
    if code in ("429", "503"):
        headers["Retry-After"] = {
            "description": "Seconds to wait before retrying.",
            "required": True,
            "schema": {"type": "integer", "minimum": 0},
        }
    return {
        "description": description or _ERRORS[code],
        "headers": headers,
        "content": {PROBLEM_TYPE: {"schema": _ref(Problem)}},
    }


def _operation(
    summary: str,
    op_id: str,
    ok: dict[str, Any],
    errors: tuple[str, ...],
    *,
    request: type[BaseModel] | None = None,
    secured: bool,
    parameters: list[dict[str, Any]] | None = None,
    admitted: bool = False,
    quota: bool | None = None,
) -> dict[str, Any]:
    """`admitted`: always served, never refused for load (`/healthz`); any other operation
    may be answered 503 `overloaded`. `quota`: counted in a tenant's request rate (429);
    by default, the operations that take an API key (401)."""
    if quota is None:
        quota = "401" in errors
    operation: dict[str, Any] = {
        "summary": summary,
        "operationId": op_id,
        "parameters": [
            {
                "name": PROTOCOL_HEADER,
                "in": "header",
                "required": False,
                "description": "Highest protocol version the client speaks; absent means 1.",
                "schema": {"type": "integer", "minimum": PROTOCOL_LOW},
            },
            *(parameters or []),
        ],
        "responses": {
            "200": ok,
            "400": _problem("400", _BAD_PROTOCOL),
            **{code: _problem(code) for code in errors},
            # An operation with a tenant takes from its request-rate quota.
            **({"429": _problem("429")} if quota else {}),
            **({} if admitted else {"503": _problem("503")}),
        },
    }
    if request is not None:
        operation["requestBody"] = {"required": True, "content": _body(request)}
    if not secured:
        operation["security"] = []
    return operation


_REF_ERRORS = ("400", "401", "413", "415", "422", "503")


@cache
def document(
    secured: bool = True,
    summarizers: tuple[str, ...] = ("extractive",),
    metrics_secured: bool = False,
) -> dict[str, Any]:
    """OpenAPI 3.1 description of every endpoint. `secured`: API keys are configured;
    `summarizers`: the summarizers offered; `metrics_secured`: /metrics needs its key."""
    _, top = models_json_schema(
        [(model, "validation") for model in _MODELS],
        ref_template="#/components/schemas/{model}",
    )
    schemas = top.get("$defs", {})
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
    ref_schema = {"$ref": "#/components/schemas/Ref"}
    schemas["RefsRequest"]["properties"]["refs"]["items"] = ref_schema
    schemas["RegisteredRef"]["properties"]["ref"].update(ref_schema)
    schemas["FindMissingResponse"]["properties"]["missing"]["items"] = ref_schema
    schemas["ResolveResponse"]["properties"]["missing"]["items"] = ref_schema
    schemas["ResolveResponse"]["properties"]["invocations"]["propertyNames"] = ref_schema
    ref_param = {"name": "ref", "in": "path", "required": True, "schema": ref_schema}
    named = schemas["HydrateRequest"]["properties"]["summarizer"]
    named["anyOf"] = [{"type": "string", "enum": list(summarizers)}, {"type": "null"}]
    etag = {
        "description": "The invocation's SHA-256 in hex, quoted.",
        "required": True,
        "schema": {"type": "string", "pattern": '^"[0-9a-f]{64}"$'},
    }
    cache_control = _string_header("`private, max-age=<TTL>, immutable`.")
    get_ok = _ok(
        Invocation,
        "The invocation. Immutable: the ETag is its SHA-256.",
        ETag=etag,
        **{"Cache-Control": cache_control},
    )
    get_invocation = _operation(
        "Get one invocation by ref (extends its lifetime)",
        "getInvocation",
        get_ok,
        ("401", "404", "422", "503"),
        secured=secured,
        parameters=[
            ref_param,
            {"name": "If-None-Match", "in": "header", "schema": {"type": "string"}},
        ],
    )
    get_invocation["responses"]["304"] = {
        "description": "Not modified (If-None-Match matched the ETag).",
        "headers": {
            PROTOCOL_HEADER: _protocol_header(),
            "ETag": etag,
            "Cache-Control": cache_control,
        },
    }
    paths: dict[str, Any] = {
        "/v1/capabilities": {
            "get": _operation(
                "Negotiation document: protocol range, ref scheme, encodings, limits",
                "getCapabilities",
                _ok(Capabilities, "What this server supports."),
                (),
                secured=False,
            )
        },
        "/v1/invocations": {
            "post": _operation(
                "Register invocations (idempotent; never overwrites)",
                "registerInvocations",
                _ok(RegisterResponse, "One ref per invocation, in request order."),
                ("400", "401", "409", "413", "415", "422", "503"),
                request=RegisterRequest,
                secured=secured,
            )
        },
        "/v1/invocations:findMissing": {
            "post": _operation(
                "Which refs the registry lacks (extends the lifetime of those present)",
                "findMissingInvocations",
                _ok(FindMissingResponse, "Refs not held."),
                _REF_ERRORS,
                request=RefsRequest,
                secured=secured,
            )
        },
        "/v1/invocations:resolve": {
            "post": _operation(
                "Invocations for refs (extends the lifetime of those returned)",
                "resolveInvocations",
                _ok(ResolveResponse, "Invocations held, and refs not held."),
                _REF_ERRORS,
                request=RefsRequest,
                secured=secured,
            )
        },
        "/v1/invocations/{ref}": {"get": get_invocation},
        "/v1/invocations/{ref}/summary": {
            "get": _operation(
                "Summary of one invocation, computed once per summarizer and cached",
                "getSummary",
                _ok(SummaryResponse, "The summary."),
                ("401", "404", "422", "503"),
                secured=secured,
                parameters=[
                    ref_param,
                    {
                        "name": "summarizer",
                        "in": "query",
                        "required": False,
                        "description": "Summarizer (the server's default when absent).",
                        "schema": {"type": "string", "enum": list(summarizers)},
                    },
                    {
                        "name": "maxChars",
                        "in": "query",
                        "required": False,
                        "description": "Summary budget in characters (server default).",
                        "schema": {"type": "integer", "minimum": 40, "maximum": 20000},
                    },
                ],
            )
        },
        "/v1/messages:optimize": {
            "post": _operation(
                "Replace tool payloads in a conversation with refs (registers them)",
                "optimizeMessages",
                _ok(MessagesResponse, "The conversation with toolRef markers."),
                _REF_ERRORS,
                request=OptimizeRequest,
                secured=secured,
            )
        },
        "/v1/messages:hydrate": {
            "post": _operation(
                "Replace toolRef markers with their payloads (registers full payloads)",
                "hydrateMessages",
                _ok(
                    MessagesResponse,
                    "The conversation in full.",
                    **{
                        HISTORY_HEADER: {
                            "description": "When asked to keep the history: its ref (also "
                            "`historyRef` in the body), for the next turn.",
                            "required": False,
                            "schema": {"type": "string", "pattern": _HISTORY_PATTERN},
                        }
                    },
                ),
                ("400", "401", "409", "413", "415", "422", "503"),
                request=HydrateRequest,
                secured=secured,
                parameters=[
                    {
                        "name": HISTORY_HEADER,
                        "in": "header",
                        "required": False,
                        "description": "`?1`: keep this conversation as a history and confirm "
                        "its ref. A history ref: the body's messages continue that history, "
                        "and a zstd body was compressed with its dictionary.",
                        "schema": {"type": "string", "pattern": _HISTORY_HEADER_PATTERN},
                    }
                ],
            )
        },
        "/v1/context:handoff": {
            "post": _operation(
                "Tool context for a backend switch: a deduplicated, size-capped block",
                "handoffContext",
                _ok(HandoffResponse, "The block, its stats, and the new request with it."),
                ("400", "401", "409", "413", "415", "422", "503"),
                request=HandoffRequest,
                secured=secured,
            )
        },
        "/healthz": {
            "get": _operation(
                "Liveness",
                "healthz",
                _ok(Health, "The process is up."),
                (),
                secured=False,
                admitted=True,
            )
        },
        "/readyz": {
            "get": _operation(
                "Readiness: the store answers",
                "readyz",
                _ok(Health, "Ready to serve."),
                ("503",),
                secured=False,
            )
        },
        "/metrics": {
            "get": _operation(
                "Prometheus metrics of this process",
                "metrics",
                {
                    "description": "Prometheus text exposition format (whatever Accept says).",
                    "headers": {PROTOCOL_HEADER: _protocol_header()},
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
                ("401",) if metrics_secured else (),
                secured=False,
                quota=False,
            )
        },
        "/openapi.json": {
            "get": _operation(
                "This document",
                "openapi",
                {
                    "description": "OpenAPI 3.1 document (always JSON, whatever Accept says).",
                    "headers": {PROTOCOL_HEADER: _protocol_header()},
                    "content": {JSON_TYPE: {"schema": {"type": "object"}}},
                },
                (),
                secured=False,
            )
        },
    }
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "toolref",
            "version": __version__,
            "description": "Content-addressed references for LLM tool-call payloads. Any "
            "request may also be refused by the HTTP layer before it reaches an operation, "
            "as application/problem+json, closing the connection: 400 `malformed-request` (not "
            "valid HTTP/1.1), 408 `request-timeout` (head or body too slow), 431 "
            "`headers-too-large`, 503 `overloaded` (every connection busy).",
        },
        "paths": paths,
        "components": {"schemas": schemas},
    }
    if secured:
        doc["components"]["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer", "description": "API key."}
        }
        doc["security"] = [{"bearer": []}]
    if metrics_secured:
        doc["components"].setdefault("securitySchemes", {})["metricsKey"] = {
            "type": "http",
            "scheme": "bearer",
            "description": "The key whose SHA-256 is TOOLREF_METRICS_KEY.",
        }
        paths["/metrics"]["get"]["security"] = [{"metricsKey": []}]
    return doc
