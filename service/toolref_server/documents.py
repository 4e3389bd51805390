"""Documents within limits: a JSON or msgpack body parsed once (`Decoded`), refused when it
is deeper, wider or larger than its `BodyLimits` allow, or holds what JSON cannot carry.

Every check runs before or while the value is built: containers are counted before a JSON
body is parsed (and while a msgpack body is), depth and items per container after, in
linear passes. Used for request bodies (`toolref_server.http.codec`) and for anything else
the service reads from a peer (an LLM's answer, `toolref_server.registry.completions`).
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from toolref.asgi.workers import CONTAINER_BYTES, weight
from toolref.kit import spans
from toolref.wire.encoding import BIGINT_EXT, LONE_SURROGATE, ext_hook
from toolref.wire.errors import (
    CanonicalizationError,
    MalformedBodyError,
    NestingTooDeepError,
    NonFiniteNumberError,
    ToolrefError,
    TooManyItemsError,
    UnsupportedValueError,
)


@dataclass(frozen=True, slots=True)
class BodyLimits:
    max_body_bytes: int
    max_decompressed_bytes: int
    max_depth: int
    max_items: int = 100_000  # in one array or object
    max_containers: int = 1_000_000  # arrays and objects in all: bounds memory per body


@dataclass(frozen=True, slots=True)
class Decoded:
    """A body parsed once: its value and, for a JSON object with a list under the messages
    key, the text of each message exactly as sent (None otherwise)."""

    value: Any
    texts: list[str] | None = None
    size: int = 0  # what work on the body costs, in bytes (`workers.weight`)


def decode(data: bytes, decoder: str, limits: BodyLimits) -> Any:
    """Parse a body and check it is JSON-shaped and within the limits."""
    return decode_document(data, decoder, limits).value


def decode_document(
    data: bytes, decoder: str, limits: BodyLimits, messages_key: str | None = None
) -> Decoded:
    """`decode`, keeping the text of each message of a JSON body under `messages_key`.

    Cost: linear in `data`. Memory: the parsed value, whose arrays and objects number at
    most `max_containers` with at most `max_items` each (counted before a JSON body is
    parsed, and while a msgpack body is, so a body of empty arrays stops early)."""
    max_depth = limits.max_depth
    if not data:
        raise MalformedBodyError("the body is empty; send a JSON or msgpack object")
    try:
        if decoder == "json":
            _check_containers(data, limits.max_containers)
            return _json_document(data, limits, messages_key)
        value, containers = _unpack(data, limits)
    except RecursionError:
        raise _too_deep(max_depth) from None
    except msgpack.StackError:
        raise _too_deep(max_depth) from None
    except TypeError:
        # msgpack builds a dict with an array or map as a key, which Python cannot hash.
        raise UnsupportedValueError(
            "a msgpack map has an array or a map as a key; JSON object keys are strings"
        ) from None
    except (ValueError, msgpack.UnpackException) as exc:
        if isinstance(exc, ToolrefError):
            raise
        if "exceeds max_" in str(exc):
            what = f"an array or map has more than {limits.max_items} items"
            raise _too_many(what, limits) from None
        raise MalformedBodyError(
            f"the body is not valid msgpack ({type(exc).__name__}: {exc}); send one complete "
            "msgpack object, or fix the Content-Type if it is not msgpack"
        ) from None
    check_json_tree(value, max_depth)
    return Decoded(value, None, len(data) + CONTAINER_BYTES * containers)


def _too_many(what: str, limits: BodyLimits) -> TooManyItemsError:
    return TooManyItemsError(
        f"{what}; the service decodes at most {limits.max_items} items in one array or "
        f"object and {limits.max_containers} arrays and objects in a body: send fewer, or "
        "large payloads as strings",
        limit=limits.max_items,
    )


def _check_containers(data: bytes, limit: int) -> None:
    """Refuse a JSON body with more than `limit` arrays and objects, before parsing it. The
    bracket count (a memchr each) bounds it from above; only a body over the limit by that
    count is counted exactly, brackets inside strings left out (linear: each quote and each
    run of backslashes is looked at once)."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return
    count = _containers(data)
    if count > limit:
        raise TooManyItemsError(
            f"the body holds {count} arrays and objects, over the limit of {limit}; send "
            "fewer, or large payloads as strings",
            limit=limit,
        )


def _containers(data: bytes) -> int:
    """Opening brackets outside JSON strings."""
    count, at, size = 0, 0, len(data)
    while at < size:
        quote = data.find(b'"', at)
        end = size if quote < 0 else quote
        count += data.count(b"[", at, end) + data.count(b"{", at, end)
        if quote < 0:
            break
        at = _string_end(data, quote)
    return count


def _string_end(data: bytes, quote: int) -> int:
    """Just past the quote closing the string that opens at `quote` (or the end)."""
    at = quote + 1
    while True:
        close = data.find(b'"', at)
        if close < 0:
            return len(data)  # unterminated: the parser refuses it
        backslashes = 0
        while close - 1 - backslashes > quote and data[close - 1 - backslashes] == 0x5C:
            backslashes += 1
        if backslashes % 2 == 0:
            return close + 1
        at = close + 1


def _unpack(data: bytes, limits: BodyLimits) -> tuple[Any, int]:
    """msgpack with every limit checked while decoding: items per array or map (before it
    is allocated), arrays and maps in all, and string keys only, checked before a map is
    built (so colliding keys never reach a dict). The value, and its arrays and maps."""
    count = 0

    def counted(value: Any) -> Any:
        nonlocal count
        count += 1
        if count > limits.max_containers:
            raise _too_many(f"the body holds over {limits.max_containers} arrays and maps", limits)
        return value

    def pairs(items: list[tuple[Any, Any]]) -> dict[str, Any]:
        counted(None)
        for key, _ in items:
            if type(key) is not str:
                raise UnsupportedValueError(
                    f"a msgpack map has a {type(key).__name__} key; JSON object keys are strings"
                )
        return dict(items)

    value = msgpack.unpackb(
        data,
        raw=False,
        strict_map_key=False,  # checked in `pairs`, before the dict exists
        object_pairs_hook=pairs,
        list_hook=counted,
        ext_hook=_json_ext,
        max_array_len=limits.max_items,
        max_map_len=limits.max_items,
    )
    return value, count


def _json_ext(code: int, data: bytes) -> Any:
    """A big integer (ext type 1); any other ext value refused as it is read, not built and
    found by the walk after the whole body is (a body of 169,000 of them took 184 ms)."""
    if code == BIGINT_EXT:
        return ext_hook(code, data)
    raise UnsupportedValueError(
        f"a msgpack ext value of type {code} is not JSON (msgpack bin and ext types other "
        "than 1, a big integer, are not accepted); send text as a string"
    )


def _json_document(data: bytes, limits: BodyLimits, messages_key: str | None) -> Decoded:
    max_depth = limits.max_depth
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1]
        raise MalformedBodyError(
            f"the body is not UTF-8 (byte {exc.start} is {bad!r}); encode JSON as UTF-8"
        ) from None
    try:
        parsed = spans.document(text, messages_key)
    except (spans.SpanError, json.JSONDecodeError):
        _raise_json_error(text)
        raise  # json.loads found nothing wrong: never reached in practice
    except ValueError as exc:
        if isinstance(exc, ToolrefError):
            raise
        # Valid JSON all the same: an integer longer than Python reads (4300 digits).
        raise UnsupportedValueError(
            f"a number in the body cannot be read ({exc}); send numbers of at most "
            f"{sys.get_int_max_str_digits()} digits, or as strings"
        ) from None
    # The parser makes only JSON types: what is left to check is the depth (and the items
    # per container, which the container count before parsing does not bound).
    value, items = parsed.value, parsed.items
    texts = [text[start:end] for start, end in items] if items is not None else None
    deep = data.count(b"{") + data.count(b"[") > max_depth  # no deeper than its brackets
    wide = data.count(b",") >= limits.max_items  # no container has more items than commas
    if (deep or wide) and type(value) in _CONTAINERS:
        if texts is None or messages_key is None:
            check_depth(value, max_depth, limits.max_items)
        else:
            _check_messages_depth(value, messages_key, texts, limits)
    return Decoded(value, texts, weight(data))


def _check_messages_depth(
    value: dict[str, Any], key: str, texts: list[str], limits: BodyLimits
) -> None:
    """`check_depth` for a body of messages, walking only the messages whose text could
    break a limit: more brackets than the depth allows, or more commas than the items
    (counted in C). A message sits at depth 3 (body, list, message); one that is no array
    or object (a string, however long) has no depth or items of its own. In the order the
    body is written, as `check_depth`: the first container breaking a limit is the one
    refused, whichever limit it breaks."""
    max_depth, max_items = limits.max_depth, limits.max_items
    if len(value) > max_items:
        raise _too_many_items(len(value), max_items)
    for name, member in value.items():
        if type(member) not in _CONTAINERS:
            continue
        if name != key:
            check_depth(member, max_depth, max_items, start=2)
            continue
        if max_depth < 2:
            raise _too_deep(max_depth)
        if len(member) > max_items:
            raise _too_many_items(len(member), max_items)
        depth = max_depth - 2
        for message, text in zip(member, texts, strict=True):
            if type(message) not in _CONTAINERS:
                continue
            brackets = text.count("{") + text.count("[")
            if brackets > depth or text.count(",") >= max_items:
                check_depth(message, max_depth, max_items, start=3)


def _raise_json_error(text: str) -> None:
    """The stdlib parser's account of what is wrong with `text`, as a 400."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedBodyError(
            f"the body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno} "
            f"(char {exc.pos}); check the JSON encoder, or the Content-Type if it is not JSON"
        ) from None


def _reject_constant(name: str) -> Any:
    raise NonFiniteNumberError(
        f"{name} is not JSON; send a finite number, or a string if the value must be kept",
        value=name,
    )


# A `\\u` escape of a UTF-16 surrogate (D800-DFFF): only these can make a JSON string that
# no UTF-8 carries (json.loads joins valid pairs; raw bytes and msgpack must be UTF-8).
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F]")


def check_text(data: bytes, value: Any) -> None:
    """Refuse a decoded JSON body with a lone surrogate in a string or key (`"\\ud800"`):
    routes that send the body's text back (measured or rendered as UTF-8) could not. Costs
    one scan of the raw bytes unless the body has surrogate escapes at all."""
    if _SURROGATE_ESCAPE.search(data) is None:
        return
    stack: list[Any] = [value]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        kind = type(node)
        if kind is dict:
            for key, child in node.items():
                push(key)
                push(child)
        elif kind is list:
            stack.extend(node)
        elif kind is str and (found := LONE_SURROGATE.search(node)) is not None:
            raise CanonicalizationError(
                f"a string in the body holds a lone UTF-16 surrogate "
                f"(\\u{ord(found.group()):04x} without its pair), which UTF-8 cannot carry; "
                "escape characters outside the BMP as a high and low surrogate pair, or "
                "remove it",
                value=f"\\u{ord(found.group()):04x}",
            )


def _too_deep(max_depth: int) -> NestingTooDeepError:
    return NestingTooDeepError(
        f"the body nests deeper than {max_depth} levels; flatten it, or send deep payloads "
        "as a JSON string",
        limit=max_depth,
    )


_SCALARS: Final = frozenset({str, int, bool, type(None)})


_CONTAINERS: Final = (dict, list)


def check_depth(value: Any, max_depth: int, max_items: int | None = None, start: int = 1) -> None:
    """Refuse a decoded JSON value nested deeper than `max_depth` (containers only), or
    with an array or object of more than `max_items` items: the first container that
    breaks one, in the order its text is written (a body breaking both is refused alike
    however it is walked: `_check_messages_depth`). `start`: the depth `value` sits at in
    the body (1: it is the body)."""
    stack: list[tuple[Any, int]] = [(value, start)]
    pop, push = stack.pop, stack.append
    while stack:
        node, depth = pop()
        if depth > max_depth:
            raise _too_deep(max_depth)
        if max_items is not None and len(node) > max_items:
            raise _too_many_items(len(node), max_items)
        for child in reversed(node.values()) if type(node) is dict else reversed(node):
            if type(child) in _CONTAINERS:
                push((child, depth + 1))  # popped in the order written


def _too_many_items(count: int, max_items: int) -> TooManyItemsError:
    return TooManyItemsError(
        f"an array or object has {count} items, over the limit of {max_items}; send fewer, "
        "or large payloads as strings",
        limit=max_items,
    )


def check_json_tree(value: Any, max_depth: int) -> None:
    """Refuse values JSON cannot carry (msgpack bin/ext, non-string keys, NaN) or too deep."""
    if type(value) is not dict and type(value) is not list:
        check_json_tree([value], max_depth)
        return
    stack: list[tuple[Any, int]] = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        node, depth = pop()
        if depth > max_depth:
            raise _too_deep(max_depth)
        children = node.values() if type(node) is dict else node
        if type(node) is dict:
            for key in node:
                if type(key) is not str:
                    raise UnsupportedValueError(
                        f"object key {key!r} is a {type(key).__name__}; JSON keys are strings"
                    )
        for child in children:
            kind = type(child)
            if kind is dict or kind is list:
                push((child, depth + 1))
            elif kind in _SCALARS:
                continue
            elif kind is float:
                if not math.isfinite(child):
                    _reject_constant(repr(child))
            else:
                raise UnsupportedValueError(
                    f"a {kind.__name__} value is not JSON (msgpack bin and ext types are not "
                    "accepted); send text as a string"
                )
