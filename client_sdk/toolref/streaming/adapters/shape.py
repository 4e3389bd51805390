"""Whether streamed argument text has closed one JSON object, read a delta at a time.

Asking "are the arguments so far a whole object?" by joining and parsing them costs their
length, and some servers make the question come up on every fragment (a name or a fresh id
resent with each): quadratic. `Shape` follows only the brackets and strings of each delta,
once, so the question costs the new text; the strict parse is left for the one moment the
outer object closes.
"""

from __future__ import annotations

import re

_IN_STRING = re.compile(r'["\\]')
_STRUCTURE = re.compile(r'[{}\[\]"\\]')
_NOT_SPACE = re.compile(r"[^ \t\n\r]")

_BEFORE, _OPEN, _CLOSED, _OTHER = range(4)


class Shape:
    """The bracket structure of text fed in pieces: `closed` once the text is one `{...}`
    with only whitespace after it (brackets balanced outside strings; the caller still
    parses it, once, to know that the tokens inside are JSON)."""

    __slots__ = ("depth", "escaped", "in_string", "state")

    def __init__(self) -> None:
        self.state = _BEFORE
        self.depth = 0
        self.in_string = False
        self.escaped = False

    @property
    def closed(self) -> bool:
        return self.state == _CLOSED

    def feed(self, text: str) -> None:
        at, end = 0, len(text)
        while at < end and self.state != _OTHER:
            if self.escaped:  # the character after a backslash, maybe in the next delta
                self.escaped = False
                at += 1
            elif self.depth == 0:
                at = self._outside(text, at)
            else:
                at = self._inside(text, at)

    def _outside(self, text: str, at: int) -> int:
        found = _NOT_SPACE.search(text, at)
        if found is None:
            return len(text)
        if self.state == _BEFORE and found.group() == "{":
            self.state, self.depth = _OPEN, 1
        else:
            self.state = _OTHER  # not an object, or text after the object closed
        return found.end()

    def _inside(self, text: str, at: int) -> int:
        found = (_IN_STRING if self.in_string else _STRUCTURE).search(text, at)
        if found is None:
            return len(text)
        char = found.group()
        if char == "\\":
            self.escaped = self.in_string
        elif char == '"':
            self.in_string = not self.in_string
        elif char in "{[":
            self.depth += 1
        else:
            self.depth -= 1
            if self.depth == 0:
                self.state = _CLOSED
        return found.end()
