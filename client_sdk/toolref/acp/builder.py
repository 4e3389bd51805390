"""The fluent update builder: `tracker.update(id).status("completed").text("done").send()`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Self

from toolref.acp.content import diff_content, location, terminal_content, text_content
from toolref.acp.kind import ToolKind
from toolref.acp.state import ToolCallState, ToolCallStatus
from toolref.errors import AcpError

if TYPE_CHECKING:
    from toolref.acp.tracker import ToolCallTracker

Change = Callable[[ToolCallState], None]


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
        status = ToolCallStatus(value)
        return self._add(lambda state: setattr(state, "status", status))

    def title(self, value: str) -> Self:
        _not_null("title", value)
        return self._add(lambda state: setattr(state, "title", value))

    def kind(self, value: ToolKind | str) -> Self:
        kind = ToolKind(value)
        return self._add(lambda state: setattr(state, "kind", kind))

    def add_content(self, *items: Mapping[str, Any]) -> Self:
        added = [dict(item) for item in items]
        return self._add(lambda state: state.content.extend(added))

    def set_content(self, items: Iterable[Mapping[str, Any]]) -> Self:
        replaced = [dict(item) for item in items]
        return self._add(lambda state: setattr(state, "content", list(replaced)))

    def clear_content(self) -> Self:
        return self.set_content([])

    def text(self, text: str) -> Self:
        return self.add_content(text_content(text))

    def diff(self, path: str, new_text: str, old_text: str | None = None) -> Self:
        return self.add_content(diff_content(path, new_text, old_text))

    def terminal(self, terminal_id: str) -> Self:
        return self.add_content(terminal_content(terminal_id))

    def set_locations(self, items: Iterable[Mapping[str, Any]]) -> Self:
        replaced = [dict(item) for item in items]
        return self._add(lambda state: setattr(state, "locations", list(replaced)))

    def add_location(self, path: str, line: int | None = None) -> Self:
        return self._add(lambda state: state.locations.append(location(path, line)))

    def clear_locations(self) -> Self:
        return self.set_locations([])

    def raw_input(self, value: Any) -> Self:
        _not_null("rawInput", value)
        return self._add(lambda state: setattr(state, "raw_input", value))

    def raw_output(self, value: Any) -> Self:
        _not_null("rawOutput", value)
        return self._add(lambda state: setattr(state, "raw_output", value))

    def send(self) -> list[dict[str, Any]]:
        """Apply the changes; the notifications sent now (none if nothing changed or the
        update is held to coalesce with the next ones)."""
        return self._tracker.apply(self._call_id, self._changes)
