"""What a request already asks of its own context: whether the client has the provider
clear its tool results itself (Anthropic's `context_management` with a `clear_tool_uses_*`
edit, or the provider's compaction, `compact_*`), in which case context editing leaves the
request to it. The member is read as a parser reads it: its name unescaped, its last value.

Claude Code sends `context_management` on every request, but (2.1.330) only to clear old
thinking blocks (`clear_thinking_20251015`): its tool results are nobody's to manage but
ours, so such a request is edited. Pure; O(the body outside its messages).
"""

from __future__ import annotations

import json
import re
from typing import Final

from toolref_server.context.facts import Facts

_NAME: Final = b'"context_management"'  # looked for first: most bodies have none
# The type prefixes of Anthropic's edits that manage tool results: clearing them, and the
# provider's own compaction of the conversation.
_MANAGING: Final = ("clear_tool_uses", "compact_")
_DECODER: Final = json.JSONDecoder()
_WS: Final = re.compile(r"[ \t\n\r]*")


def clears_tool_results(found: Facts) -> bool:
    """Does the request's own `context_management` member clear tool results? Only a
    member of the body's object counts (not one inside a tool's schema). A value that
    cannot be read counts as yes: the client meant to manage it. O(the body outside its
    messages), at C speed but for its top-level members."""
    body, messages = found.body, found.messages
    before, after = (0, messages[0].bstart), (messages[-1].bend, len(body))
    if all(
        body.find(_NAME, start, end) < 0 and body.find(b"\\u", start, end) < 0
        for start, end in (before, after)
    ):  # neither the name nor an escape that could spell it
        return False
    try:
        head = body[: messages[0].bstart].decode("utf-8")
        tail = body[messages[-1].bend :].decode("utf-8")
    except UnicodeDecodeError:
        return True
    # A parser keeps a member's last value: the tail's over the head's, the last in each.
    value = _member(tail, _skip(tail, 0) + 1, None)  # after the list's `]`
    if value is _ABSENT:
        value = _member(head, _skip(head, 0) + 1, found.key)  # after the object's `{`
    return value is not _ABSENT and _clears(value)


_ABSENT: Final = object()


def _skip(text: str, at: int) -> int:
    found = _WS.match(text, at)
    return found.end() if found is not None else at


def _member(text: str, at: int, stop: str | None) -> object:
    """The value of the last `context_management` member among the members that start at
    `at` of `text` (after `{`, or after a list's `]`: a comma first), up to the member
    named `stop` (the messages, whose value is not in `text`) or the object's end (its name
    decoded, escapes and all); `_ABSENT` when there is none; None (read as "it clears")
    when the text is not members."""
    found: object = _ABSENT
    try:
        at = _skip(text, at)
        while at < len(text) and text[at] != "}":
            if text[at] == ",":
                at = _skip(text, at + 1)
            key, at = _DECODER.raw_decode(text, at)
            at = _skip(text, at)
            if text[at] != ":":
                return None
            at = _skip(text, at + 1)
            if key == stop:
                return found
            value, at = _DECODER.raw_decode(text, at)
            if key == "context_management":
                found = value
            at = _skip(text, at)
    except (ValueError, IndexError, RecursionError):
        return None
    return found


def _clears(value: object) -> bool:
    if not isinstance(value, dict):
        return True
    edits = value.get("edits")
    if not isinstance(edits, list):
        return True
    return any(
        not isinstance(edit, dict)
        or not isinstance(edit.get("type"), str)
        or edit["type"].startswith(_MANAGING)
        for edit in edits
    )
