"""The dialogue of a conversation (what was asked and concluded), without the tool traffic.

`digest` is the deterministic text summary a handoff uses when no LLM summarizer is
configured: the user's requests, then the assistant's last conclusions, within a budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

_TEXT_TYPES: Final = ("text", "input_text", "output_text")


@dataclass(frozen=True, slots=True)
class Turn:
    role: str  # "user" or "assistant"
    text: str


def turns(messages: Sequence[Any]) -> list[Turn]:
    """User and assistant text, in order; tool calls, tool results and system text left out."""
    found = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "model":
            role = "assistant"
        if role not in ("user", "assistant") or message.get("type") not in (None, "message"):
            continue
        text = _text(message.get("content")) or _text(message.get("parts"))
        if text.strip():
            found.append(Turn(str(role), text.strip()))
    return found


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    pieces = []
    for part in content:
        if isinstance(part, str):
            pieces.append(part)
        elif (
            isinstance(part, dict)
            and isinstance(part.get("text"), str)
            and part.get("type", "text") in _TEXT_TYPES
            and part.get("thought") is not True  # Gemini's thinking, as a `thinking` block
        ):
            pieces.append(part["text"])
    return "\n".join(pieces)


def _clip(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def digest(messages: Sequence[Any], max_chars: int = 3000, conclusions: int = 3) -> str:
    """The user's requests (oldest first) and the assistant's last `conclusions` answers."""
    found = turns(messages)
    asked = [t.text for t in found if t.role == "user"]
    said = [t.text for t in found if t.role == "assistant"][-conclusions:]
    half = max_chars // 2
    lines = ["User requests:"]
    used = len(lines[0])
    per_request = max(80, half // max(1, len(asked)))
    for text in asked:
        line = f"- {_clip(text, per_request)}"
        if used + len(line) + 1 > half:
            lines.append(f"- ({len(asked) - len(lines) + 1} more requests)")
            break
        lines.append(line)
        used += len(line) + 1
    if said:
        lines.append("Assistant's latest conclusions:")
        room = max_chars - len("\n".join(lines)) - 1
        per_answer = max(80, room // len(said) - 3)
        lines += [f"- {_clip(text, per_answer)}" for text in said]
    text = "\n".join(lines)
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"
