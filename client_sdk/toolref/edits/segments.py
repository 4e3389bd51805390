"""Cutting a request into segments whose concatenation is the request, byte for byte.

The headers come first, as one segment (`header_segment`): every end-to-end header but the
credentials, as `name: value` lines in the client's order; a credential keeps its place as
a line with its name alone, and its value travels as a real header on every request (never
stored). Then the body (`cut_body`): a JSON object is cut at the boundaries of its
members and, under its messages key, of each message; a member's value of `LARGE` bytes or
more (`tools`, `system`) is a segment of its own, and so is each message, less its closing
brackets and its cache marks (`MARK_KEYS`); what lies between (keys, commas, whitespace,
small members, closing brackets, marks) is glue. Nothing is parsed to be written again:
every segment is a slice of the client's own text, so whitespace, number spellings,
escapes (lone surrogates included) and repeated keys are kept as they came.

The body's scan is `toolref.edits.scanner`'s: linear in what changed since a body it
remembers, values skipped by the stdlib's C scanner.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

from toolref.edits.scanner import ANSWER_ROLES, ID_KEYS, LARGE, MARK_KEYS, scan

__all__ = [
    "ANSWER_ROLES",
    "ID_KEYS",
    "LARGE",
    "MARK_KEYS",
    "SECRET_HEADERS",
    "cut_body",
    "describes_hop",
    "header_lines",
    "header_segment",
    "is_secret",
    "restore_headers",
]

# Header names whose values are credentials: they travel on every request, never in a segment.
SECRET_HEADERS: Final = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key", "cookie"}
)
_SECRET_WORDS: Final = ("key", "token", "secret", "auth", "cookie", "password")
# Headers that describe the bytes on one hop, not the request: never in a segment.
_NOT_KEPT: Final = frozenset(
    {
        "host",
        "content-length",
        "content-encoding",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "expect",
    }
)
# A header line as HTTP allows it (RFC 9110): a token, then a value of visible characters,
# spaces and tabs (obs-text too): anything else no HTTP request carries (h11 refuses to
# send it), so a segment holding one is not headers.
_LINE: Final = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):(?: ([^\x00-\x08\x0a-\x1f\x7f]*))?\r\n")


def is_secret(name: str) -> bool:
    """A header whose value is a credential (by name, or by a word in it)."""
    low = name.lower()
    return low in SECRET_HEADERS or any(word in low for word in _SECRET_WORDS)


def describes_hop(name: str) -> bool:
    """A header that describes the bytes on one hop (`Host`, framing, `Connection`, a
    proxy's own), never the request: no segment holds one (lowercase `name`)."""
    return name in _NOT_KEPT or (name.startswith("proxy-") and name != "proxy-authorization")


def header_segment(pairs: Iterable[tuple[str, str]]) -> tuple[bytes, list[tuple[str, str]]]:
    """The headers' segment, and the credentials that travel apart (name, value), in order.
    `pairs`: the client's end-to-end headers (toolref's own and hop-by-hop ones left out by
    the caller); those describing the hop (`_NOT_KEPT`) are dropped here."""
    lines: list[bytes] = []
    secrets: list[tuple[str, str]] = []
    for name, value in pairs:
        low = name.lower()
        if describes_hop(low):
            continue
        raw = name.encode("latin-1")
        if is_secret(low):
            secrets.append((name, value))
            lines.append(raw + b":\r\n")
        else:
            lines.append(raw + b": " + value.encode("latin-1") + b"\r\n")
    return b"".join(lines), secrets


def header_lines(segment: bytes) -> list[tuple[str, str | None]] | None:
    """The lines of a headers segment, in order: (name, value), a credential's value None
    (it travels apart); None when `segment` is not a headers segment."""
    found: list[tuple[str, str | None]] = []
    at = 0
    while at < len(segment):
        line = _LINE.match(segment, at)
        if line is None:
            return None
        value = line.group(2)
        found.append(
            (line.group(1).decode("latin-1"), None if value is None else value.decode("latin-1"))
        )
        at = line.end()
    return found


def restore_headers(
    segment: bytes, secrets: Sequence[tuple[str, str]]
) -> list[tuple[str, str]] | None:
    """The headers `segment` stands for, each credential line filled with the value of the
    same name in `secrets` (in order); None when the segment is not headers, or names a
    credential `secrets` lacks."""
    lines = header_lines(segment)
    if lines is None:
        return None
    waiting: dict[str, list[str]] = {}
    for secret, given in secrets:
        waiting.setdefault(secret.lower(), []).append(given)
    found: list[tuple[str, str]] = []
    for name, value in lines:
        if value is not None:
            found.append((name, value))
            continue
        values = waiting.get(name.lower())
        if not values:
            return None
        found.append((name, values.pop(0)))
    return found


def cut_body(text: str, messages_key: str | None) -> list[str] | None:
    """The body's segments (see the module docstring); None when it is not one JSON object
    (such a body is sent as one segment by the caller, or passed on as it is)."""
    found = scan(text, messages_key, False)
    if found is None:
        return None
    segments: list[str] = []
    at = 0
    for start, end in found.cuts:
        if start > at:
            segments.append(text[at:start])
        segments.append(text[start:end])
        at = end
    if at < len(text):
        segments.append(text[at:])
    return segments
