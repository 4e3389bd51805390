"""JSON texts as unusual clients write them, for property tests of the hand-written scanners
(`toolref.kit.spans`, `toolref.edits.scanner`, `bodycut`): whitespace anywhere (tabs, CR,
LF, none), escapes of every kind (`\\u00e9`, `\\/`, surrogate pairs, lone surrogates),
4-byte UTF-8, numbers as written (`-0`, `1E+05`, many digits), repeated keys, empty
containers, and strings that look like structure (`"messages":[`, `]}`).

A value is a tree (`J`) written to text by `write`, whose choices of spelling come from a
seed: a value and its seed always give the same text, so two values that differ only at
their end give texts sharing a prefix (what a resumed scan is made for)."""

from __future__ import annotations

import json
import random
from typing import Any, Final

from hypothesis import strategies as st

# ("obj", [(key, J), ...]) (keys may repeat) | ("arr", [J, ...]) | ("str", s) | ("num", text)
# | ("lit", "true" | "false" | "null")
J = tuple[str, Any]

SPACES: Final = ("", "", " ", "\t", "\n", "\r\n", " \n\t ", "\r")
NUMBERS: Final = (
    "0", "-0", "1", "-1", "0.0", "-0.0", "1e5", "1E+05", "1e-7", "-2.5E-3", "10", "1.0",
    "123456789012345678901234567890", "0.1000000000000000000000000001", "9007199254740993",
    "3.141592653589793238462643383279", "1E400", "-1e-400", "7" * 600,
)  # fmt: skip
# Strings that look like structure, and characters that need escapes or several bytes.
TRICKY: Final = ('"messages":[', "]}", "},{", '\\"', "\\", "/", "é", "😀", "\u2028", "\x00")
alphabet = st.sampled_from(['a', ' ', '"', '\\', '/', 'é', '😀', '\n', '\t', '\x01', '\ud800',
                            '\udc00', ']', '}', '[', '{', ',', ':', '\u007f', 'x'])  # fmt: skip
strings = st.one_of(st.text(alphabet, max_size=12), st.sampled_from(TRICKY))
scalars: Final = st.one_of(
    strings.map(lambda s: ("str", s)),
    st.sampled_from(NUMBERS).map(lambda n: ("num", n)),
    st.sampled_from(["true", "false", "null"]).map(lambda n: ("lit", n)),
)
keys = st.one_of(st.sampled_from(["a", "id", "role", "messages", "cache_control", ""]), strings)
values: Final = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda items: ("arr", items)),
        st.lists(st.tuples(keys, inner), max_size=4).map(lambda items: ("obj", items)),
    ),
    max_leaves=12,
)


def _escape(char: str, rnd: random.Random) -> str:
    code = ord(char)
    short = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n",
             "\r": "\\r", "\t": "\\t"}  # fmt: skip
    if code > 0xFFFF:  # a surrogate pair, its hex in either case
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        pair = f"\\u{high:04x}\\u{low:04x}"
        return pair.upper().replace("\\U", "\\u") if rnd.random() < 0.5 else pair
    if char in short and rnd.random() < 0.7:
        return short[char]
    return f"\\u{code:04X}" if rnd.random() < 0.5 else f"\\u{code:04x}"


def write_string(text: str, rnd: random.Random) -> str:
    parts = ['"']
    for char in text:
        code = ord(char)
        must = char in '"\\' or code < 0x20 or 0xD800 <= code <= 0xDFFF
        parts.append(_escape(char, rnd) if must or rnd.random() < 0.2 else char)
    parts.append('"')
    return "".join(parts)


def write(value: J, rnd: random.Random) -> str:
    """`value` as JSON text, spelled as `rnd` chooses."""
    kind, data = value
    if kind == "str":
        return write_string(data, rnd)
    if kind in ("num", "lit"):
        return str(data)

    def space() -> str:
        return rnd.choice(SPACES)

    if kind == "arr":
        if not data:
            return "[" + space() + "]"
        inner = ",".join(space() + write(item, rnd) + space() for item in data)
        return "[" + inner + "]"
    if not data:
        return "{" + space() + "}"
    members = [
        space() + write_string(key, rnd) + space() + ":" + space() + write(item, rnd) + space()
        for key, item in data
    ]
    return "{" + ",".join(members) + "}"


def plain(value: J) -> Any:
    """What `json.loads` makes of `write(value, ...)` (the last of repeated keys wins)."""
    kind, data = value
    if kind == "str":
        return data
    if kind in ("num", "lit"):
        return json.loads(data)
    if kind == "arr":
        return [plain(item) for item in data]
    return {key: plain(item) for key, item in data}
