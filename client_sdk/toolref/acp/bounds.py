"""How deep and how large a value the tracker takes: bounds on the messages it writes.

Depth. serde_json, which Rust ACP clients (Zed among them) parse with, takes at most 127
levels of arrays and objects in one JSON text (its 128th open bracket is "recursion limit
exceeded", and the whole message is lost). The bound is on the JSON-RPC message a
notification goes out in (`jsonrpc(...)`), counted from its outermost `{` as serde_json
counts a line: the message, `params` and `update` put a field's value (`rawInput`,
`rawOutput`) 3 levels down, and the `content` or `locations` array puts an item 4 down.
So a field's value may be 124 levels deep, an item 123, and the deepest of either makes a
127-level line. (The Rust SDK parses `params` on its own, a level fewer: a client that
parses the line whole is the stricter reader, and the one counted.)

Size. A value that reuses one object under many keys is small in memory and large as JSON
(30 levels of `{"a": x, "b": x}` is 2**30 leaves). Each walk of a given value counts the
bytes its JSON takes at least, and stops past `max_value_bytes` (a tracker setting, 16 MiB
by default): what the tracker then checks, hashes, copies and writes of it is linear in
that bound, never in the paths through a shared object.
"""

from __future__ import annotations

from typing import Any, Final

from toolref.wire.errors import AcpError

MAX_MESSAGE_DEPTH: Final = 127  # serde_json's default recursion limit, for a whole line
FIELD_DEPTH: Final = MAX_MESSAGE_DEPTH - 3  # rawInput, rawOutput: message, params, update
ITEM_DEPTH: Final = MAX_MESSAGE_DEPTH - 4  # content items, locations: their array too
MAX_VALUE_BYTES: Final = 16 * 2**20  # JSON bytes of one given value, by default


def checked_max_bytes(value: Any) -> int:
    """`value` when it is a `max_value_bytes` setting (a positive int); else `AcpError`."""
    if type(value) is not int or value < 1:
        raise AcpError(
            f"max_value_bytes {value!r} is not a count of bytes; give 1 or more (default "
            f"{MAX_VALUE_BYTES}, 16 MiB): the JSON one rawInput, rawOutput, content item or "
            "location may take"
        )
    return value


def _cost(value: Any) -> int:
    """Bytes `value`'s own JSON takes at least (an array or object: its brackets): O(1)."""
    kind = type(value)
    if kind is str:
        return len(value) + 2  # UTF-8 takes a byte or more per code point
    if kind is int:
        return (abs(value).bit_length() - 1) * 3 // 10 + 1 if value else 1  # its digits
    if value is None or kind is bool:
        return 4
    return 2 if kind is dict or kind is list or kind is tuple else 1


class Budget:
    """The JSON bytes one given value has left, and the errors naming its bounds: each
    walk of the value spends on every member it visits, so it visits at most
    `maximum` of them, however many paths lead to one shared object."""

    __slots__ = ("depth", "label", "left", "maximum")

    def __init__(self, label: str, maximum: int, depth: int) -> None:
        self.label = label  # what the value is: "rawInput", "a content item or location"
        self.maximum = maximum
        self.left = maximum
        self.depth = depth  # levels of arrays and objects it may have

    def spend(self, key: Any, value: Any) -> None:
        """Count one member: its key (an object's) and its value's own bytes. O(1)."""
        self.left -= _cost(value) + (len(key) + 3 if type(key) is str else 0)
        if self.left < 0:
            raise AcpError(
                f"{self.label} would be over {self.maximum} bytes of JSON (a value reused "
                "under several keys or in several places is written out at each); send "
                "less (a large output as a file the client can open, say), or give "
                "ToolCallTracker(max_value_bytes=...) a larger bound",
                limit="max_value_bytes",
                maximum=self.maximum,
            )

    def too_deep(self, **extra: Any) -> AcpError:
        envelope = 3 if self.depth == FIELD_DEPTH else 4
        return AcpError(
            f"{self.label} is nested past {self.depth} levels of objects and lists, or "
            f"contains itself: its notification would be nested past {MAX_MESSAGE_DEPTH} "
            f"levels as a JSON-RPC message ({envelope} of them around it), deeper than "
            "serde_json (Rust ACP clients such as Zed) parses; flatten it (a deep value as "
            "a JSON string, say)",
            limit=self.depth,
            message_limit=MAX_MESSAGE_DEPTH,
            **extra,
        )
