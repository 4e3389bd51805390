"""Object arguments: argument patches applied to the object so far, and sizes as JSON."""

from __future__ import annotations

import json
from typing import Any

from toolref.streaming.chunk import ArgPatch
from toolref.wire.errors import ChunkSequenceError

# Elements a patch may set past the end of an array, by default (`ToolBuffer.max_array_gap`):
# the gap is filled with nulls, so an index alone (`$.a[100000000]`, 20 bytes) held memory
# in proportion to its value, not to the stream.
MAX_ARRAY_GAP = 1024


def json_length(value: Any) -> int:
    """The characters of `value` as compact JSON (what `raw_arguments` holds for it)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str))


def held_length(value: Any) -> int:
    """The characters `value` holds as the buffer counts them after patches: its leaves as
    JSON (strings appended in pieces as the joined string), nulls and the keys and
    punctuation of objects and lists not counted. O(size of value)."""
    total, stack = 0, [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
        elif isinstance(node, Pieces):
            total += 2 + sum(json_length(part) - 2 for part in node.parts)
        elif node is not None:
            total += json_length(node)
    return total


def patch_change(obj: dict[str, Any] | None, patch: ArgPatch) -> int:
    """The characters applying `patch` to `obj` changes (`held_length`): its value's, less
    those of the value it sets again; a string appended to a string adds its own (`obj`
    None: its value's, at most what it changes on any object). O(path + the replaced value,
    which the patch drops: linear over a stream)."""
    value = patch.value
    existing: Any = None
    if obj is not None and patch.path:
        existing = obj
        for part in patch.path:
            existing = _get(existing, part)
            if existing is None:
                break
    if patch.append and isinstance(value, str) and isinstance(existing, str | Pieces):
        return json_length(value) - 2
    return held_length(value) - held_length(existing)


class Pieces:
    """A string leaf appended in pieces (Vertex streams a long string as many values for one
    path), joined once when the object is read: `+` per piece copied the string so far each
    time, quadratic (2 MB in 5-character pieces took 38 s)."""

    __slots__ = ("parts",)

    def __init__(self, first: str) -> None:
        self.parts = [first]


def apply_patch(obj: dict[str, Any], patch: ArgPatch, max_gap: int = MAX_ARRAY_GAP) -> bool:
    """Set (or append to) the leaf `patch.path` names, making the objects and lists on the
    way; `ChunkSequenceError` for a path the earlier patches' shape does not allow, or for
    an array index more than `max_gap` past the array's end. True when the leaf is left as
    `Pieces` (`join_pieces` before reading `obj`). O(path + max_gap)."""
    if not patch.path:
        raise ChunkSequenceError("an argument patch needs a non-empty path below the root")
    node: Any = obj
    for part, following in zip(patch.path, patch.path[1:], strict=False):
        empty: Any = [] if isinstance(following, int) else {}
        node = _child(node, part, empty, patch, max_gap)
    last = patch.path[-1]
    value = patch.value
    if patch.append and isinstance(value, str):
        existing = _get(node, last)
        if isinstance(existing, Pieces):
            existing.parts.append(value)
            return True
        if isinstance(existing, str):
            value = Pieces(existing)
            value.parts.append(patch.value)
    _set(node, last, value, patch, max_gap)
    return isinstance(value, Pieces)


def join_pieces(obj: dict[str, Any]) -> None:
    """Join every `Pieces` leaf of `obj` into its string, in place: O(size of obj)."""
    stack: list[Any] = [obj]
    while stack:
        node = stack.pop()
        keys = node.keys() if isinstance(node, dict) else range(len(node))
        for key in keys:
            child = node[key]
            if isinstance(child, Pieces):
                node[key] = "".join(child.parts)
            elif isinstance(child, dict | list):
                stack.append(child)


def _get(node: Any, part: str | int) -> Any:
    if isinstance(node, dict):
        return node.get(part)
    if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
        return node[part]
    return None


def _set(node: Any, part: str | int, value: Any, patch: ArgPatch, max_gap: int) -> None:
    if isinstance(node, dict) and isinstance(part, str):
        node[part] = value
    elif isinstance(node, list) and isinstance(part, int) and part >= 0:
        if part - len(node) > max_gap:
            raise ChunkSequenceError(
                f"argument patch path {list(patch.path)!r} sets element {part} of an array "
                f"of {len(node)}, more than max_array_gap={max_gap} past its end (the gap is "
                "filled with nulls), so the stream is broken or hostile. If it is genuine, "
                "give the ToolBuffer a larger max_array_gap",
                limit="max_array_gap",
                maximum=max_gap,
            )
        node.extend([None] * (part + 1 - len(node)))
        node[part] = value
    else:
        raise ChunkSequenceError(
            f"argument patch path {list(patch.path)!r} steps with {part!r} into a "
            f"{type(node).__name__}; a patch must follow the shape earlier patches built"
        )


def _child(node: Any, part: str | int, empty: Any, patch: ArgPatch, max_gap: int) -> Any:
    child = _get(node, part)
    if child is None:
        child = empty
        _set(node, part, child, patch, max_gap)
    elif not isinstance(child, dict | list):
        held = "str" if isinstance(child, Pieces) else type(child).__name__
        raise ChunkSequenceError(
            f"argument patch path {list(patch.path)!r} steps through {part!r}, which holds "
            f"a {held}; a patch must follow the shape earlier patches built"
        )
    return child
