"""Errors the relay answers itself, in the agent's provider's shape, so that the agent's
SDK raises its own error type and shows the message (never a toolref problem document).

Anthropic: `{"type": "error", "error": {"type": ..., "message": ...}}`.
OpenAI: `{"error": {"message": ..., "type": ..., "param": null, "code": ...}}`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

Provider = Literal["anthropic", "openai"]

# Anthropic's error types by status (docs.anthropic.com, "Errors").
_ANTHROPIC_TYPES: Final = {
    400: "invalid_request_error",
    403: "permission_error",
    413: "request_too_large",
    502: "api_error",
    503: "overloaded_error",
}
_OPENAI_TYPES: Final = {
    400: "invalid_request_error",
    403: "invalid_request_error",
    413: "invalid_request_error",
}


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """An answer the relay makes: status, JSON body, and its media type."""

    status: int
    body: bytes
    media_type: str = "application/json"


def provider_of(path: str, headers: Sequence[tuple[str, str]]) -> Provider:
    """Anthropic for its Messages API paths or an `anthropic-version` header; OpenAI's
    shape for everything else (the shape most other providers copy)."""
    if "/messages" in path or any(k.lower() == "anthropic-version" for k, _ in headers):
        return "anthropic"
    return "openai"


def error_reply(provider: Provider, status: int, message: str, code: str) -> ErrorReply:
    """The provider's error body for `status`; `code` is toolref's (OpenAI's `code`)."""
    if provider == "anthropic":
        kind = _ANTHROPIC_TYPES.get(status, "api_error")
        body: object = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        kind = _OPENAI_TYPES.get(status, "server_error")
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return ErrorReply(status, json.dumps(body).encode())
