"""The fluent update builder: `tracker.update(id).status("completed").text("done").send()`."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Self

from toolref.acp.bounds import FIELD_DEPTH, ITEM_DEPTH, MAX_VALUE_BYTES, Budget, shown
from toolref.acp.content import diff_content, location, terminal_content, text_content
from toolref.acp.items import checked_content, checked_location
from toolref.acp.kind import ToolKind, as_kind
from toolref.acp.state import ToolCallState, ToolCallStatus
from toolref.wire.canonical import canonical_json
from toolref.wire.encoding import LONE_SURROGATE
from toolref.wire.errors import AcpError, CanonicalizationError

if TYPE_CHECKING:
    from toolref.acp.tracker import ToolCallTracker

Change = Callable[[ToolCallState], None]
# Levels of objects and lists a content item or location may have, its `_meta` included:
# what puts its notification at serde_json's limit as a JSON-RPC line (`bounds`).
MAX_ITEM_DEPTH: Final = ITEM_DEPTH


class FieldChange:
    """A change to one field of a call's state (its ACP name in `field`): the tracker then
    hashes and measures that field only, not the whole call, when it sends."""

    __slots__ = ("apply", "field")

    def __init__(self, field: str, apply: Change) -> None:
        self.field = field
        self.apply = apply

    def __call__(self, state: ToolCallState) -> None:
        self.apply(state)


def clean(item: Any, max_bytes: int = MAX_VALUE_BYTES) -> dict[str, Any]:
    """A deep copy of a content item or location without null members (v1 reads null as
    "no change", and an item's optional members are simply left out), but for what a
    `_meta` holds: opaque to ACP ("MUST NOT make assumptions about values"), so carried as
    given, nulls included. `AcpError` when any of it has no JSON form: taken, it would be
    the call's state, and every later update of the call would fail; and past
    `MAX_ITEM_DEPTH` levels or `max_bytes` of JSON (`bounds`). A walk that allocates
    nothing checks those first (a value reused under many keys is refused before any copy
    of it is made), then one copy and one JSON check: linear in the item's JSON, and the
    walk stopped at `max_bytes`."""
    if not isinstance(item, Mapping):
        raise AcpError(
            f"a content item or location is a {type(item).__name__} ({item!r:.60}), not an "
            "object; make content items with text_content(...), diff_content(...) or "
            "terminal_content(...), locations with location(path, line) (toolref.acp)"
        )
    _checked_bounds(item, Budget("a content item or location", max_bytes, MAX_ITEM_DEPTH))
    out = _copied(item)
    _json_form("a content item or location", out)
    return out


def _copied(item: Mapping[Any, Any]) -> dict[str, Any]:
    """`item` copied (later changes by the caller do not leak), null members of its objects
    left out but under a `_meta` (carried as given); a value reused in it is copied at
    each use, as its JSON writes it. A walk with a stack of its own, not Python's, of an
    item whose depth and size `_checked_bounds` has bounded: O(the item's JSON)."""
    top: dict[str, Any] = {}
    stack: list[tuple[Any, Any, bool]] = [(item, top, False)]  # from, to, under a `_meta`
    while stack:
        source, target, meta = stack.pop()
        is_object = isinstance(source, Mapping)
        for key, value in source.items() if is_object else enumerate(source):
            if value is None and is_object and not meta:
                continue
            if isinstance(value, Mapping | list | tuple):  # a tuple: the list it is sent as
                held: Any = {} if isinstance(value, Mapping) else []
                stack.append((value, held, meta or (is_object and key == "_meta")))
            else:
                held = value
            if is_object:
                target[key] = held
            else:
                target.append(held)
    return top


def item_list(name: str, items: Any) -> list[Any]:
    """`items` as a list, when it is a collection of items; else `AcpError` saying to give
    a list (one item, a str or None is a common slip)."""
    example = "text_content('...')" if name == "content" else "location('/src/app.py')"
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
        raise AcpError(
            f"{name} is a list of items, not one {type(items).__name__} ({items!r:.60}): "
            f"{name}=[item], such as {name}=[toolref.acp.{example}] ({name}=[] for none)"
        )
    return list(items)


def as_status(value: ToolCallStatus | str) -> ToolCallStatus:
    try:
        return ToolCallStatus(value)
    except ValueError:
        valid = ", ".join(s.value for s in ToolCallStatus)
        raise AcpError(f"tool call status {value!r} is not one of ACP v1's: {valid}") from None


def checked_json(field: str, value: Any, max_bytes: int = MAX_VALUE_BYTES) -> Any:
    """`value` when it has a JSON form (what `rawInput` / `rawOutput` carry) within
    `FIELD_DEPTH` levels and `max_bytes` of JSON (`bounds`); else `AcpError` naming the
    field. Checked where it is given: found only when sent (or copied: `copy.deepcopy` is
    Python's stack, RecursionError at about 500 levels), the value would already be the
    call's state, and every later update of the call would fail. Two walks of the value:
    linear in its JSON, the first stopped at `max_bytes`."""
    _checked_bounds(value, Budget(field, max_bytes, FIELD_DEPTH))
    return _json_form(field, value)


def _json_form(field: str, value: Any) -> Any:
    """`value` when it has a JSON form (its depth already bounded); else `AcpError`."""
    try:
        canonical_json(value)
    except CanonicalizationError as exc:
        raise AcpError(
            f"{field} {shown(value, 80)} has no JSON form ({exc}); give JSON values: dicts "
            "with str keys, lists, str, int, float, bool",
            field=field,
        ) from None
    return value


def _checked_bounds(value: Any, budget: Budget) -> None:
    """`AcpError` when `value` has more than the budget's levels of objects and lists (or
    contains itself), or more of its bytes of JSON. A walk with a stack of its own (a
    string's bytes counted on a transient copy), each use of a shared value walked as its
    JSON writes it: O(its JSON), at most the budget. Mappings other than dicts, and tuples,
    are walked as the objects and lists they stand for (an item is copied as those)."""
    budget.spend(None, value)
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        is_object = isinstance(node, Mapping)
        if not is_object and not isinstance(node, list | tuple):
            continue  # a scalar, or what has no JSON form (the JSON check names it)
        if depth > budget.depth:
            raise budget.too_deep(field=budget.label)
        comma = False  # before every member but the first
        for key, member in node.items() if is_object else enumerate(node):
            budget.spend(key if is_object else None, member, comma)
            stack.append((member, depth + 1))
            comma = True


def checked_title(value: Any, where: str = "title") -> str:
    """`value` when clients can show it as a title: a non-empty str that UTF-8 carries
    (serde_json refuses a lone surrogate, and the whole notification with it)."""
    if not isinstance(value, str) or not value:
        raise AcpError(f"{where} {value!r:.80} must be a non-empty string; clients show it")
    found = LONE_SURROGATE.search(value)
    if found is not None:
        raise AcpError(
            f"{where} {value!r:.80} holds a lone UTF-16 surrogate "
            f"({found.group().encode('unicode_escape').decode()}), which UTF-8 has no form "
            "for and serde_json refuses (Rust ACP clients lose the whole notification); "
            "pair it or replace it with U+FFFD"
        )
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
        self._bytes = tracker.max_value_bytes  # JSON one value given here may take

    def _add(self, field: str, change: Change) -> Self:
        self._changes.append(FieldChange(field, change))
        return self

    def status(self, value: ToolCallStatus | str) -> Self:
        status = as_status(value)
        return self._add("status", lambda state: setattr(state, "status", status))

    def title(self, value: str) -> Self:
        _not_null("title", value)
        checked_title(value)
        return self._add("title", lambda state: setattr(state, "title", value))

    def kind(self, value: ToolKind | str) -> Self:
        kind = as_kind(value)
        return self._add("kind", lambda state: setattr(state, "kind", kind))

    def add_content(self, *items: Mapping[str, Any]) -> Self:
        added = [checked_content(clean(item, self._bytes)) for item in item_list("content", items)]
        return self._add("content", lambda state: state.content.extend(copy.deepcopy(added)))

    def set_content(self, items: Iterable[Mapping[str, Any]]) -> Self:
        replaced = [
            checked_content(clean(item, self._bytes)) for item in item_list("content", items)
        ]
        return self._add(
            "content", lambda state: setattr(state, "content", copy.deepcopy(replaced))
        )

    def clear_content(self) -> Self:
        return self.set_content([])

    def text(self, text: str) -> Self:
        return self.add_content(text_content(text))

    def diff(self, path: str, new_text: str, old_text: str | None = None) -> Self:
        return self.add_content(diff_content(path, new_text, old_text))

    def terminal(self, terminal_id: str) -> Self:
        return self.add_content(terminal_content(terminal_id))

    def set_locations(self, items: Iterable[Mapping[str, Any]]) -> Self:
        replaced = [
            checked_location(clean(item, self._bytes)) for item in item_list("locations", items)
        ]
        return self._add(
            "locations", lambda state: setattr(state, "locations", copy.deepcopy(replaced))
        )

    def add_location(self, path: str, line: int | None = None) -> Self:
        found = checked_location(location(path, line))
        return self._add("locations", lambda state: state.locations.append(found))

    def clear_locations(self) -> Self:
        return self.set_locations([])

    def raw_input(self, value: Any) -> Self:
        _not_null("rawInput", value)
        kept = copy.deepcopy(checked_json("rawInput", value, self._bytes))
        return self._add("rawInput", lambda state: setattr(state, "raw_input", copy.deepcopy(kept)))

    def raw_output(self, value: Any) -> Self:
        _not_null("rawOutput", value)
        kept = copy.deepcopy(checked_json("rawOutput", value, self._bytes))
        return self._add(
            "rawOutput", lambda state: setattr(state, "raw_output", copy.deepcopy(kept))
        )

    def send(self) -> list[dict[str, Any]]:
        """Apply the changes; the notifications sent now (none if nothing changed or the
        update is held to coalesce with the next ones)."""
        changes, self._changes = self._changes, []  # a builder's changes apply once
        return self._tracker.apply(self._call_id, changes)
