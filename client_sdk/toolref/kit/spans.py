"""Spans of JSON text: where each value of a document sits, so that a message is handed on
exactly as its sender wrote it (key order, number forms such as `1.0` or `1e-7`, escapes)
instead of being parsed and written again.

Values are parsed by the stdlib's C scanner, once each; Python only steps between the
members and elements a caller needs. Every function here is linear in the text it walks
and does no I/O.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from json.decoder import scanstring  # type: ignore[attr-defined]  # public, not in stubs
from json.scanner import make_scanner
from typing import Any, Final

from toolref.wire.errors import NonFiniteNumberError

Path = tuple[int | str, ...]
Edit = tuple[int, int, str]  # replace text[start:end] by the string

_WS: Final = re.compile(r"[ \t\n\r]*")


def _finite(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        _constant(f"{text} (infinity as a double)")
    return number


def _constant(name: str) -> Any:
    raise NonFiniteNumberError(
        f"{name} is not JSON; send a finite number, or a string if the value must be kept",
        value=name,
    )


# parse_float is only called for numbers with a fraction or exponent: integers stay C-fast.
_scan: Final[Callable[[str, int], tuple[Any, int]]] = make_scanner(
    json.JSONDecoder(parse_float=_finite, parse_constant=_constant)  # type: ignore[arg-type]
)
_scanstring: Final[Callable[[str, int, bool], tuple[str, int]]] = scanstring


class SpanError(ValueError):
    """The text is not JSON where a span was expected (the caller reports it its own way)."""

    def __init__(self, what: str, at: int) -> None:
        super().__init__(f"{what} at char {at}")
        self.at = at


@dataclass(frozen=True, slots=True)
class Member:
    """One member of an object: its key's span (quotes included) and its value's span."""

    key: str
    key_start: int
    key_end: int
    start: int
    end: int
    value: Any


def skip_ws(text: str, at: int) -> int:
    end: int = _WS.match(text, at).end()  # type: ignore[union-attr]  # always matches
    return end


def value(text: str, at: int) -> tuple[Any, int]:
    """The value starting at `at` (no leading whitespace) and where it ends."""
    try:
        found: tuple[Any, int] = _scan(text, at)
    except StopIteration as stop:
        raise SpanError("expected a JSON value", stop.value) from None
    return found


def _expect(text: str, at: int, char: str) -> int:
    if text[at : at + 1] != char:
        raise SpanError(f"expected {char!r}", at)
    return at + 1


def member_text(text: str, member: Member) -> str:
    """`"key":value` as written (whitespace around the colon dropped)."""
    return text[member.key_start : member.key_end] + ":" + text[member.start : member.end]


def members(text: str, at: int, wanted: str | None = None) -> tuple[dict[str, Member], int]:
    """The members of the object starting at `at`, by key (as a JSON parser keeps them: a
    repeated key keeps its first place and its last value), and where the object ends.
    `wanted`: parse only that member's value; the others are skipped as spans (their
    `value` is None), which costs the same scan but keeps nothing."""
    at = skip_ws(text, _expect(text, at, "{"))
    found: dict[str, Member] = {}
    if text[at : at + 1] == "}":
        return found, at + 1
    while True:
        key_start = at
        at = _expect(text, at, '"')
        try:
            key, at = _scanstring(text, at, True)
        except ValueError:
            raise SpanError("expected an object key", key_start) from None
        key_end = at
        at = skip_ws(text, _expect(text, skip_ws(text, at), ":"))
        start = at
        item, at = value(text, at)
        if wanted is not None and key != wanted:
            item = None
        previous = found.get(key)
        if previous is not None:  # the first place, as a dict keeps it
            key_start, key_end = previous.key_start, previous.key_end
        found[key] = Member(key, key_start, key_end, start, at, item)
        at = skip_ws(text, at)
        if text[at : at + 1] == "}":
            return found, at + 1
        at = skip_ws(text, _expect(text, at, ","))


def elements(text: str, at: int) -> tuple[list[tuple[Any, int, int]], int]:
    """(value, start, end) of each element of the array starting at `at`, and its end."""
    at = skip_ws(text, _expect(text, at, "["))
    found: list[tuple[Any, int, int]] = []
    if text[at : at + 1] == "]":
        return found, at + 1
    while True:
        start = at
        item, at = value(text, at)
        found.append((item, start, at))
        at = skip_ws(text, at)
        if text[at : at + 1] == "]":
            return found, at + 1
        at = skip_ws(text, _expect(text, at, ","))


@dataclass(frozen=True, slots=True)
class Document:
    """A whole JSON document parsed once: its value; when it is an object, its members with
    their spans; and the span of each element of the array under the key asked for."""

    text: str
    value: Any
    members: dict[str, Member]
    items: list[tuple[int, int]] | None


def document(text: str, array_key: str | None = None) -> Document:
    """Parse `text` as one JSON document (see `Document`); `SpanError` if it is not one.
    `items` holds the spans of the elements of the `array_key` member when that member is
    an array (a body's messages), else None."""
    at = skip_ws(text, 0)
    found: dict[str, Member] = {}
    items: list[tuple[int, int]] | None = None
    if text[at : at + 1] != "{":
        whole, at = value(text, at)
    else:
        at = skip_ws(text, at + 1)
        closed = text[at : at + 1] == "}"
        at += closed
        while not closed:
            key_start = at
            at = _expect(text, at, '"')
            try:
                key, at = _scanstring(text, at, True)
            except ValueError:
                raise SpanError("expected an object key", key_start) from None
            key_end = at
            at = skip_ws(text, _expect(text, skip_ws(text, at), ":"))
            start = at
            if key == array_key and text[at : at + 1] == "[":
                listed, at = elements(text, at)
                item = [element for element, _, _ in listed]
                items = [(first, last) for _, first, last in listed]
            else:
                item, at = value(text, at)
                if key == array_key:
                    items = None  # a later member of that name that is no array wins
            previous = found.get(key)
            if previous is not None:  # the first place, as a dict keeps it
                key_start, key_end = previous.key_start, previous.key_end
            found[key] = Member(key, key_start, key_end, start, at, item)
            at = skip_ws(text, at)
            closed = text[at : at + 1] == "}"
            at = skip_ws(text, at + 1) if closed else skip_ws(text, _expect(text, at, ","))
        whole = {key: member.value for key, member in found.items()}
    if skip_ws(text, at) != len(text):
        raise SpanError("extra data after the document", at)
    return Document(text, whole, found, items)


def locate(text: str, at: int, paths: Iterable[Path]) -> dict[Path, tuple[int, int]]:
    """The span of the value at each of `paths` below the value starting at `at`, in one
    walk of the text (so many paths into one message cost one pass, not one each)."""
    trie: dict[Any, Any] = {}
    wanted = list(paths)
    for path in wanted:
        node = trie
        for step in path:
            node = node.setdefault(step, {})
    spans: dict[Path, tuple[int, int]] = {}
    _walk(text, at, (), trie, spans)
    missing = [p for p in wanted if p not in spans]
    if missing:
        raise SpanError(f"no value at {missing[0]!r}", at)
    return spans


def _walk(
    text: str, at: int, path: Path, trie: dict[Any, Any], spans: dict[Path, tuple[int, int]]
) -> int:
    """Record spans for the paths in `trie` below the value at `at`; return its end."""
    if not trie:
        _, end = value(text, at)
        spans[path] = (at, end)
        return end
    char = text[at : at + 1]
    if char == "{":
        found, end = _object_spans(text, at)
        for key, (start, _) in found.items():
            if key in trie:
                _walk(text, start, (*path, key), trie[key], spans)
    elif char == "[":
        items, end = _array_spans(text, at)
        for index, (start, _) in enumerate(items):
            if index in trie:
                _walk(text, start, (*path, index), trie[index], spans)
    else:
        raise SpanError("expected an object or an array", at)
    spans[path] = (at, end)
    return end


def _object_spans(text: str, at: int) -> tuple[dict[str, tuple[int, int]], int]:
    found, end = members(text, at, wanted="")
    return {key: (m.start, m.end) for key, m in found.items()}, end


def _array_spans(text: str, at: int) -> tuple[list[tuple[int, int]], int]:
    items, end = elements(text, at)
    return [(start, stop) for _, start, stop in items], end


def splice(text: str, edits: Sequence[Edit], start: int = 0, end: int | None = None) -> str:
    """`text[start:end]` with each (from, to, replacement) applied; edits must not overlap."""
    stop = len(text) if end is None else end
    parts: list[str] = []
    at = start
    for first, last, replacement in sorted(edits, key=lambda e: e[0]):
        parts.append(text[at:first])
        parts.append(replacement)
        at = last
    parts.append(text[at:stop])
    return "".join(parts)
