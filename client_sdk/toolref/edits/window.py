"""The long window (issue 39): a long message cut again at content-defined places, so that
content repeated from anywhere in the conversation (a file read twice, in two messages)
is the same segments again, which an edit keeps. `windowed` cuts a span of a body's text;
`toolref.edits.scanner` calls it for each message span with the long window on. JS:
`edits/window.ts`, the same cuts."""

from __future__ import annotations

import re
import threading
import zlib
from typing import Final

from toolref.kit.lru import LRU

# A message span this long is cut again:
WINDOW_LONG: Final = 4096
WINDOW_MIN: Final = 512  # bytes at least between two such cuts
WINDOW_MAX: Final = 8192  # a piece longer than this is cut at its next line end anyway
# Places to cut: after an escaped line end (`\n` in the JSON text) whose line's CRC-32 has
# its low 3 bits clear (one line in 8): content-defined, so the same text cuts at the same
# places wherever it sits. What a message's text cuts into is remembered (`_WINDOWS`, by
# the text: a conversation's old messages are cut once), so a turn costs a scan of its new
# long messages only, and a hash of the old ones (C speed). Bounded: at most `WINDOWS`
# texts and `WINDOWS_CHARS` characters of them and their cuts (a longer text: not kept).
_LINE_END: Final = re.compile(r"\\n")
WINDOWS: Final = 4096
WINDOWS_CHARS: Final = 16 << 20


def _held(cut: tuple[int, tuple[int, ...]]) -> int:
    """What a text's entry holds: its characters (the key: the text itself) and its cuts."""
    return cut[0] + len(cut[1])


# text -> (its length, where it cuts)
_WINDOWS: Final[LRU[str, tuple[int, tuple[int, ...]]]] = LRU(WINDOWS, WINDOWS_CHARS, _held)
_WINDOWS_LOCK: Final = threading.Lock()  # cuts run on the loop and in worker threads


def windowed(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """The span cut at content-defined places (`_LINE_END` of a line whose CRC-32 ends in
    three zero bits; pieces at least `WINDOW_MIN` and, where a line end allows, at most
    `WINDOW_MAX` bytes; none within `WINDOW_MIN` of its end) when it is `WINDOW_LONG` long
    or more; else whole. Linear in the span: one regex pass and a CRC per line, once per
    distinct text (`_WINDOWS`)."""
    if end - start < WINDOW_LONG:
        return [(start, end)]
    span = text[start:end]
    with _WINDOWS_LOCK:
        known = _WINDOWS.get(span)
    if known is not None:
        cuts = known[1]
    else:
        cuts = _cuts_of(span)  # outside the lock: linear in the span
        with _WINDOWS_LOCK:
            _WINDOWS.put(span, (len(span), cuts))
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


def forget() -> None:
    """Remember no text's cuts (tests, benches: `scanner.forget`)."""
    with _WINDOWS_LOCK:
        _WINDOWS.clear()
