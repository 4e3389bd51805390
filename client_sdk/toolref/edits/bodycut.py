"""A request body's cut, remembered: its segments in UTF-8, their recipe entries and `framed`
digests, and which of them are messages (counted in the request's segments, the
headers' first); a body that shares its first characters with a
remembered one is cut again only from where the two part.

A turn's body is the one before plus what changed (`scanner`). Every span the scan finds
wholly inside the prefix two bodies share is the same span, so the segments up to it (the
span and the glue before it) are the same bytes, entries and digests: they are taken from
the remembered cut as list slices, and only the segments after them are encoded, hashed and
framed. Which spans are messages, and the model's, is the scan's own answer (a message cut
off by the end of the prefix may say its role after it), taken from the remembered cut as far
as the two agree, which a comparison at C speed finds.

Cost per body: the scan of what changed, the segments after the prefix in Python, and list
slices, comparisons and one prefix search at C speed. Memory: the last `MEMOS` cuts, their
texts at most `MEMO_CHARS` characters in all, each with its segments and entries (about
three times its text).
"""

from __future__ import annotations

import bisect
import threading
from array import array
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Final, TypeVar

from toolref.edits.recipe import Entry, entry_of, framed
from toolref.edits.scanner import Scan, closest, scan
from toolref.edits.scanner import forget as scanner_forget

MEMOS: Final = 8  # cuts remembered
MEMO_CHARS: Final = 16 << 20  # characters of their bodies, in all (a longer body: not kept)
_MEMOS: Final[deque[BodyCut]] = deque(maxlen=MEMOS)
_MEMOS_LOCK: Final = threading.Lock()  # cuts run on the loop and in worker threads
_T = TypeVar("_T")
# The last `_closest` answer: (body, (key, window), cut, bytes shared); one item, swapped whole.
_LAST: Final[list[tuple[bytes, tuple[str | None, bool], BodyCut | None, int]]] = [
    (b"", (None, False), None, 0)
]


@dataclass(slots=True, eq=False)
class BodyCut:
    """A body's segments in UTF-8 (`parts`) and their entries, each list with slot 0 kept for
    the headers' segment (`request.cut` puts it there: the lists are the request's), the
    parts' framed digests joined (`framed`), the index in the request's segments of each
    message's largest span (`messages`) and of each span of the model's messages
    (`answered`), each segment's message with the long window (`owners`, -1: none, the
    headers' too; empty without it); and for resuming: the scan's spans, how many segments
    there are once each span is cut (`through`), the bytes of the body and of `framed` up to
    each span's end (`byte_ends`, `framed_ends`), and the span indices of the messages and of
    the model's spans. Numbers are kept in arrays (a slice of one is a copy of memory, not a
    reference to each number). `reused`: the parts taken from the cut before (`reused_bytes`
    of the body), `before`: the recipe ref last made of that one (its `ref`, which
    `request.cut` sets). `splits`: (index in `parts`, offsets in its bytes) of each part
    that the scan's `bounds` fall in (a message's tool results, each compressed alone).
    `items`: the numbers of the messages that are Responses items of the model's (the
    scan's, `scanner.MODEL_ITEMS`)."""

    text: str
    body: bytes
    key: str | None
    window: bool
    spans: list[tuple[int, int]]
    through: array[int]
    byte_ends: array[int]
    framed_ends: array[int]
    span_messages: list[int]
    span_models: list[int]
    parts: list[bytes]
    entries: list[Entry]
    framed: bytearray
    messages: array[int]
    answered: array[int]
    owners: array[int]
    reused: int = 0
    reused_bytes: int = 0
    before: str | None = None
    ref: str | None = None
    splits: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)
    items: list[int] = field(default_factory=list)


def _numbers(values: Iterable[int] = ()) -> array[int]:
    return array("q", values)


def cut_body(body: bytes, key: str | None, *, window: bool) -> BodyCut | None:
    """The cut of `body` (a JSON object's in UTF-8; None otherwise), resumed from the
    remembered cut it shares the most first bytes with: only what follows the last span
    that prefix holds whole is decoded, scanned and cut."""
    memo, common = _closest(body, key, window)
    chars = at = 0
    if memo is not None:
        spans = bisect.bisect_right(memo.byte_ends, common)
        if spans:
            chars, at = memo.spans[spans - 1][1], memo.byte_ends[spans - 1]
    try:
        text = memo.text[:chars] + body[at:].decode("utf-8") if memo else body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    known = (memo.text, chars) if memo is not None and chars else None
    found = scan(text, key, window, known=known)
    if found is None:
        return None
    codec = "ascii" if body.isascii() else "utf-8"  # the same bytes, the first faster
    made = _cut(found, body, codec, memo, chars)
    if len(text) <= MEMO_CHARS:
        with _MEMOS_LOCK:
            if memo is not None and memo in _MEMOS and _moved_on(memo, chars):
                _MEMOS.remove(memo)  # the conversation moved on: its newer body replaces it
            _MEMOS.append(made)
            while sum(len(m.text) for m in _MEMOS) > MEMO_CHARS:
                _MEMOS.popleft()
            _LAST[0] = (body, (key, window), made, len(body))  # its closest cut: its own
    return made


def unshared(body: bytes, key: str | None, *, window: bool) -> int:
    """The bytes of `body` after the prefix it shares with the remembered cut closest to it:
    what cutting it would work on (a comparison at C speed; remembered for the cut that
    follows)."""
    _, common = _closest(body, key, window)
    return len(body) - common


def forget() -> None:
    """Remember no cut (and no scan): the next body is cut from scratch (tests, benches)."""
    with _MEMOS_LOCK:
        _MEMOS.clear()
        _LAST[0] = (b"", (None, False), None, 0)
    scanner_forget()


def _moved_on(memo: BodyCut, common: int) -> bool:
    """A body sharing `common` first characters with `memo` is its conversation's next one: it
    shares its first message whole (another conversation that shares only the envelope, the
    tools and the system prompt, leaves `memo` to its own)."""
    messages = memo.span_messages
    return bool(messages) and common >= memo.spans[messages[0]][1]


def remember_ref(made: BodyCut, ref: str) -> None:
    """The recipe ref made of `made` (with its headers): what a cut resumed from it names as
    `before`."""
    with _MEMOS_LOCK:
        made.ref = ref


def _closest(body: bytes, key: str | None, window: bool) -> tuple[BodyCut | None, int]:
    """The remembered cut sharing the most first bytes with `body`, and how many (the last
    answer remembered: `unshared` then `cut_body` ask it of the same body)."""
    last = _LAST[0]
    if last[0] is body and last[1] == (key, window):
        return last[2], last[3]
    with _MEMOS_LOCK:
        memos = [m for m in reversed(_MEMOS) if m.key == key and m.window == window]
    found = closest(memos, body, lambda m: m.body, lambda m, common: common == len(m.body))
    _LAST[0] = (body, (key, window), *found)
    return found


def _agreeing(one: list[_T], other: list[_T], limit: int) -> int:
    """How many first items `one` and `other` share, at most `limit`: slices compared at C
    speed, halving the range."""
    limit = min(limit, len(one), len(other))
    if one[:limit] == other[:limit]:
        return limit
    low, high = 0, limit
    while high - low > 1:
        middle = (low + high) // 2
        if one[:middle] == other[:middle]:
            low = middle
        else:
            high = middle
    return low


def _before_disagreeing(one: list[int], other: list[int], keep: int) -> int:
    """`keep`, or less: the first span index where two sorted lists of span indices part
    (each list's items before it agree)."""
    agree = _agreeing(one, other, 1 << 62)
    for items in (one, other):
        if agree < len(items):
            keep = min(keep, items[agree])
    return keep


def _cut(found: Scan, body: bytes, codec: str, memo: BodyCut | None, common: int) -> BodyCut:
    spans, text = found.cuts, found.text
    keep = messages = models = 0  # spans whose segments are the memo's; its messages, models
    if memo is not None:
        inside = bisect.bisect_right(memo.spans, common, key=lambda span: span[1])
        keep = _same_spans(memo.spans, spans, inside)
        keep = _before_disagreeing(memo.span_messages, found.messages, keep)
        keep = _before_disagreeing(memo.span_models, found.models, keep)
        messages = bisect.bisect_left(found.messages, keep)
        models = bisect.bisect_left(found.models, keep)
    if memo is not None and keep:
        count = memo.through[keep - 1]  # segments, the headers' slot included
        taken = bisect.bisect_left(memo.messages, count)
        answered = bisect.bisect_left(memo.answered, count)
        made = BodyCut(
            text, body, found.key, found.window, spans, memo.through[:keep],
            memo.byte_ends[:keep], memo.framed_ends[:keep], found.messages, found.models,
            memo.parts[:count], memo.entries[:count],
            bytearray(memo.framed[: memo.framed_ends[keep - 1]]),
            memo.messages[:taken], memo.answered[:answered],
            memo.owners[:count] if found.window else _numbers(),
            count - 1, memo.byte_ends[keep - 1], memo.ref,
        )  # fmt: skip
        made.splits = memo.splits[: bisect.bisect_left(memo.splits, count, key=_first)]
        at = spans[keep - 1][1]
    else:
        made = BodyCut(
            text, body, found.key, found.window, spans, _numbers(), _numbers(), _numbers(),
            found.messages, found.models, [b""], [b""], bytearray(), _numbers(), _numbers(),
            _numbers([-1]) if found.window else _numbers(),
        )  # fmt: skip
        at = 0
    made.items = found.items  # message numbers: the scan's whole list (a copy when resumed)
    _extend(made, found, codec, keep=keep, at=at, messages=messages, models=models)
    return made


def _first(split: tuple[int, tuple[int, ...]]) -> int:
    return split[0]


def _same_spans(
    remembered: list[tuple[int, int]], spans: list[tuple[int, int]], inside: int
) -> int:
    """How many first spans of `spans` are `remembered`'s, at most `inside`: when the scan
    went on from `remembered`'s own (its spans are the same objects, and a span is only ever
    in a list after the spans before it in the list it was taken from), one identity check;
    else compared."""
    inside = min(inside, len(spans))
    if inside and spans[inside - 1] is remembered[inside - 1]:
        return inside
    return _agreeing(remembered, spans, inside)


def _extend(
    made: BodyCut, found: Scan, codec: str, *, keep: int, at: int, messages: int, models: int
) -> None:
    """Cut `made` on from span `keep` (its text from `at`); `messages`, `models`: how many of
    the scan's message and model spans `made` holds already."""
    text, owners = found.text, found.owners
    span_messages, span_models = found.messages, found.models
    parts, through, byte_ends = made.parts, made.through, made.byte_ends
    size = byte_ends[-1] if byte_ends else 0  # bytes of the parts so far

    def add(data: bytes, owner: int) -> None:
        nonlocal size
        size += len(data)
        entry = entry_of(data)
        parts.append(data)
        made.entries.append(entry)
        made.framed += framed(entry)
        if made.window:
            made.owners.append(owner)

    bounds = found.bounds  # sorted: walked once beside the spans (those in glue passed over)
    bound = bisect.bisect_left(bounds, found.cuts[keep][0]) if keep < len(found.cuts) else 0
    for index in range(keep, len(found.cuts)):
        start, end = found.cuts[index]
        if start > at:
            add(text[at:start].encode(codec), -1)
        offsets: list[int] = []
        while bound < len(bounds) and bounds[bound] < end:
            if bounds[bound] >= start:
                offsets.append(bounds[bound] - start)
            bound += 1
        if offsets and codec != "ascii":  # in bytes: the text before each, encoded once
            cuts = [start + offset for offset in offsets]
            pieces = zip([start, *cuts], cuts, strict=False)
            offsets = list(accumulate(len(text[a:b].encode(codec)) for a, b in pieces))
        if offsets:
            made.splits.append((len(parts), tuple(offsets)))
        if messages < len(span_messages) and span_messages[messages] == index:
            made.messages.append(len(parts))
            messages += 1
        if models < len(span_models) and span_models[models] == index:
            made.answered.append(len(parts))
            models += 1
        add(text[start:end].encode(codec), owners[index] if made.window else -1)
        through.append(len(parts))
        byte_ends.append(size)
        made.framed_ends.append(len(made.framed))
        at = end
    if at < len(text):
        add(text[at:].encode(codec), -1)
