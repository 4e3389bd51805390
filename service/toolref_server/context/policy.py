"""Whether a request is edited: its `Toolref-Context-Editing` header within the policy's
mode (`toolref_server.settings.context`). Pure."""

from __future__ import annotations

from typing import Final

from toolref.asgi.scope import Scope, header_values
from toolref.wire.errors import BadRequestError
from toolref.wire.headers import CONTEXT_EDITING_HEADER
from toolref_server.settings.context import Policy

HEADER_VALUES: Final = ("on", "off")


def context_header(scope: Scope) -> str | None:
    """Every `Toolref-Context-Editing` value of the request, joined by commas (None: none):
    a proxy may add its `off` after the client's `on`."""
    return ", ".join(header_values(scope, CONTEXT_EDITING_HEADER)) or None


def wanted(policy: Policy, header: str | None) -> bool:
    """Is this request edited? Its `Toolref-Context-Editing` header (on, off; every value
    it was sent with, joined by commas, as HTTP joins repeated fields: one `off` refuses,
    whoever added it) decides within the policy's mode; another value is a
    `BadRequestError` saying which to send."""
    if header is not None:
        values = [part.strip().lower() for part in header.split(",")]
        if any(value not in HEADER_VALUES for value in values):
            raise BadRequestError(
                f"Toolref-Context-Editing is {header[:40]!r}; send `on` to have old tool "
                "results replaced by their summaries, `off` to refuse it, or no header for "
                "the operator's default"
            )
        if policy.mode == "never":
            return False
        return "off" not in values
    return policy.mode == "on"
