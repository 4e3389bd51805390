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

Linear in the request: one scan of the body, values skipped by the stdlib's C scanner
(numbers are not converted, so a number no double holds, or of any length, is only text).
"""

from __future__ import annotations

import json
import re
import threading
import zlib
from collections.abc import Callable, Iterable, Sequence
from json.decoder import scanstring  # type: ignore[attr-defined]  # public, not in stubs
from json.scanner import make_scanner
from typing import Any, Final

from toolref.kit.lru import LRU

LARGE: Final = 256  # a member value at least this long is a segment of its own
# The long window (issue 39): a message span this long is cut again, at content-defined
# places (`_windowed`), so that content repeated from anywhere in the conversation (a file
# read twice, in two messages) is the same segments again, which an edit keeps.
WINDOW_LONG: Final = 4096
WINDOW_MIN: Final = 512  # bytes at least between two such cuts
WINDOW_MAX: Final = 8192  # a piece longer than this is cut at its next line end anyway
# Places to cut: after an escaped line end (`\n` in the JSON text) whose line's CRC-32 has
# its low 3 bits clear (one line in 8): content-defined, so the same text cuts at the same
# places wherever it sits. What a message's text cuts into is remembered (`_WINDOWS`, by
# the text: a conversation's old messages are cut once), so a turn costs a scan of its new
# long messages only, and a hash of the old ones (C speed).
_LINE_END: Final = re.compile(r"\\n")
_WINDOWS: Final[LRU[str, tuple[int, ...]]] = LRU(4096, 16 << 20, len)
_WINDOWS_LOCK: Final = threading.Lock()  # cuts run on the loop and in worker threads

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
_LINE: Final = re.compile(rb"([^:\r\n]+):(?: ([^\r\n]*))?\r\n")


def _ignore(_: str) -> None:
    return None


# Values are only skipped: numbers and constants are not converted (any length, any size).
_scan: Final[Callable[[str, int], tuple[Any, int]]] = make_scanner(
    json.JSONDecoder(parse_float=_ignore, parse_int=_ignore, parse_constant=_ignore)  # type: ignore[arg-type]
)
_WS: Final = re.compile(r"[ \t\n\r]*")
# Members that mark a prompt-cache breakpoint, which clients move from turn to turn (Anthropic's
# `cache_control`, also on OpenAI-compatible routers): cut out of a message's piece.
MARK_KEYS: Final = ("cache_control",)
# A message's own members that name it, not what it says: cut out of its piece too.
ID_KEYS: Final = frozenset({"id"})
# The roles of the model's own messages (Gemini's `model`): what an answer dictionary compresses.
ANSWER_ROLES: Final = frozenset({"assistant", "model"})
_MARK: Final = re.compile(
    r"[ \t\n\r]*,[ \t\n\r]*\"(?:" + "|".join(map(re.escape, MARK_KEYS)) + r")\"[ \t\n\r]*:"
)
_CLOSING: Final = frozenset("}] \t\n\r")


class _NotAnObject(ValueError):
    pass


def is_secret(name: str) -> bool:
    """A header whose value is a credential (by name, or by a word in it)."""
    low = name.lower()
    return low in SECRET_HEADERS or any(word in low for word in _SECRET_WORDS)


def header_segment(pairs: Iterable[tuple[str, str]]) -> tuple[bytes, list[tuple[str, str]]]:
    """The headers' segment, and the credentials that travel apart (name, value), in order.
    `pairs`: the client's end-to-end headers (toolref's own and hop-by-hop ones left out by
    the caller); those describing the hop (`_NOT_KEPT`) are dropped here."""
    lines: list[bytes] = []
    secrets: list[tuple[str, str]] = []
    for name, value in pairs:
        low = name.lower()
        if low in _NOT_KEPT or (low.startswith("proxy-") and low != "proxy-authorization"):
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
    found = cut_messages(text, messages_key)
    return None if found is None else found[0]


def cut_messages(
    text: str,
    messages_key: str | None,
    answered: list[int] | None = None,
    *,
    window: list[int] | None = None,
) -> tuple[list[str], list[int]] | None:
    """`cut_body`, and the index in its segments of each message's largest span (what it
    says), in order (a client tells its conversations apart by their messages). `answered`,
    when given, gets the index of every span of a message whose own `role` member is one
    of `ANSWER_ROLES` (the model's: what an answer dictionary may compress). `window`, when
    given: long message spans are cut again (`_windowed`), and it gets, for each segment,
    the number of the message it belongs to (-1: none), so that a sender compresses the
    pieces of one message together."""
    messages: list[int] = []
    models: list[int] = []
    owners: list[int] | None = [] if window is not None else None
    try:
        cuts = _cuts(text, messages_key, messages, models, owners)
    except (_NotAnObject, StopIteration, ValueError, IndexError, RecursionError):
        return None
    segments: list[str] = []
    marks: list[int] = []
    message, model = set(messages), set(models)
    at, cut = 0, 0
    for start, end in cuts:
        if start > at:
            segments.append(text[at:start])
            if window is not None:
                window.append(-1)
        if cut in message:
            marks.append(len(segments))
        if answered is not None and cut in model:
            answered.append(len(segments))
        segments.append(text[start:end])
        if window is not None and owners is not None:
            window.append(owners[cut])
        at, cut = end, cut + 1
    if at < len(text):
        segments.append(text[at:])
        if window is not None:
            window.append(-1)
    return segments, marks


def _skip(text: str, at: int) -> int:
    end: int = _WS.match(text, at).end()  # type: ignore[union-attr]  # always matches
    return end


def _expect(text: str, at: int, char: str) -> int:
    if text[at : at + 1] != char:
        raise _NotAnObject(f"expected {char!r} at char {at}")
    return at + 1


def _cuts(
    text: str,
    messages_key: str | None,
    messages: list[int],
    models: list[int],
    owners: list[int] | None = None,
) -> list[tuple[int, int]]:
    """The spans that are segments of their own: large member values, and each message
    (their indexes in the spans added to `messages`; those of the model's to `models`)."""
    at = _skip(text, 0)
    at = _skip(text, _expect(text, at, "{"))
    cuts: list[tuple[int, int]] = []
    if text[at : at + 1] == "}":
        return _end(text, at + 1, cuts)
    while True:
        at = _expect(text, at, '"')
        key, at = scanstring(text, at, True)
        at = _skip(text, _expect(text, _skip(text, at), ":"))
        start = at
        if key == messages_key and text[at : at + 1] == "[":
            at = _messages(text, at, cuts, messages, models, owners=owners)
        else:
            _, at = _scan(text, at)
            if at - start >= LARGE:
                cuts.append((start, at))
                if owners is not None:
                    owners.append(-1)
        at = _skip(text, at)
        if text[at : at + 1] == "}":
            return _end(text, at + 1, cuts)
        at = _skip(text, _expect(text, at, ","))


def _messages(
    text: str,
    at: int,
    cuts: list[tuple[int, int]],
    messages: list[int],
    models: list[int],
    *,
    owners: list[int] | None,
) -> int:
    at = _skip(text, at + 1)
    if text[at : at + 1] == "]":
        return at + 1
    while True:
        start = at
        at, own, role = _message(text, at)
        spans = _message_spans(text, start, at, own)
        if owners is not None:  # the long window: long spans cut again
            spans = [piece for span in spans for piece in _windowed(text, *span)]
            owners.extend([len(messages)] * len(spans))
        largest = max(range(len(spans)), key=lambda k: spans[k][1] - spans[k][0])
        messages.append(len(cuts) + largest)  # what the message says, its ids and marks aside
        if isinstance(role, str) and role in ANSWER_ROLES:
            models.extend(range(len(cuts), len(cuts) + len(spans)))
        cuts.extend(spans)
        at = _skip(text, at)
        if text[at : at + 1] == "]":
            return at + 1
        at = _skip(text, _expect(text, at, ","))


def _message(text: str, at: int) -> tuple[int, list[tuple[int, int]], object]:
    """A message's end, the spans of its own `ID_KEYS` members (each with the comma that
    joins it to its neighbours), and its own `role` member's value (None: none): one scan,
    member by member when it is an object."""
    if text[at : at + 1] != "{":
        return _scan(text, at)[1], [], None
    own: list[tuple[int, int]] = []
    role: object = None
    at = _skip(text, at + 1)
    if text[at : at + 1] == "}":
        return at + 1, own, role
    before: int | None = None  # the end of the member before (None: this is the first)
    while True:
        key_at = at
        key, at = scanstring(text, _expect(text, at, '"'), True)
        value, at = _scan(text, _skip(text, _expect(text, _skip(text, at), ":")))
        if key == "role":
            role = value
        end, at = at, _skip(text, at)
        if key in ID_KEYS:
            if before is not None:
                own.append((before, end))
            elif text[at : at + 1] == ",":
                own.append((key_at, _skip(text, at + 1)))
        if text[at : at + 1] == "}":
            return at + 1, own, role
        before, at = end, _skip(text, _expect(text, at, ","))


def _message_spans(
    text: str, start: int, end: int, own: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """A message's spans: the message without its closing run (the brackets and whitespace
    that end it), its own ids (`own`: a client may give every message a new id each run, as
    Codex does) and its cache marks (`MARK_KEYS` members with their comma, at any depth),
    which are left to the glue. A message keeps its piece whether or not a mark sits on it,
    and from one run of a prompt to the next: a mark moving on costs its few bytes of glue,
    not the message again (issue 30: two moving marks stored and sent every marked message
    twice; issue 31: a repeated Codex session had no message in common with the run
    before). Sound on valid JSON: a quote after a comma and whitespace opens a string, so a
    match is a member of an object of the message. Linear: one regex pass over the
    message, one value skipped per mark."""
    cuts = list(own)
    for mark in _MARK.finditer(text, start, end):
        cuts.append((mark.start(), _scan(text, _skip(text, mark.end()))[1]))
    spans: list[tuple[int, int]] = []
    at = start
    for cut_start, cut_end in sorted(cuts):
        if cut_start >= at:  # never overlapping on valid JSON; kept safe all the same
            spans.append((at, cut_start))
            at = cut_end
    close = end
    while close > at and text[close - 1] in _CLOSING:
        close -= 1
    spans.append((at, close))
    return [(a, b) for a, b in spans if b > a] or [(start, end)]


def _windowed(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """The span cut at content-defined places (`_LINE_END` of a line whose CRC-32 ends in
    three zero bits; pieces at least `WINDOW_MIN` and, where a line end allows, at most
    `WINDOW_MAX` bytes; none within `WINDOW_MIN` of its end) when it is `WINDOW_LONG` long
    or more; else whole. Linear in the span: one regex pass and a CRC per line, once per
    distinct text (`_WINDOWS`)."""
    if end - start < WINDOW_LONG:
        return [(start, end)]
    span = text[start:end]
    with _WINDOWS_LOCK:
        cuts = _WINDOWS.get(span)
    if cuts is None:
        cuts = _cuts_of(span)  # outside the lock: linear in the span
        with _WINDOWS_LOCK:
            _WINDOWS.put(span, cuts)
    found: list[tuple[int, int]] = []
    at = start
    for cut in cuts:
        found.append((at, start + cut))
        at = start + cut
    found.append((at, end))
    return found


def _cuts_of(span: str) -> tuple[int, ...]:
    cuts: list[int] = []
    last = line = 0
    limit = len(span) - WINDOW_MIN
    for place in _LINE_END.finditer(span):
        cut = place.end()
        if cut > limit:
            break
        crc = zlib.crc32(span[line:cut].encode("utf-8", "surrogatepass"))
        line = cut
        if cut - last >= WINDOW_MIN and (crc & 7 == 0 or cut - last >= WINDOW_MAX):
            cuts.append(cut)
            last = cut
    return tuple(cuts)


def _end(text: str, at: int, cuts: list[tuple[int, int]]) -> list[tuple[int, int]]:
    if _skip(text, at) != len(text):
        raise _NotAnObject(f"extra data after the object at char {at}")
    return cuts
