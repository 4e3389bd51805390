"""Where one side of a tool invocation sits in a message list, and how to edit it there.

A format module walks its messages and yields `Site`s: the path to the object that holds a
payload member (or, once rewritten, its `toolRef` marker), the id that pairs a call with its
result, and which members carry the arguments and the result. Everything else is generic.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from toolref.kit import spans

Path = tuple[int | str, ...]

MARKER: Final = "toolRef"
# Present only when a marker stands for two payload members whose original order the
# default restoration (arguments, then result, at the marker's place) would not reproduce.
ORDER: Final = "toolRefOrder"


@dataclass(frozen=True, slots=True)
class Site:
    """One call side, result side, or both (formats that keep them in one object)."""

    path: Path
    call_id: str | None
    name: str | None = None
    args_key: str | None = None
    result_key: str | None = None
    is_error: bool = False
    # A result with no payload member (an Anthropic tool_result without content): it
    # answers its call, but there is nothing to replace.
    bare: bool = False

    @property
    def message(self) -> int:
        index = self.path[0]
        return index if isinstance(index, int) else -1

    @property
    def payload_keys(self) -> tuple[str, ...]:
        return tuple(k for k in (self.args_key, self.result_key) if k is not None)


def get_at(messages: Sequence[Any], path: Path) -> Any:
    node: Any = messages
    for step in path:
        node = node[step]
    return node


Change = Callable[[Any], Any]
_CHANGE: Final[Any] = object()  # marks, in a trie of paths, the change at that node


def update_all(messages: Sequence[Any], changes: Mapping[Path, Change]) -> list[Any]:
    """Copy of `messages` with the object at each path replaced by `change(it)`. Only the
    containers on the way are copied, each once however many changes it holds (so a message
    with thousands of markers costs one copy of it, not one per marker); the input is never
    modified. A change at a path below another's is made first, and the outer change
    receives the object with it."""
    trie: dict[Any, Any] = {}
    for path, change in changes.items():
        node = trie
        for step in path:
            node = node.setdefault(step, {})
        node[_CHANGE] = change
    out: list[Any] = _rebuilt(messages, trie)
    return list(out) if out is messages else out


def _rebuilt(value: Any, trie: dict[Any, Any]) -> Any:
    below = [(step, sub) for step, sub in trie.items() if step is not _CHANGE]
    if below:
        copy: Any = dict(value) if isinstance(value, dict) else list(value)
        for step, sub in below:
            copy[step] = _rebuilt(copy[step], sub)
        value = copy
    change = trie.get(_CHANGE)
    return change(value) if change is not None else value


def to_marker(obj: dict[str, Any], keys: tuple[str, ...], ref: str) -> dict[str, Any]:
    """`obj` with its payload `keys` removed and `toolRef` at the place of the first."""
    order = list(obj)
    first = min(order.index(k) for k in keys)
    marker: dict[str, Any] = {}
    for key in order:
        if key in keys:
            if order.index(key) == first:
                marker[MARKER] = ref
        else:
            marker[key] = obj[key]
    if _restored_order(list(marker), keys) != order:
        marker[ORDER] = order
    return marker


def from_marker(marker: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """Inverse of `to_marker`: `values` (payload key -> value) back in their places."""
    keys = tuple(values)
    order = _restored_order([k for k in marker if k != ORDER], keys)
    listed = marker.get(ORDER)
    if isinstance(listed, list):
        listed = [key for key in listed if isinstance(key, str)]
        named = set(listed)  # a set: a list's `in` made a long order quadratic
        order = [*listed, *(key for key in order if key not in named)]
    restored: dict[str, Any] = {}
    for key in order:
        if key in values:
            restored[key] = values[key]
        elif key in marker and key not in (MARKER, ORDER):
            restored[key] = marker[key]
    return restored


def _restored_order(marker_keys: list[str], keys: tuple[str, ...]) -> list[str]:
    order: list[str] = []
    for key in marker_keys:
        if key == MARKER:
            order.extend(keys)
        elif key != ORDER:
            order.append(key)
    return order


def to_marker_text(text: str, at: int, keys: tuple[str, ...], ref: str) -> tuple[str, list[str]]:
    """`to_marker` on the object written at `text[at:]`: the marker's text, every other
    member as written; and the text of each payload in `keys` (in that order)."""
    found, _ = spans.members(text, at, wanted="")
    order = list(found)
    first = min(order.index(k) for k in keys)
    parts: list[str] = []
    kept: list[str] = []
    for index, key in enumerate(order):
        if key not in keys:
            parts.append(spans.member_text(text, found[key]))
            kept.append(key)
        elif index == first:
            parts.append(f'"{MARKER}":' + json.dumps(ref))
            kept.append(MARKER)
    if _restored_order(kept, keys) != order:
        parts.append(f'"{ORDER}":' + json.dumps(order, ensure_ascii=False))
    payloads = [text[found[k].start : found[k].end] for k in keys]
    return "{" + ",".join(parts) + "}", payloads


def from_marker_text(text: str, at: int, values: dict[str, str]) -> str:
    """`from_marker` on the marker written at `text[at:]`: `values` maps each payload key
    to its JSON text; every other member comes back as written."""
    found, _ = spans.members(text, at, wanted=ORDER)
    keys = tuple(values)
    order = _restored_order([k for k in found if k != ORDER], keys)
    listed = found[ORDER].value if ORDER in found else None
    if isinstance(listed, list):
        listed = [key for key in listed if isinstance(key, str)]
        named = set(listed)  # a set: a list's `in` made a long order quadratic
        order = [*listed, *(key for key in order if key not in named)]
    parts: list[str] = []
    for key in order:
        if key in values:
            parts.append(json.dumps(key, ensure_ascii=False) + ":" + values[key])
        elif key in found and key not in (MARKER, ORDER):
            parts.append(spans.member_text(text, found[key]))
    return "{" + ",".join(parts) + "}"
