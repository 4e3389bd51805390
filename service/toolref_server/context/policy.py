"""Whether a request is edited: its `Toolref-Context-Editing` header within the policy's
mode (`toolref_server.settings.context`). Pure."""

from __future__ import annotations

from typing import Final

from toolref.wire.errors import BadRequestError
from toolref_server.settings.context import Policy

HEADER_VALUES: Final = ("on", "off")


def wanted(policy: Policy, header: str | None) -> bool:
    """Is this request edited? Its `Toolref-Context-Editing` header (on, off) decides
    within the policy's mode; another value is a `BadRequestError` saying which to send."""
    if header is not None:
        value = header.strip().lower()
        if value not in HEADER_VALUES:
            raise BadRequestError(
                f"Toolref-Context-Editing is {header[:40]!r}; send `on` to have old tool "
                "results replaced by their summaries, `off` to refuse it, or no header for "
                "the operator's default"
            )
        if policy.mode == "never":
            return False
        return value == "on"
    return policy.mode == "on"
