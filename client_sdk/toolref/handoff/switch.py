"""A request for a backend the conversation switched to: pure rewriting, no I/O.

What another backend produced breaks the new one in two known ways (relay.md): tool ids it
minted that the new API refuses (`functions.write_todos:0` against Anthropic's
`^[a-zA-Z0-9_-]+$`), and opaque fields bound to the backend that signed them (Anthropic
`thinking` signatures, `redacted_thinking`, OpenAI Responses `encrypted_content`). So, in the
first `at` messages (those from before the switch):

- a tool id outside the pattern becomes `tid_` + the hex of its UTF-8 bytes (reversible with
  `original_id`; an id inside the pattern is left alone), in calls and results alike;
- thinking and redacted-thinking blocks are dropped, and reasoning items of the Responses
  API with `encrypted_content` too;

and the handoff block of those messages (`toolref.handoff.build`) goes in front of the first
user message. The same request always gives the same result, so every later turn on the new
backend gets the same prefix and its prompt cache keeps hitting. `switched_text` does it on
a body's text: every member and message it leaves unchanged keeps its bytes (key order,
`1.0`, `-0.0`, `1e-7`); only what it rewrites is written again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from toolref.handoff import build, prepend
from toolref.kit import spans
from toolref.wire.errors import ValidationError
from toolref.wire.models import FormatName

ID_PATTERN: Final = re.compile(r"[a-zA-Z0-9_-]{1,256}")
_PREFIX: Final = "tid_"
_OPAQUE_BLOCKS: Final = frozenset({"thinking", "redacted_thinking"})
_ID_FIELDS: Final = ("id", "tool_use_id", "tool_call_id", "call_id")


def mapped_id(value: str) -> str:
    """`value` if the new API takes it, else its reversible spelling in `[a-zA-Z0-9_-]`."""
    if ID_PATTERN.fullmatch(value) and not value.startswith(_PREFIX):
        return value
    return _PREFIX + value.encode().hex()


def original_id(value: str) -> str:
    """The id `mapped_id` was given."""
    if value.startswith(_PREFIX):
        try:
            return bytes.fromhex(value[len(_PREFIX) :]).decode()
        except ValueError:
            return value
    return value


def switched(
    body: Mapping[str, Any], fmt: FormatName, messages_key: str, at: int | None = None
) -> dict[str, Any]:
    """`body` for the new backend; `at`: how many of its messages came before the switch
    (all of them when None). Linear in the body."""
    messages = body[messages_key]
    before = len(messages) if at is None else max(0, min(at, len(messages)))
    cleaned = [m for m in (_cleaned(m, strip=True) for m in messages[:before]) if m is not None]
    handoff = build(cleaned, fmt)
    # Ids are mapped after the switch too: a result there may answer a call from before.
    rest = [_cleaned(m, strip=False) for m in messages[before:]]
    out = dict(body)
    out[messages_key] = prepend([*cleaned, *rest], handoff.block, fmt)
    return out


def switched_text(text: str, fmt: FormatName, messages_key: str, at: int | None) -> str | None:
    """`switched` on a body's JSON text; None when it is not an object holding its messages
    as a list (it then travels as it is). Messages and members the switch leaves as they
    were keep their text; the rest is written by `json` (no other bytes change). Linear in
    the text."""
    try:
        document = spans.document(text, messages_key)
    except (ValueError, RecursionError):
        return None
    if document.items is None or not isinstance(document.value, dict):
        return None
    old = document.value[messages_key]
    try:
        new = switched(document.value, fmt, messages_key, at)[messages_key]
    except ValidationError:  # messages that are not in `fmt`: nothing to rewrite
        return None
    texts = [_dumped(m) for m in new]
    # The messages after the switch keep their place at the end of the list; those the
    # rewrite left equal keep their bytes.
    for back in range(1, min(len(old), len(new)) + 1):
        if new[-back] == old[-back]:
            first, last = document.items[-back]
            texts[-back] = text[first:last]
    listed = "[" + ",".join(texts) + "]"
    parts = []
    for name, member in document.members.items():
        if name == messages_key:
            parts.append(text[member.key_start : member.key_end] + ":" + listed)
        else:
            parts.append(spans.member_text(text, member))
    return "{" + ",".join(parts) + "}"


def _dumped(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _cleaned(message: Any, *, strip: bool) -> Any:
    """A message with ids mapped and, with `strip` (from before the switch), without opaque
    fields; None for an item that was nothing but an opaque field."""
    if not isinstance(message, dict):
        return message
    if strip and message.get("type") == "reasoning" and "encrypted_content" in message:
        return None
    out = {k: _mapped(k, v) for k, v in message.items()}
    if strip and message.get("type") == "function_call":
        # Its `id` (`fc_...`) names an item of the old backend, whose reasoning item is
        # gone: OpenAI refuses the pair half-kept (400). `call_id` pairs the result.
        out.pop("id", None)
    content = out.get("content")
    if isinstance(content, list):
        kept = [_cleaned(block, strip=strip) for block in content if not (strip and _opaque(block))]
        if content and not kept:  # nothing but thinking: a message no API takes empty
            return None
        out["content"] = kept
    calls = out.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [_cleaned(call, strip=strip) for call in calls]
    return out


def _opaque(block: Any) -> bool:
    """A thinking or redacted-thinking block (any JSON may come: a `type` of any kind)."""
    kind = block.get("type") if isinstance(block, dict) else None
    return isinstance(kind, str) and kind in _OPAQUE_BLOCKS


def _mapped(key: str, value: Any) -> Any:
    if key in _ID_FIELDS and isinstance(value, str):
        return mapped_id(value)
    return value
