"""How deep and how large a value the tracker takes: bounds on the messages it writes.

Depth. serde_json, which Rust ACP clients (Zed among them) parse with, takes at most 127
levels of arrays and objects in one JSON text (its 128th open bracket is "recursion limit
exceeded", and the whole message is lost). The bound is on the JSON-RPC message a
notification goes out in (`jsonrpc(...)`), counted from its outermost `{` as serde_json
counts a line: the message, `params` and `update` put a field's value (`rawInput`,
`rawOutput`) 3 levels down, and the `content` or `locations` array puts an item 4 down.
So a field's value may be 124 levels deep, an item 123, and the deepest of either makes a
127-level line. Two kinds of reader meet it, and the bound is the stricter's: ACP's Rust
SDK from 0.11 parses the line whole into a `serde_json::Value` (then converts it, with no
limit), and meets the 127 levels exactly; up to 0.10 it skipped `params` as a raw value
(serde_json skips without a limit) and parsed it apart from its own `{`, a level fewer:
126 at most, one level spare (tests/unit/acp/test_review_bytes.py).

Size. `max_value_bytes` (a tracker setting, 16 MiB by default) is the bytes one value's
JSON takes on the line, as `dumps_json` writes it: UTF-8, `\\uXXXX` escapes (six bytes for
one control character or lone surrogate), every digit of a number, commas and colons. A
value that reuses one object under many keys is small in memory and large as JSON (30
levels of `{"a": x, "b": x}` is 2**30 leaves). Each walk of a given value counts those
bytes as it goes, and stops past the bound: what the tracker then checks, hashes, copies
and writes of it is linear in that bound, never in the paths through a shared object. A
content item or location is counted as given, before its null members are left out: what
is written of it is at most the bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from json.encoder import encode_basestring
from typing import Any, Final

from toolref.wire.encoding import surrogates_escaped
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


def shown(value: Any, width: int) -> str:
    """`value`'s repr cut to `width` characters, for an error message; an integer past
    Python's digit limit (whose repr raises ValueError) its type named instead."""
    try:
        return f"{value!r:.{width}}"
    except ValueError:
        return f"<a {type(value).__name__} holding an integer past Python's digit limit>"


def _string_bytes(text: str) -> int:
    """Bytes `text` takes as a JSON string on the line (`dumps_json`): its quotes, UTF-8,
    `\\uXXXX` for control characters and lone surrogates. O(len(text)), in C."""
    quoted = encode_basestring(text)
    if text.isascii():  # O(1) in CPython
        return len(quoted)
    try:
        return len(quoted.encode())
    except UnicodeEncodeError:
        return len(surrogates_escaped(quoted).encode())


def _cost(value: Any) -> int:
    """Bytes `value`'s own JSON takes on the line (an array or object: its brackets): a
    string's its length, a number's its digits, else O(1)."""
    if isinstance(value, str):
        return _string_bytes(value)
    if value is None or value is True:
        return 4
    if value is False:
        return 5
    if isinstance(value, int):
        try:
            return len(int.__repr__(value))  # past 4,300 digits: refused as JSON after
        except ValueError:
            return 4300
    if isinstance(value, float):
        return len(float.__repr__(value))  # NaN and the infinities: refused as JSON after
    return 2 if isinstance(value, Mapping | list | tuple) else 1


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

    def spend(self, key: Any, value: Any, comma: bool = False) -> None:
        """Count one member: the comma before it, its key (an object's, with its colon)
        and its value's own bytes. O(1), but a string's length."""
        self.left -= _cost(value) + comma + (_string_bytes(key) + 1 if type(key) is str else 0)
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
