"""What a request already asks of its own context: whether the client has the provider
clear its tool results itself (Anthropic's `context_management` with a `clear_tool_uses_*`
edit), in which case context editing leaves the request to it.

Claude Code sends `context_management` on every request, but (2.1.330) only to clear old
thinking blocks (`clear_thinking_20251015`): its tool results are nobody's to manage but
ours, so such a request is edited. Pure; O(the body outside its messages).
"""

from __future__ import annotations

import json
import re
from typing import Final

from toolref_server.context.facts import Facts

# A member of the body's own object (inside a string, a quote is escaped).
_MEMBER: Final = re.compile(rb'"context_management"\s*:\s*')
_TOOL_CLEARING: Final = "clear_tool_uses"  # the type prefix of Anthropic's tool-result edit
_DECODER: Final = json.JSONDecoder()


def clears_tool_results(found: Facts) -> bool:
    """Does the request's own `context_management` (outside its messages) clear tool
    results? A value that cannot be read counts as yes: the client meant to manage it."""
    body, messages = found.body, found.messages
    for start, end in ((0, messages[0].bstart), (messages[-1].bend, len(body))):
        match = _MEMBER.search(body, start, end)
        if match is None:
            continue
        try:
            value, _ = _DECODER.raw_decode(body[match.end() : end].decode("utf-8"))
        except ValueError:  # UnicodeDecodeError too
            return True
        return _clears(value)
    return False


def _clears(value: object) -> bool:
    if not isinstance(value, dict):
        return True
    edits = value.get("edits")
    if not isinstance(edits, list):
        return True
    return any(
        not isinstance(edit, dict)
        or not isinstance(edit.get("type"), str)
        or edit["type"].startswith(_TOOL_CLEARING)
        for edit in edits
    )
