"""Errors in an LLM provider's own shape, so that its SDK raises its own error type and
shows the message (never a toolref problem document): the errors the relay answers itself,
and the toolref problems `toolref.Transport` hands an official SDK
(`toolref.sending.refusals`).

Anthropic: `{"type": "error", "error": {"type": ..., "message": ...}}`.
OpenAI: `{"error": {"message": ..., "type": ..., "param": null, "code": ...}}`.
Gemini: `{"error": {"code": <status>, "message": ..., "status": "INVALID_ARGUMENT"}}`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from toolref.wire import redaction

Provider = Literal["anthropic", "openai", "gemini"]

# Anthropic's error types by status (docs.anthropic.com, "Errors"); another 4xx is
# `invalid_request_error`, another 5xx `api_error`.
_ANTHROPIC_TYPES: Final = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}
# OpenAI's: `rate_limit_error` for 429, else `invalid_request_error` for a 4xx,
# `server_error` for a 5xx.
_OPENAI_TYPES: Final = {429: "rate_limit_error"}
# Google's canonical codes by status (cloud.google.com/apis/design/errors).
_GEMINI_STATUSES: Final = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_GEMINI_PATH: Final = (":generateContent", ":streamGenerateContent", ":countTokens", "/v1beta/")


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """An answer the relay makes: status, JSON body, and its media type."""

    status: int
    body: bytes
    media_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()  # beside the body's: `Retry-After`, say


def provider_of(path: str, headers: Sequence[tuple[str, str]]) -> Provider:
    """Gemini for its API's paths or an `x-goog-api-key` header; Anthropic for its
    Messages API paths or an `anthropic-version` header; OpenAI's shape for everything else
    (the shape most other providers copy)."""
    names = {k.lower() for k, _ in headers}
    if any(part in path for part in _GEMINI_PATH) or "x-goog-api-key" in names:
        return "gemini"
    if "/messages" in path or "anthropic-version" in names:
        return "anthropic"
    return "openai"


def error_reply(provider: Provider, status: int, message: str, code: str) -> ErrorReply:
    """The provider's error body for `status`; `code` is toolref's (OpenAI's `code`). A URL
    in `message` (the gateway's, the fallback's) is shown with its credentials masked."""
    message = redaction.urls_in(message)
    body: object
    client_error = 400 <= status < 500
    if provider == "anthropic":
        default = "invalid_request_error" if client_error else "api_error"
        kind = _ANTHROPIC_TYPES.get(status, default)
        body = {"type": "error", "error": {"type": kind, "message": message}}
    elif provider == "gemini":
        canonical = _GEMINI_STATUSES.get(status, "INTERNAL" if status >= 500 else "UNKNOWN")
        body = {"error": {"code": status, "message": message, "status": canonical}}
    else:
        default = "invalid_request_error" if client_error else "server_error"
        kind = _OPENAI_TYPES.get(status, default)
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return ErrorReply(status, json.dumps(body).encode())
