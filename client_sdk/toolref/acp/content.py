"""Constructors for ACP tool-call content items and locations (plain wire dicts)."""

from __future__ import annotations

from typing import Any, Final

MAX_LINE: Final = 2**32 - 1  # a location's `line` is a uint32 in ACP v1's schema


def is_line(value: Any) -> bool:
    """Whether `value` is a line ACP v1 takes: an int (not a bool) from 0 to `MAX_LINE`."""
    return type(value) is int and 0 <= value <= MAX_LINE


def text_content(text: str) -> dict[str, Any]:
    """A `content` item holding one text block."""
    return {"type": "content", "content": {"type": "text", "text": text}}


def diff_content(path: str, new_text: str, old_text: str | None = None) -> dict[str, Any]:
    """A `diff` item; `old_text=None` means a new file. `path` must be absolute."""
    item: dict[str, Any] = {"type": "diff", "path": path, "newText": new_text}
    if old_text is not None:
        item["oldText"] = old_text
    return item


def terminal_content(terminal_id: str) -> dict[str, Any]:
    """A `terminal` item: the id of a terminal made with `terminal/create`."""
    return {"type": "terminal", "terminalId": terminal_id}


def location(path: str, line: int | None = None) -> dict[str, Any]:
    """A file the call reads or changes (absolute path; `line` as the client counts it)."""
    return {"path": path} if line is None else {"path": path, "line": line}
