"""The fluent update builder: `tracker.update(id).status("completed").text("done").send()`."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Self

from toolref.acp.content import (
    MAX_LINE,
    diff_content,
    is_line,
    location,
    terminal_content,
    text_content,
)
from toolref.acp.kind import ToolKind, as_kind
from toolref.acp.state import ToolCallState, ToolCallStatus
from toolref.wire.canonical import canonical_json
from toolref.wire.errors import AcpError, CanonicalizationError

if TYPE_CHECKING:
    from toolref.acp.tracker import ToolCallTracker

Change = Callable[[ToolCallState], None]


def clean(item: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of a content item or location without null members (v1 reads null as
    "no change", and an item's optional members are simply left out)."""
    return {k: _clean_value(v) for k, v in item.items() if v is not None}


# What each content item must carry (ACP v1's schema): sent without it, every later update
# of the call's content would send it again, and a client would refuse each.
_CONTENT_MEMBERS: dict[str, tuple[str, ...]] = {
    "content": ("content",),
    "diff": ("path", "newText"),
    "terminal": ("terminalId",),
}


def checked_content(item: dict[str, Any]) -> dict[str, Any]:
    """`item` when ACP v1 takes it as a tool call's content item; else `AcpError` naming
    what is missing and how to make one."""
    kind = item.get("type")
    members = _CONTENT_MEMBERS.get(kind) if isinstance(kind, str) else None
    if members is None:
        raise AcpError(
            f"a content item of type {kind!r}: ACP v1's are content, diff and terminal; make "
            "one with text_content, diff_content or terminal_content"
        )
    lacking = [name for name in members if name not in item]
    block = item.get("content")
    if kind == "content" and not lacking:
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            lacking = ["content.type"]
        elif block["type"] == "text" and not isinstance(block.get("text"), str):
            lacking = ["content.text"]
    if lacking:
        raise AcpError(
            f"a {kind} content item lacks {', '.join(lacking)}; make it with "
            f"{kind}_content(...) (toolref.acp.content)"
        )
    return item


def checked_location(item: dict[str, Any]) -> dict[str, Any]:
    """`item` when ACP v1 takes it as a location (a path; a line that is a uint32); else
    `AcpError` saying what to give."""
    path, line = item.get("path"), item.get("line")
    if not isinstance(path, str) or not path:
        raise AcpError(f"a location's path is {path!r}: give the file's absolute path")
    if line is not None and not is_line(line):
        raise AcpError(
            f"a location's line is {line!r}: give a line number from 0 to {MAX_LINE} (the "
            "schema's uint32), or none"
        )
    return item


def _clean_value(value: Any) -> Any:
    if isinstance(value, Mapping):
        return clean(value)
    if isinstance(value, list):
        return [_clean_value(v) for v in value]
    return value


def as_status(value: ToolCallStatus | str) -> ToolCallStatus:
    try:
        return ToolCallStatus(value)
    except ValueError:
        valid = ", ".join(s.value for s in ToolCallStatus)
        raise AcpError(f"tool call status {value!r} is not one of ACP v1's: {valid}") from None


def checked_json(field: str, value: Any) -> Any:
    """`value` when it has a JSON form (what `rawInput` / `rawOutput` carry); else
    `AcpError` naming the field. Checked where it is given: found only when sent, the value
    would already be the call's state, and every later update of the call would fail."""
    try:
        canonical_json(value)
    except CanonicalizationError as exc:
        raise AcpError(
            f"{field} {value!r:.80} has no JSON form ({exc}); give JSON values: dicts with "
            "str keys, lists, str, int, float, bool",
            field=field,
        ) from None
    return value


def _not_null(field: str, value: Any) -> None:
    if value is None:
        raise AcpError(
            f"{field} cannot be set to null: ACP v1 reads null as 'no change', so a value "
            "once sent cannot be cleared; send a new value instead",
            field=field,
        )


class UpdateBuilder:
    """Collects changes to one call; `send()` hands them to the tracker, which sends only
    the fields whose values end up different from what the client already has."""

    def __init__(self, tracker: ToolCallTracker, call_id: str) -> None:
        self._tracker = tracker
        self._call_id = call_id
        self._changes: list[Change] = []

    def _add(self, change: Change) -> Self:
        self._changes.append(change)
        return self

    def status(self, value: ToolCallStatus | str) -> Self:
        status = as_status(value)
        return self._add(lambda state: setattr(state, "status", status))

    def title(self, value: str) -> Self:
        _not_null("title", value)
        if not isinstance(value, str) or not value:
            raise AcpError(f"title {value!r} must be a non-empty string; clients show it")
        return self._add(lambda state: setattr(state, "title", value))

    def kind(self, value: ToolKind | str) -> Self:
        kind = as_kind(value)
        return self._add(lambda state: setattr(state, "kind", kind))

    def add_content(self, *items: Mapping[str, Any]) -> Self:
        added = [checked_content(clean(item)) for item in items]
        return self._add(lambda state: state.content.extend(copy.deepcopy(added)))

    def set_content(self, items: Iterable[Mapping[str, Any]]) -> Self:
        replaced = [checked_content(clean(item)) for item in items]
        return self._add(lambda state: setattr(state, "content", copy.deepcopy(replaced)))

    def clear_content(self) -> Self:
        return self.set_content([])

    def text(self, text: str) -> Self:
        return self.add_content(text_content(text))

    def diff(self, path: str, new_text: str, old_text: str | None = None) -> Self:
        return self.add_content(diff_content(path, new_text, old_text))

    def terminal(self, terminal_id: str) -> Self:
        return self.add_content(terminal_content(terminal_id))

    def set_locations(self, items: Iterable[Mapping[str, Any]]) -> Self:
        replaced = [checked_location(clean(item)) for item in items]
        return self._add(lambda state: setattr(state, "locations", copy.deepcopy(replaced)))

    def add_location(self, path: str, line: int | None = None) -> Self:
        found = checked_location(location(path, line))
        return self._add(lambda state: state.locations.append(found))

    def clear_locations(self) -> Self:
        return self.set_locations([])

    def raw_input(self, value: Any) -> Self:
        _not_null("rawInput", value)
        kept = copy.deepcopy(checked_json("rawInput", value))
        return self._add(lambda state: setattr(state, "raw_input", copy.deepcopy(kept)))

    def raw_output(self, value: Any) -> Self:
        _not_null("rawOutput", value)
        kept = copy.deepcopy(checked_json("rawOutput", value))
        return self._add(lambda state: setattr(state, "raw_output", copy.deepcopy(kept)))

    def send(self) -> list[dict[str, Any]]:
        """Apply the changes; the notifications sent now (none if nothing changed or the
        update is held to coalesce with the next ones)."""
        changes, self._changes = self._changes, []  # a builder's changes apply once
        return self._tracker.apply(self._call_id, changes)
