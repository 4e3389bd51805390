"""The OpenAPI 3.1 document, built from the same pydantic models the routes use."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from toolref import __version__
from toolref.canonical import REF_LENGTH
from toolref.errors import PROBLEM_BASE
from toolref.models import (
    Capabilities,
    FindMissingResponse,
    Health,
    Invocation,
    Problem,
    RefsRequest,
    RegisterRequest,
    RegisterResponse,
    ResolveResponse,
)
from toolref.protocol import PROTOCOL_HEADER, PROTOCOL_HIGH, PROTOCOL_LOW
from toolref_server.codec import JSON_TYPE, MSGPACK_TYPE, PROBLEM_TYPE

_MODELS: tuple[type[BaseModel], ...] = (
    Capabilities,
    FindMissingResponse,
    Health,
    Invocation,
    Problem,
    RefsRequest,
    RegisterRequest,
    RegisterResponse,
    ResolveResponse,
)
_REF_PATTERN = "^tr_[a-z2-7]{25}[aeimquy4]$"

_ERRORS = {
    "400": "Malformed body or Toolref-Protocol header, or a ref endpoint called as protocol 1.",
    "401": "Missing or unknown API key.",
    "404": "Unknown ref (never registered, expired, evicted, or another tenant's).",
    "409": "Conflict: a 128-bit ref collision.",
    "413": "Body, inflated body or batch over its limit.",
    "415": "Unsupported Content-Type or Content-Encoding.",
    "422": "Body parsed but invalid: shape, nesting depth, NaN/Infinity, or a malformed ref.",
    "503": "The store is unreachable; retry after Retry-After seconds.",
}


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _protocol_header() -> dict[str, Any]:
    return {
        "description": "Protocol version the server used.",
        "schema": {"type": "integer", "minimum": PROTOCOL_LOW, "maximum": PROTOCOL_HIGH},
    }


def _body(model: type[BaseModel]) -> dict[str, Any]:
    return {JSON_TYPE: {"schema": _ref(model)}, MSGPACK_TYPE: {"schema": _ref(model)}}


def _ok(model: type[BaseModel], description: str, **headers: Any) -> dict[str, Any]:
    return {
        "description": description,
        "headers": {PROTOCOL_HEADER: _protocol_header(), **headers},
        "content": _body(model),
    }


def _problem(description: str) -> dict[str, Any]:
    headers: dict[str, Any] = {PROTOCOL_HEADER: _protocol_header()}
    if description == _ERRORS["503"]:
        headers["Retry-After"] = {"schema": {"type": "integer", "minimum": 0}}
    return {
        "description": description,
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
) -> dict[str, Any]:
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
        "responses": {"200": ok, **{code: _problem(_ERRORS[code]) for code in errors}},
    }
    if request is not None:
        operation["requestBody"] = {"required": True, "content": _body(request)}
    if not secured:
        operation["security"] = []
    return operation


_REF_ERRORS = ("400", "401", "413", "415", "422", "503")


@cache
def document(secured: bool = True) -> dict[str, Any]:
    """OpenAPI 3.1 description of every endpoint. `secured`: API keys are configured."""
    _, top = models_json_schema(
        [(model, "validation") for model in _MODELS],
        ref_template="#/components/schemas/{model}",
    )
    schemas = top.get("$defs", {})
    schemas["Problem"]["properties"]["type"]["description"] = (
        f"Stable problem type, `{PROBLEM_BASE}<slug>`."
    )
    ref_param = {
        "name": "ref",
        "in": "path",
        "required": True,
        "schema": {
            "type": "string",
            "minLength": REF_LENGTH,
            "maxLength": REF_LENGTH,
            "pattern": _REF_PATTERN,
        },
    }
    get_ok = _ok(
        Invocation,
        "The invocation. Immutable: the ETag is its SHA-256.",
        ETag={"schema": {"type": "string"}},
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
        "headers": {PROTOCOL_HEADER: _protocol_header(), "ETag": {"schema": {"type": "string"}}},
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
        "/healthz": {
            "get": _operation(
                "Liveness", "healthz", _ok(Health, "The process is up."), (), secured=False
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
        "/openapi.json": {
            "get": {
                "summary": "This document",
                "operationId": "openapi",
                "security": [],
                "responses": {
                    "200": {
                        "description": "OpenAPI 3.1 document.",
                        "content": {JSON_TYPE: {"schema": {"type": "object"}}},
                    }
                },
            }
        },
    }
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "toolref",
            "version": __version__,
            "description": "Content-addressed references for LLM tool-call payloads.",
        },
        "paths": paths,
        "components": {"schemas": schemas},
    }
    if secured:
        doc["components"]["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer", "description": "API key."}
        }
        doc["security"] = [{"bearer": []}]
    return doc
