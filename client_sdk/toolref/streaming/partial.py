"""Best-effort parse of half-streamed arguments, for display only."""

from __future__ import annotations

from typing import Any

from pydantic_core import from_json


def partial_arguments(text: str) -> dict[str, Any] | None:
    """The object `text` begins, with open strings kept: `{"city": "Par` gives `{"city": "Par"}`.

    Numbers and literals at the very end may still change (`1` can become `12`), and data
    after a complete object is ignored, so never run a call on this: the final parse is the
    buffer's strict one.
    """
    if not text.strip():
        return {}
    try:
        value = from_json(text, allow_partial="trailing-strings")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
