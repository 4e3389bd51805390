"""Backend-switch handoff: carry tool context verbatim when a conversation changes model.

A summary of a conversation made only from its text loses every file read and command
output, and the next model then "quotes" files from memory. `build` instead keeps the text
summary short (an LLM's, or a deterministic `dialogue.digest`) and carries the tool results
themselves, deduplicated (`dedup`), cut to size (`render`), in a markdown block that
`prepend` puts in front of the first user message of the request for the new backend.
All pure: no I/O.

    handoff = build(old_messages, "anthropic")
    request = prepend(new_messages, handoff.block, "openai-chat")
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from toolref import formats
from toolref.formats import Format
from toolref.handoff.blocks import ToolBlock, tool_blocks
from toolref.handoff.commands import has_side_effects
from toolref.handoff.dedup import deduplicate
from toolref.handoff.dialogue import digest
from toolref.handoff.render import CLOSE, OPEN, render
from toolref.kit.kinds import DEFAULT_KINDS, KindTable
from toolref.wire.models import FormatName

MAX_TOOL_CONTEXT_CHARS: Final = 40_000
PER_RESULT_CHARS: Final = 4_000
SUMMARY_CHARS: Final = 3_000


@dataclass(frozen=True, slots=True)
class Handoff:
    block: str
    tool_calls: int  # calls seen
    kept: int  # calls carried in the block
    dropped_duplicates: int  # left out because a later one supersedes them
    left_out: int  # left out to fit max_tool_context_chars (the oldest first)
    chars_omitted: int  # cut from the middle of long results
    interrupted: int  # calls that never got a result
    errors: int

    def stats(self) -> dict[str, int]:
        return {
            "toolCalls": self.tool_calls,
            "kept": self.kept,
            "droppedDuplicates": self.dropped_duplicates,
            "leftOut": self.left_out,
            "charsOmitted": self.chars_omitted,
            "interrupted": self.interrupted,
            "errors": self.errors,
        }


def _format(messages: Sequence[Any], fmt: Format | FormatName | None) -> Format:
    return fmt if isinstance(fmt, Format) else formats.detect(messages, fmt)


def build(
    messages: Sequence[Any],
    fmt: Format | FormatName | None = None,
    *,
    summary: str | None = None,
    summarize_text: bool = True,
    max_tool_context_chars: int = MAX_TOOL_CONTEXT_CHARS,
    per_result_chars: int = PER_RESULT_CHARS,
    kinds: KindTable = DEFAULT_KINDS,
) -> Handoff:
    """The handoff block for `messages` (full payloads; hydrate markers first).

    `summary`: the text summary to use (an LLM's); when None and `summarize_text`, the
    deterministic digest of the dialogue.
    """
    if max_tool_context_chars < 1000 or per_result_chars < 200:
        raise ValueError(
            f"max_tool_context_chars must be >= 1000 and per_result_chars >= 200, got "
            f"{max_tool_context_chars} and {per_result_chars}"
        )
    blocks = tool_blocks(messages, _format(messages, fmt), kinds)
    kept, dropped = deduplicate(blocks)
    if summary is None and summarize_text:
        summary = digest(messages, min(SUMMARY_CHARS, max_tool_context_chars // 4))
    rendered = render(kept, summary, max_tool_context_chars, per_result_chars)
    return Handoff(
        block=rendered.text,
        tool_calls=len(blocks),
        kept=rendered.kept,
        dropped_duplicates=dropped,
        left_out=rendered.left_out,
        chars_omitted=rendered.omitted_chars,
        interrupted=sum(b.interrupted for b in blocks),
        errors=sum(b.is_error for b in blocks),
    )


# The text block each format puts in a list content.
_TEXT_PART: Final = {"openai-responses": "input_text"}


def prepend(
    messages: Sequence[Any], block: str, fmt: Format | FormatName | None = None
) -> list[Any]:
    """Copy of `messages` with `block` in front of the first user message's text (after
    the tool results that lead it, which stay first)."""
    if not isinstance(block, str):
        fix = "handoff.block" if isinstance(block, Handoff) else "build(old_messages, fmt).block"
        raise TypeError(
            f"block is the handoff's text (a str), not a {type(block).__name__}: "
            f"prepend(messages, {fix}, fmt)"
        )
    name = _format(messages, fmt).name
    out = list(messages)
    for index, message in enumerate(out):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        if message.get("type") not in (None, "message"):
            continue  # a Responses function_call_output, say
        updated = copy.copy(message)
        content = message.get("content")
        parts = message.get("parts")
        if isinstance(content, str):
            updated["content"] = f"{block}\n\n{content}"
        elif isinstance(content, list):
            kind = _TEXT_PART.get(name, "text")
            at = _results_first(content)
            updated["content"] = [*content[:at], {"type": kind, "text": block}, *content[at:]]
        elif isinstance(parts, list):
            text_part = {"text": block} if name == "gemini" else {"type": "text", "text": block}
            at = _results_first(parts)
            updated["parts"] = [*parts[:at], text_part, *parts[at:]]
        else:
            continue
        out[index] = updated
        return out
    return [_user_message(name, block), *out]


def _results_first(items: Sequence[Any]) -> int:
    """How many tool results lead a message's parts (Anthropic's `tool_result` blocks,
    Gemini's `functionResponse` parts): they stay first, as the APIs want results right
    after the calls they answer; the block goes after them."""
    count = 0
    for item in items:
        if not isinstance(item, dict):
            break
        if item.get("type") != "tool_result" and "functionResponse" not in item:
            break
        count += 1
    return count


def _user_message(name: str, block: str) -> dict[str, Any]:
    """A user message holding `block`, in the shape of format `name`."""
    if name == "gemini":
        return {"role": "user", "parts": [{"text": block}]}
    if name == "ai-sdk-v5":
        return {"role": "user", "parts": [{"type": "text", "text": block}]}
    return {"role": "user", "content": block}


__all__ = [
    "CLOSE",
    "MAX_TOOL_CONTEXT_CHARS",
    "OPEN",
    "PER_RESULT_CHARS",
    "Handoff",
    "ToolBlock",
    "build",
    "digest",
    "has_side_effects",
    "prepend",
]
