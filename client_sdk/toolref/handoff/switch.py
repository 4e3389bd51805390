"""A request for a backend the conversation switched to: pure rewriting, no I/O.

What another backend produced breaks the new one in two known ways (relay.md): tool ids it
minted that the new API refuses (`functions.write_todos:0` against Anthropic's
`^[a-zA-Z0-9_-]+$`), and opaque fields bound to the backend that signed them (Anthropic
`thinking` signatures, `redacted_thinking`, OpenAI Responses `encrypted_content`). So, in the
first `at` messages (those from before the switch):

- a tool id outside the pattern, or longer than the new API takes (`ID_CAPS`: 40 characters
  for Chat Completions, 64 for Responses), becomes `tid_` + the hex of its UTF-8 bytes
  (reversible with `original_id`) when that fits, else `tid_h` + 35 hex digits of its SHA-256
  (hex doubles the length: a 23-character Kimi id became 50); an id the new API takes is left
  alone. In calls and results alike, so they still pair;
- thinking and redacted-thinking blocks are dropped, and every reasoning item of the
  Responses API: with `encrypted_content` (`store=false`) or without (`store=true`: an
  `rs_` id only the old backend holds), it is the old backend's state, not the dialogue's;
  a function, custom, shell or apply-patch call loses its item `id` with it (OpenAI refuses
  either of the pair alone);

and the handoff block of those messages (`toolref.handoff.build`) goes in front of the first
user message. The same request always gives the same result, so every later turn on the new
backend gets the same prefix and its prompt cache keeps hitting. `switched_text` does it on
a body's text: every member and message it leaves unchanged keeps its bytes (key order,
`1.0`, `-0.0`, `1e-7`); in a message whose only change is a mapped id, only that id's
string is written again; the other messages it changes are written again whole.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Final

from toolref.handoff import build, prepend
from toolref.kit import spans
from toolref.wire.encoding import surrogates_escaped
from toolref.wire.errors import ValidationError
from toolref.wire.models import FormatName

ID_PATTERN: Final = re.compile(r"[a-zA-Z0-9_-]{1,256}")
ID_CAPS: Final[Mapping[str, int]] = {"openai-chat": 40, "openai-responses": 64}
"""The longest tool id an API takes, where it is under the pattern's 256: Chat Completions
refuses a `tool_calls[].id` or `tool_call_id` over 40 characters, Responses a `call_id` (and
item `id`) over 64, both with 400 `string_above_max_length`."""
_PREFIX: Final = "tid_"
_DIGESTED: Final = "tid_h"  # `h` is no hex digit: never the spelling of an id
_DIGEST_DIGITS: Final = 35  # 140 bits; `tid_h` and them make 40 characters, under every cap
_OPAQUE_BLOCKS: Final = frozenset({"thinking", "redacted_thinking"})
_ID_FIELDS: Final = ("id", "tool_use_id", "tool_call_id", "call_id")
# Responses call items whose item `id` is optional, dropped with the reasoning item before
# them (a `local_shell_call` and a `computer_call` require theirs: they stay).
_HALF_PAIRED: Final = frozenset(
    {"function_call", "custom_tool_call", "shell_call", "apply_patch_call"}
)


def id_cap(fmt: str | None) -> int:
    """The longest tool id the API of `fmt` takes."""
    return ID_CAPS.get(fmt or "", 256)


def mapped_id(value: str, fmt: FormatName | None = None) -> str:
    """`value` if the API of `fmt` takes it (the pattern, and its cap); else, in
    `[a-zA-Z0-9_-]` and within the cap, its reversible spelling (`tid_` and hex) or, when
    that is too long, a digest (`tid_h` and 35 hex digits of SHA-256). Deterministic, and
    two ids map to one only when SHA-256 collides in 140 bits."""
    return _fitted(value, id_cap(fmt))


def _fitted(value: str, cap: int) -> str:
    if len(value) <= cap and ID_PATTERN.fullmatch(value) and not value.startswith(_PREFIX):
        return value
    data = value.encode("utf-8", "surrogatepass")  # JSON can carry a lone surrogate
    spelled = _PREFIX + data.hex()
    if len(spelled) <= cap:
        return spelled
    return _DIGESTED + hashlib.sha256(data).hexdigest()[:_DIGEST_DIGITS]


def original_id(value: str) -> str:
    """The id `mapped_id` spelled out; a digest (or an id never mapped) as it is."""
    if value.startswith(_PREFIX):
        try:
            return bytes.fromhex(value[len(_PREFIX) :]).decode("utf-8", "surrogatepass")
        except ValueError:
            return value
    return value


def switched(
    body: Mapping[str, Any], fmt: FormatName, messages_key: str, at: int | None = None
) -> dict[str, Any]:
    """`body` for the new backend; `at`: how many of its messages came before the switch
    (all of them when None). Linear in the body."""
    out = dict(body)
    out[messages_key] = _switched_messages(body[messages_key], fmt, at)[0]
    return out


def _switched_messages(
    messages: list[Any], fmt: FormatName, at: int | None
) -> tuple[list[Any], list[int | None]]:
    """The messages for the new backend, and for each the index of the message it was made
    from (None: the user message `prepend` adds to hold the block). Linear."""
    before = len(messages) if at is None else max(0, min(at, len(messages)))
    cap = id_cap(fmt)
    cleaned, origins = [], []
    for index, message in enumerate(messages[:before]):
        if _reasoning_item(message):
            continue
        stripped = _cleaned(message, cap, strip=True)
        if stripped is not None:  # None: a message that was nothing but thinking
            cleaned.append(stripped)
            origins.append(index)
    handoff = build(cleaned, fmt)
    # Ids are mapped after the switch too: a result there may answer a call from before.
    rest = [_cleaned(m, cap, strip=False) for m in messages[before:]]
    new = prepend([*cleaned, *rest], handoff.block, fmt)
    found: list[int | None] = [*origins, *range(before, len(messages))]
    if len(new) > len(found):  # `prepend` put a user message of its own first
        found.insert(0, None)
    return new, found


def switched_text(text: str, fmt: FormatName, messages_key: str, at: int | None) -> str | None:
    """`switched` on a body's JSON text; None when it is not an object holding its messages
    as a list (it then travels as it is). Messages and members the switch leaves as they
    were keep their text, wherever others were dropped; in a message whose only change is
    a mapped id, only that id's string is replaced (found by a scan of the message's text,
    so a duplicate key's last value, the one parsed, is the one replaced); the rest is
    written by `json` (a lone surrogate as its escape). The body's frame is written anew:
    the whitespace between its top-level members and between its messages is not kept,
    and a top-level member named twice keeps its last value only (a switched turn is
    rewritten for another provider, whose prompt cache starts anew). Linear in the text."""
    try:
        document = spans.document(text, messages_key)
    except (ValueError, RecursionError):
        return None
    if document.items is None or not isinstance(document.value, dict):
        return None
    old = document.value[messages_key]
    try:
        new, origins = _switched_messages(old, fmt, at)
    except ValidationError:  # messages that are not in `fmt`: nothing to rewrite
        return None
    texts = []
    for message, origin in zip(new, origins, strict=True):
        edits = None if origin is None else _id_edits(old[origin], message)
        if origin is None or edits is None:
            texts.append(_dumped(message))
            continue
        first, last = document.items[origin]
        if edits:  # only ids mapped: their strings replaced, every other byte kept
            found = spans.locate(text, first, [path for path, _ in edits])
            replaced = [(*found[path], _dumped(mapped)) for path, mapped in edits]
            texts.append(spans.splice(text, replaced, first, last))
        else:
            texts.append(text[first:last])
    listed = "[" + ",".join(texts) + "]"
    parts = []
    for name, member in document.members.items():
        if name == messages_key:
            parts.append(text[member.key_start : member.key_end] + ":" + listed)
        else:
            parts.append(spans.member_text(text, member))
    return "{" + ",".join(parts) + "}"


def _dumped(value: Any) -> str:
    """`value` as JSON text; a lone surrogate (JSON can carry `\\ud800`) as its escape, as
    no UTF-8 encoder takes it raw."""
    return surrogates_escaped(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _id_edits(old: Any, new: Any) -> list[tuple[spans.Path, str]] | None:
    """Where `new` (`_cleaned` of `old`) holds a mapped id in place of `old`'s, as (path,
    id); None when anything else differs (a member or block dropped): it is then written
    again whole. `[]` when nothing differs. Walks only what `_cleaned` rebuilt: linear."""
    found: list[tuple[spans.Path, str]] = []
    stack: list[tuple[spans.Path, Any, Any]] = [((), old, new)]
    while stack:
        path, was, now = stack.pop()
        if was is now:  # `_cleaned` hands on what it leaves alone, not a copy
            continue
        if isinstance(was, dict) and isinstance(now, dict) and len(was) == len(now):
            for (key, a), (other, b) in zip(was.items(), now.items(), strict=True):
                if key != other:
                    return None
                if a is not b and key in _ID_FIELDS and isinstance(a, str) and isinstance(b, str):
                    found.append(((*path, key), b))
                else:
                    stack.append(((*path, key), a, b))
        elif isinstance(was, list) and isinstance(now, list) and len(was) == len(now):
            stack.extend(((*path, i), a, b) for i, (a, b) in enumerate(zip(was, now, strict=True)))
        else:
            return None
    return found


def _reasoning_item(message: Any) -> bool:
    """A Responses `reasoning` item: the old backend's state (its `encrypted_content`, or
    with `store=true` an `rs_` id it holds), which no other backend can resolve."""
    return isinstance(message, dict) and message.get("type") == "reasoning"


def _cleaned(message: Any, cap: int, *, strip: bool) -> Any:
    """A message with ids mapped to fit `cap` and, with `strip` (from before the switch),
    without opaque fields; None for a message that was nothing but thinking."""
    if not isinstance(message, dict):
        return message
    out = {k: _mapped(k, v, cap) for k, v in message.items()}
    kind = message.get("type")  # any JSON may come: a list is no member of a set
    if strip and isinstance(kind, str) and kind in _HALF_PAIRED:
        # Its `id` (`fc_...`, `ctc_...`, ...) names an item of the old backend, whose reasoning
        # item is gone: OpenAI refuses the pair half-kept (400). `call_id` pairs the result.
        out.pop("id", None)
    content = out.get("content")
    if isinstance(content, list):
        kept = [
            _cleaned(block, cap, strip=strip) for block in content if not (strip and _opaque(block))
        ]
        if content and not kept:  # nothing but thinking: a message no API takes empty
            return None
        out["content"] = kept
    calls = out.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [_cleaned(call, cap, strip=strip) for call in calls]
    return out


def _opaque(block: Any) -> bool:
    """A thinking or redacted-thinking block (any JSON may come: a `type` of any kind)."""
    kind = block.get("type") if isinstance(block, dict) else None
    return isinstance(kind, str) and kind in _OPAQUE_BLOCKS


def _mapped(key: str, value: Any, cap: int) -> Any:
    if key in _ID_FIELDS and isinstance(value, str):
        return _fitted(value, cap)
    return value
