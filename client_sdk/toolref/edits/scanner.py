"""The scan of a request's JSON body into the spans that are segments of their own (see
`segments`): large member values and, under the messages key, each message (less its
closing brackets, its own ids and its cache marks), long messages cut again where their
content says (the long window).

A turn's body is the one before plus what changed: a conversation only grows at its tail
(a cache mark moving on, a message appended). So each scan is remembered (`Scan`: the spans,
and where each message ended), the last `MEMOS` of them, and a body is scanned from the end
of the last message it shares byte for byte with the remembered scan it shares most with
(that prefix found by comparing text at C speed, `shared`): a turn costs a scan of what
changed, not of the conversation. Any body, any memo: the spans are what a scan from the
start gives (a message's spans depend on its own bytes only), so a memo of another
conversation only shortens the prefix reused.

Linear in the request: one scan, values skipped by the stdlib's C scanner (numbers are not
converted, so a number no double holds, or of any length, is only text).
"""

from __future__ import annotations

import bisect
import json
import re
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from json.decoder import scanstring  # type: ignore[attr-defined]  # public, not in stubs
from json.scanner import make_scanner
from typing import Any, AnyStr, Final, TypeVar

from toolref.edits import window
from toolref.edits.window import windowed

LARGE: Final = 256  # a member value at least this long is a segment of its own


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
# The types of the OpenAI Responses items the model makes that have no role (an `input`
# item's own `type` member): the model's too, as a `message` item of an `ANSWER_ROLES` role
# is. Such items (`Scan.items`) are a Responses answer's output, written back in order: the
# run of them renders it (`editor._rendering`). Tool outputs (`function_call_output`, ...)
# are none of them, nor a hosted tool's item holding its output (`mcp_call`,
# `file_search_call`, `code_interpreter_call`, `image_generation_call`, `mcp_list_tools`);
# a web search (`web_search_call`: the model's query, as Codex writes it back) and a tool
# search's call (`tool_search_call`) are the model's, as a call is.
MODEL_ITEMS: Final = frozenset(
    {
        "reasoning",
        "function_call",
        "custom_tool_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "computer_call",
        "web_search_call",
        "tool_search_call",
    }
)
# A message's members listing its blocks (Anthropic's `content`, Gemini's `parts`), and what
# makes a block a tool's result: each such block of a message holding two or more is
# compressed alone (`Scan.bounds`, `toolref.edits.isolated`'s split records).
BLOCK_KEYS: Final = frozenset({"content", "parts"})
RESULT_KEYS: Final = frozenset({"functionResponse", "function_response"})
_MARK: Final = re.compile(
    r"[ \t\n\r]*,[ \t\n\r]*\"(?:" + "|".join(map(re.escape, MARK_KEYS)) + r")\"[ \t\n\r]*:"
)
_CLOSING: Final = frozenset("}] \t\n\r")


class _NotAnObject(ValueError):
    pass


MEMOS: Final = 8  # scans remembered, each a body's text and its spans
MEMO_CHARS: Final = 32 << 20  # characters of the bodies remembered, in all (a longer one: none)
_MEMO_MIN: Final = 1024  # characters a body shares with a memo for it to be resumed from
_MEMOS: Final[deque[Scan]] = deque(maxlen=MEMOS)
_MEMOS_LOCK: Final = threading.Lock()  # scans run on the loop and in worker threads


@dataclass(slots=True)
class Scan:
    """A body's spans in order (`cuts`), the index in them of each message's largest span
    (`messages`), those of the model's messages (`models`), each span's message with the long
    window (`owners`, -1: none; empty without it), where each message ended (`ends`: the
    offset after it; `counts`: how many spans and model spans there were then) and where
    it began (`starts`), where the blocks of a message holding two or more tool results
    start and the last of them ends (`bounds`, in order: `_blocks`), and the numbers of the
    messages that are Responses items of the model's (`items`: `MODEL_ITEMS`, or a
    `message` item of an `ANSWER_ROLES` role; `_is_item`)."""

    text: str
    key: str | None
    window: bool
    cuts: list[tuple[int, int]] = field(default_factory=list)
    messages: list[int] = field(default_factory=list)
    models: list[int] = field(default_factory=list)
    owners: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    counts: list[tuple[int, int]] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    lists: int = 0  # members named `key` holding a list (a JSON parser keeps the last one)
    lists_at: list[int] = field(default_factory=list)  # `lists` at each message
    bounds: list[int] = field(default_factory=list)
    items: list[int] = field(default_factory=list)


def scan(
    text: str, messages_key: str | None, window: bool, *, known: tuple[str, int] | None = None
) -> Scan | None:
    """The spans of `text` (a JSON object's), resumed from a remembered scan where one
    shares its first messages (see the module docstring); None when it is not one JSON
    object. O(what follows the shared messages) and a comparison at C speed. `known`: a
    remembered body's text and how many first characters `text` shares with it at least
    (the caller compared them): that body's scan is resumed from, with no comparison."""
    found = Scan(text, messages_key, window)
    memo, common = _known(known, messages_key, window) or _closest(text, messages_key, window)
    try:
        if memo is not None and _resume(found, memo, common):
            pass
        else:
            found = Scan(text, messages_key, window)
            _fresh(found)
    except (_NotAnObject, StopIteration, ValueError, IndexError, RecursionError):
        return None
    if len(text) <= MEMO_CHARS:
        with _MEMOS_LOCK:
            if memo is not None and memo in _MEMOS and memo.ends and common >= memo.ends[0]:
                _MEMOS.remove(memo)  # its conversation moved on (a message shared): replaced
            _MEMOS.append(found)
            while sum(len(m.text) for m in _MEMOS) > MEMO_CHARS:
                _MEMOS.popleft()
    return found


def forget() -> None:
    """Remember no scan: the next body is scanned from its start, its long messages cut
    afresh (tests, benches)."""
    with _MEMOS_LOCK:
        _MEMOS.clear()
    window.forget()


def shared(one: AnyStr, other: AnyStr) -> int:
    """How many first characters (or bytes) `one` and `other` share: compared at C speed
    (`startswith` from a place, one copy of the range), halving the range (about two passes
    over the shorter)."""
    size = min(len(one), len(other))
    if one.startswith(other[:size]):
        return size
    low, high = 0, size  # one[:low] == other[:low]; one[:high] != other[:high]
    while high - low > 64:
        middle = (low + high) // 2
        if one.startswith(other[low:middle], low):
            low = middle
        else:
            high = middle
    while low < high and one[low] == other[low]:
        low += 1
    return low


def _known(known: tuple[str, int] | None, key: str | None, window: bool) -> tuple[Scan, int] | None:
    """The remembered scan of `known`'s text (the same object), and its count."""
    if known is None:
        return None
    text, common = known
    with _MEMOS_LOCK:
        for memo in reversed(_MEMOS):
            if memo.text is text and memo.key == key and memo.window == window:
                return memo, common
    return None


def _closest(text: str, key: str | None, window: bool) -> tuple[Scan | None, int]:
    """The remembered scan sharing the most first characters with `text`, and how many."""
    with _MEMOS_LOCK:
        memos = [m for m in reversed(_MEMOS) if m.key == key and m.window == window]
    # every message of one shared: the conversation's own last body, looked no further
    return closest(
        memos, text, lambda m: m.text, lambda m, common: bool(m.ends) and common > m.ends[-1]
    )


_M = TypeVar("_M")


def closest(
    memos: list[_M],
    subject: AnyStr,
    of: Callable[[_M], AnyStr],
    last: Callable[[_M, int], bool],
) -> tuple[_M | None, int]:
    """The one of `memos` (most recent first) whose text (`of`) shares the most first
    characters or bytes with `subject`, at least `_MEMO_MIN`, and how many (0: none); the
    search stops at one `last` says is the subject's own body before."""
    best, most = None, _MEMO_MIN - 1
    for memo in memos:
        text = of(memo)
        if text[:_MEMO_MIN] != subject[:_MEMO_MIN]:
            continue
        common = shared(text, subject)
        if common > most:
            best, most = memo, common
        if last(memo, common):
            break
    return best, most if best is not None else 0


def _resume(found: Scan, memo: Scan, common: int) -> bool:
    """`found` scanned from the end of the last of `memo`'s messages that the `common` first
    characters hold, and the character after it (which ends a number); False when none."""
    last = bisect.bisect_left(memo.ends, common) - 1
    if last < 0:
        return False
    spans, models = memo.counts[last]
    found.cuts = memo.cuts[:spans]
    found.messages = memo.messages[: last + 1]
    found.models = memo.models[:models]
    found.owners = memo.owners[:spans] if found.window else []
    found.ends = memo.ends[: last + 1]
    found.counts = memo.counts[: last + 1]
    found.starts = memo.starts[: last + 1]
    found.lists_at = memo.lists_at[: last + 1]
    found.lists = found.lists_at[-1]
    found.bounds = memo.bounds[: bisect.bisect_left(memo.bounds, memo.ends[last])]
    found.items = memo.items[: bisect.bisect_left(memo.items, last + 1)]
    text = found.text
    at = _skip(text, memo.ends[last])
    if text[at : at + 1] == "]":
        at = at + 1
    else:
        at = _message_loop(found, _skip(text, _expect(text, at, ",")))
    _members_after(found, at)
    return True


def _fresh(found: Scan) -> None:
    text = found.text
    at = _skip(text, _expect(text, _skip(text, 0), "{"))
    if text[at : at + 1] == "}":
        _end(text, at + 1)
        return
    _members(found, at)


def _members(found: Scan, at: int) -> None:
    """The members from `at` (a key's opening quote) to the object's end."""
    text = found.text
    while True:
        at = _expect(text, at, '"')
        key, at = scanstring(text, at, True)
        at = _skip(text, _expect(text, _skip(text, at), ":"))
        start = at
        if key == found.key and text[at : at + 1] == "[":
            found.lists += 1
            at = _skip(text, at + 1)
            at = at + 1 if text[at : at + 1] == "]" else _message_loop(found, at)
        else:
            _, at = _scan(text, at)
            if at - start >= LARGE:
                found.cuts.append((start, at))
                if found.window:
                    found.owners.append(-1)
        at = _skip(text, at)
        if text[at : at + 1] == "}":
            _end(text, at + 1)
            return
        at = _skip(text, _expect(text, at, ","))


def _members_after(found: Scan, at: int) -> None:
    """What follows a member's value at `at`: the object's end, or more members."""
    text = found.text
    at = _skip(text, at)
    if text[at : at + 1] == "}":
        _end(text, at + 1)
        return
    _members(found, _skip(text, _expect(text, at, ",")))


def _message_loop(found: Scan, at: int) -> int:
    """The messages from `at` (the first's start) to the list's end; the offset after it."""
    text, cuts = found.text, found.cuts
    while True:
        start = at
        at, own, role, kind = _message(text, at, found.bounds)
        spans = _message_spans(text, start, at, own)
        if found.window:  # the long window: long spans cut again
            spans = [piece for span in spans for piece in windowed(text, *span)]
            found.owners.extend([len(found.messages)] * len(spans))
        largest = max(range(len(spans)), key=lambda k: spans[k][1] - spans[k][0])
        item = _is_item(role, kind)
        if item:
            found.items.append(len(found.messages))
        found.messages.append(len(cuts) + largest)  # what it says, its ids and marks aside
        if item or (isinstance(role, str) and role in ANSWER_ROLES):
            found.models.extend(range(len(cuts), len(cuts) + len(spans)))
        cuts.extend(spans)
        found.ends.append(at)
        found.starts.append(start)
        found.lists_at.append(found.lists)
        found.counts.append((len(cuts), len(found.models)))
        at = _skip(text, at)
        if text[at : at + 1] == "]":
            return at + 1
        at = _skip(text, _expect(text, at, ","))


def messages_after(text: str, at: int, key: str) -> list[tuple[int, int, int]] | None:
    """The messages of the `key` list that go on in `text` from `at` (just after one of
    them: a comma and the next, or the list's end): each one's start, end, and characters
    less its cache marks and ids (its spans'); None when `text` is not such a list there,
    followed by the rest of one JSON object with no other member named `key`. Linear in
    what it walks: for a body that goes on from one scanned before, the new messages and
    the members after them (the caller decodes only those)."""
    found: list[tuple[int, int, int]] = []
    try:
        at = _skip(text, at)
        while text[at : at + 1] != "]":
            start = _skip(text, _expect(text, at, ","))
            end, own, _, _ = _message(text, start, [])
            spans = _message_spans(text, start, end, own)
            found.append((start, end, sum(b - a for a, b in spans)))
            at = _skip(text, end)
        at = _skip(text, at + 1)
        while text[at : at + 1] != "}":
            at = _expect(text, _skip(text, _expect(text, at, ",")), '"')
            name, at = scanstring(text, at, True)
            if name == key:
                return None
            _, at = _scan(text, _skip(text, _expect(text, _skip(text, at), ":")))
            at = _skip(text, at)
        _end(text, at + 1)
    except (_NotAnObject, StopIteration, ValueError, IndexError, RecursionError):
        return None
    return found


def _skip(text: str, at: int) -> int:
    end: int = _WS.match(text, at).end()  # type: ignore[union-attr]  # always matches
    return end


def _expect(text: str, at: int, char: str) -> int:
    if text[at : at + 1] != char:
        raise _NotAnObject(f"expected {char!r} at char {at}")
    return at + 1


def _is_item(role: object, kind: object) -> bool:
    """Whether a message whose own `role` and `type` members are these is a Responses item
    of the model's: a `MODEL_ITEMS` type with no role of another's (none, or not a string,
    or an `ANSWER_ROLES` one), or a `message` of an `ANSWER_ROLES` role."""
    if not isinstance(kind, str):
        return False
    if isinstance(role, str):
        return role in ANSWER_ROLES and (kind in MODEL_ITEMS or kind == "message")
    return kind in MODEL_ITEMS


def _message(
    text: str, at: int, bounds: list[int]
) -> tuple[int, list[tuple[int, int]], object, object]:
    """A message's end, the spans of its own `ID_KEYS` members (each with the comma that
    joins it to its neighbours: a first one's reaches over the marks after it, to the next
    member, whose cuts it holds), and its own `role` and `type` members' values (None:
    none): one scan, member by member when it is an object, its `BLOCK_KEYS` lists block by
    block (`_blocks` adds to `bounds`)."""
    if text[at : at + 1] != "{":
        return _scan(text, at)[1], [], None, None
    own: list[tuple[int, int]] = []
    role: object = None
    kind: object = None
    at = _skip(text, at + 1)
    if text[at : at + 1] == "}":
        return at + 1, own, role, kind
    before: int | None = None  # the end of the member before (None: this is the first)
    first: int | None = None  # where a first id starts, its cut waiting for a next member
    while True:
        key_at = at
        key, at = scanstring(text, _expect(text, at, '"'), True)
        at = _skip(text, _expect(text, _skip(text, at), ":"))
        if key in BLOCK_KEYS and text[at : at + 1] == "[":
            value, at = None, _blocks(text, at, bounds)
        else:
            value, at = _scan(text, at)
        if key == "role":
            role = value
        elif key == "type":
            kind = value
        end, at = at, _skip(text, at)
        if first is not None and key not in MARK_KEYS:
            own.append((first, key_at))
            first = None
        if key in ID_KEYS:
            if before is not None:
                own.append((before, end))
            else:
                first = key_at
        if text[at : at + 1] == "}":
            return at + 1, own, role, kind
        before, at = end, _skip(text, _expect(text, at, ","))


def _blocks(text: str, at: int, bounds: list[int]) -> int:
    """The end of the list at `at` (a message's blocks), each block skipped by the C scanner;
    where each block starts and the last ends added to `bounds` when two or more are a
    tool's result (a `tool_result` block, a `functionResponse` part). Linear in the list."""
    starts: list[int] = []
    results = 0
    at = _skip(text, at + 1)
    while text[at : at + 1] != "]":
        if starts:
            at = _skip(text, _expect(text, at, ","))
        starts.append(at)
        block, at = _scan(text, at)
        if isinstance(block, dict) and (
            block.get("type") == "tool_result" or not RESULT_KEYS.isdisjoint(block)
        ):
            results += 1
        end, at = at, _skip(text, at)
    if results > 1:
        bounds.extend([*starts, end])
    return at + 1


def _message_spans(
    text: str, start: int, end: int, own: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """A message's spans: the message without its closing run (the brackets and whitespace
    that end it, and those before the cuts at its end: a mark after a list's or an object's
    end), its own ids (`own`: a client may give every message a new id each run, as
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
        if cut_start >= at:  # one inside a cut before (marks after a first id) is in it
            spans.append((at, cut_start))
            at = cut_end
    spans.append((at, end))
    while spans:  # the closing run, through the cuts at the end
        a, close = spans[-1]
        while close > a and text[close - 1] in _CLOSING:
            close -= 1
        if close > a:
            spans[-1] = (a, close)
            break
        spans.pop()
    return [(a, b) for a, b in spans if b > a] or [(start, end)]


def _end(text: str, at: int) -> None:
    if _skip(text, at) != len(text):
        raise _NotAnObject(f"extra data after the object at char {at}")
