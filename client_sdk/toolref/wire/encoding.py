"""Body encodings both sides share: compact JSON, and msgpack with exact big integers.

msgpack integers stop at 64 bits; larger ones (JSON allows them, tool payloads carry them)
travel as ext type 1 holding their decimal digits.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, Final

import msgpack
import orjson

from toolref.wire.errors import UnsupportedValueError

JSON_TYPE: Final = "application/json"
MSGPACK_TYPE: Final = "application/msgpack"
PROBLEM_TYPE: Final = "application/problem+json"
BIGINT_EXT: Final = 1
# A surrogate code point in a str: JSON carries one (`"\ud800"`, json.loads keeps it lone;
# a valid pair is read as one character), UTF-8 has no form for it.
LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def surrogates_escaped(text: str) -> str:
    """JSON `text` with each lone surrogate written as its `\\uXXXX` escape: the same JSON
    value, in text UTF-8 carries. Linear."""
    return LONE_SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def loads_fast(data: bytes | str) -> Any:
    """`json.loads`, about twice as fast (orjson), for values a digest then confirms: it
    reads every JSON text as `json.loads` does (types, key order, `-0.0`, lone surrogates
    and `NaN` through the stdlib, which also raises every error) except integers beyond 64
    bits, which it reads as floats. A caller checks the value against its digest and, on a
    mismatch, reads it again with `json.loads` (records and history messages do)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def dumps_json(value: Any) -> bytes:
    """Compact JSON in UTF-8; a lone surrogate (`json.loads` makes one of `"\\ud800"`) as
    its escape, as `JSON.stringify` writes it (the JS SDK's bytes for the same value)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return surrogates_escaped(text).encode()


def _default(value: Any) -> Any:
    # msgpack calls this for integers beyond 64 bits (and for non-JSON types).
    if type(value) is int:
        return msgpack.ExtType(BIGINT_EXT, str(value).encode())
    raise TypeError(f"cannot pack a {type(value).__name__}")


def packb(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True, default=_default)  # type: ignore[no-any-return]


def ext_hook(code: int, data: bytes) -> Any:
    """msgpack ext types: 1 is a big integer; others come back as `msgpack.ExtType`."""
    if code == BIGINT_EXT:
        return _big_integer(data)
    return msgpack.ExtType(code, data)


def _big_integer(data: bytes) -> int:
    """The decimal digits of ext type 1 (an optional '-' first), as many as Python reads;
    anything else, or more, is `UnsupportedValueError`, never `int()`'s ValueError."""
    digits = data[1:] if data[:1] == b"-" else data
    limit = sys.get_int_max_str_digits() or len(digits)
    if not digits or not digits.isdigit() or len(digits) > limit:
        shown = f"{len(data)} bytes" if len(data) > 24 else repr(data)
        raise UnsupportedValueError(
            f"a msgpack big integer (ext type 1) holds {shown}, not a decimal integer of at "
            f"most {limit} digits; send larger numbers as strings"
        )
    return int(data)


def unpackb(data: bytes) -> Any:
    """Inverse of `packb`; other ext types come back as `msgpack.ExtType`."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=ext_hook)


def media_type(value: str | None) -> str:
    """The media type a `Content-Type` value names: lowercased, its parameters left out
    ("" for none)."""
    return (value or "").split(";", 1)[0].strip().lower()
