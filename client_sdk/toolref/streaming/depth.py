"""How deep streamed arguments and provider events may nest: checked before Python's
recursive JSON reader, writer and copier meet them.

`json.loads`, `json.dumps` and `copy.deepcopy` recurse once or twice per level of arrays and
objects and raise `RecursionError` near Python's recursion limit (about 1,000 frames, fewer
from a caller deep in its own stack). Arguments a model or a proxy nested that deep escaped
`ToolBuffer` as that error, not as a call with invalid arguments. The bounds here are
counted, not left to the stack, so the same input gets the same answer from any caller:

- `MAX_DEPTH` (256) levels of a call's arguments, the object itself level 1: text deeper is
  a call `invalid` with its text kept, an object or patch deeper a `ChunkSequenceError`
  (`ToolBuffer.max_depth`, an attribute like `max_array_gap`).
- `EVENT_DEPTH` levels of one provider event given as JSON text: the arguments' bound and
  room for the envelope around them (every provider's is under 16 levels); deeper is a
  `ChunkSequenceError` saying the event is not JSON a stream carries.

Each check is linear in its input: text is counted by its brackets first (C speed), and
scanned for strings only when it holds more brackets than the bound.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from toolref.wire.errors import ChunkSequenceError

if TYPE_CHECKING:
    from toolref.streaming.chunk import ToolChunk

MAX_DEPTH: Final = 256  # levels of arrays and objects a call's arguments may have
EVENT_DEPTH: Final = MAX_DEPTH + 32  # of one provider event: its envelope around arguments

# A JSON string (skipped: brackets in it do not nest), an opening or a closing bracket.
_TOKENS: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|(?P<open>[\[{])|(?P<close>[\]}])', re.S)


class TooDeepError(ValueError):
    """JSON text nested past a bound: a `ValueError`, as any other text `json.loads` refuses."""


def text_too_deep(text: str, limit: int) -> bool:
    """Whether JSON `text` opens more than `limit` arrays and objects at once, its strings
    skipped. O(len(text)); text with `limit` brackets or fewer is not scanned."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for token in _TOKENS.finditer(text):
        kind = token.lastgroup
        if kind == "open":
            depth += 1
            if depth > limit:
                return True
        elif kind == "close":
            depth -= 1
    return False


def loads_within(text: str, limit: int, **options: Any) -> Any:
    """`json.loads(text, **options)`, but `TooDeepError` (a `ValueError`) for text nested
    past `limit` levels, and for text a caller deep in its own stack cannot read: never
    `RecursionError`."""
    if text_too_deep(text, limit):
        raise TooDeepError(f"nested past {limit} levels of arrays and objects")
    try:
        return json.loads(text, **options)
    except RecursionError:
        raise TooDeepError(
            f"nested deeper than Python's stack reads here (bound {limit} levels)"
        ) from None


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"{text} is too large for a double")
    return number


def loads_arguments(text: str, limit: int) -> Any:
    """A call's argument text read strictly (`loads_within`): no `NaN` or `Infinity`, no
    number too large for a double; any of them a `ValueError`."""
    return loads_within(text, limit, parse_constant=_reject_constant, parse_float=_finite)


def value_too_deep(value: Any, limit: int) -> bool:
    """Whether `value` has more than `limit` levels of objects and lists (tuples and other
    mappings as those); one that contains itself does. A walk with a stack of its own, that
    stops at the first level past `limit`: O(the value's paths)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping):
            members: Any = node.values()
        elif isinstance(node, list | tuple):
            members = node
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((member, depth + 1) for member in members)
    return False


def checked_depth(chunk: ToolChunk, limit: int, name: str | None) -> None:
    """`ChunkSequenceError` when the chunk's object snapshot or a patch would nest its
    call's arguments past `limit` levels (`ToolBuffer.max_depth`; the object itself is
    level 1, and a patch's leaf sits below as many objects and lists as its path has
    parts): written out and copied by Python's recursive `json` and `copy`, they would
    raise RecursionError. O(the snapshot's and the patches' values)."""
    snapshot = chunk.args_snapshot
    too_deep = isinstance(snapshot, Mapping) and value_too_deep(snapshot, limit)
    for patch in chunk.args_patch or ():
        too_deep = too_deep or (
            len(patch.path) > limit or value_too_deep(patch.value, limit - len(patch.path))
        )
    if too_deep:
        raise ChunkSequenceError(
            f"call {chunk.index} ({name or chunk.name or 'unnamed'}) of turn {chunk.turn} "
            f"got object arguments nested past max_depth={limit} levels of objects and "
            "lists; a model's are a few levels deep, so the stream is broken or hostile. If "
            "it is genuine, give the ToolBuffer a larger max_depth (Python's json and copy "
            "recurse per level, and raise RecursionError past about 400)",
            limit="max_depth",
            maximum=limit,
        )
