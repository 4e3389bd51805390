"""ACP `plan` entries from the arguments of todo-list tools."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from toolref.wire.encoding import LONE_SURROGATE
from toolref.wire.errors import AcpError

STATUSES: Final = frozenset(("pending", "in_progress", "completed"))
PRIORITIES: Final = frozenset(("high", "medium", "low"))
# Keys that hold an entry's text: todo_write / TodoWrite use `content`, update_plan `step`.
_TEXT_KEYS: Final = ("content", "step", "title", "text", "description")


def plan_entries(source: Any) -> list[dict[str, str]]:
    """Entries for a whole `plan`: from `{"todos": [...]}` (todo_write, TodoWrite),
    `{"plan": [...]}` (update_plan), or a list. A status ACP v1 lacks becomes `pending`
    (it has no `failed` or `cancelled`); a missing or unknown priority becomes `medium`.
    A lone surrogate in an entry's text (a model's `"\\ud800"`) becomes U+FFFD: the text
    is for people, and serde_json (Rust ACP clients) parses no plan holding one."""
    items = source
    if isinstance(source, Mapping):
        items = source.get("todos", source.get("plan"))
    if not isinstance(items, list):
        raise AcpError(
            "plan source is neither a list of entries nor arguments with a `todos` or `plan` "
            f"list (got {type(items).__name__}); pass the todo tool's arguments"
        )
    return [_entry(item, position) for position, item in enumerate(items)]


def _entry(item: Any, position: int) -> dict[str, str]:
    if isinstance(item, str):
        return {"content": _shown(item), "priority": "medium", "status": "pending"}
    if not isinstance(item, Mapping):
        raise AcpError(f"plan entry {position} is a {type(item).__name__}, not an object")
    text = next((item[key] for key in _TEXT_KEYS if isinstance(item.get(key), str)), None)
    if text is None:
        raise AcpError(
            f"plan entry {position} has no text: give it `content` (or `step`) as a string"
        )
    status = item.get("status")
    priority = item.get("priority")
    return {
        "content": _shown(text),
        "priority": priority if isinstance(priority, str) and priority in PRIORITIES else "medium",
        "status": status if isinstance(status, str) and status in STATUSES else "pending",
    }


def _shown(text: str) -> str:
    return LONE_SURROGATE.sub("\ufffd", text)
