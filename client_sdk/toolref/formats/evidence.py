"""How strongly one message says it belongs to a format, for autodetection."""

from __future__ import annotations

from typing import Any, Final

FOREIGN: Final = 0  # cannot be this format
NEUTRAL: Final = 1  # could be (a plain text message fits several formats)
DISTINCTIVE: Final = 2  # only this format looks like this


def part_types(content: Any) -> set[str]:
    """The `type`s of the blocks of a list content (empty for string content)."""
    if not isinstance(content, list):
        return set()
    return {
        part["type"]
        for part in content
        if isinstance(part, dict) and isinstance(part.get("type"), str)
    }
