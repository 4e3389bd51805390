"""Which provider's stream an event clearly comes from, so that an adapter fed another
provider's stream says so instead of reading no calls from it.

Only events that carry a provider's own signature count: an Anthropic or Cohere event type, a
Responses `response.*` type, a chat chunk's `choices[].delta`, Gemini's `candidates`, a
ConverseStream event key, an Ollama line. Anything else (pings, keep-alives, event types a
provider adds later) is nobody's in particular, and never makes an adapter raise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

LABELS: Final = {
    "anthropic": "Anthropic Messages events",
    "bedrock": "Bedrock ConverseStream events",
    "cohere": "Cohere v2 chat events",
    "gemini": "Gemini generateContent responses",
    "ollama": "Ollama /api/chat lines",
    "openai_chat": "OpenAI Chat Completions chunks",
    "openai_responses": "OpenAI Responses events",
}
_ANTHROPIC: Final = frozenset(
    (
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    )
)
_COHERE: Final = frozenset(
    (
        "message-start",
        "message-end",
        "content-start",
        "content-delta",
        "content-end",
        "tool-plan-delta",
        "tool-call-start",
        "tool-call-delta",
        "tool-call-end",
        "citation-start",
        "citation-end",
    )
)
_BEDROCK: Final = frozenset(
    ("messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop", "messageStop")
)


def provider_of_type(kind: str) -> str | None:
    """The provider whose streams alone use the event type `kind`, if any."""
    if kind in _ANTHROPIC:
        return "anthropic"
    if kind.startswith("response."):
        return "openai_responses"
    if kind in _COHERE:
        return "cohere"
    return None


def provider_of_sdk_event(kind: str, event: Any) -> tuple[str, str] | None:
    """`provider_of` for an SDK event object of type `kind`, without dumping it."""
    found = provider_of_type(kind)
    if found is not None:
        return found, f"an event of type {kind!r}"
    if kind == "chunk" and getattr(event, "chunk", None) is not None:
        return "openai_chat", "a `chunk` event of chat.completions.stream()"
    return None


def provider_of(event: Mapping[str, Any]) -> tuple[str, str] | None:
    """The provider whose stream `event` clearly belongs to, and what shows it; None when
    nothing does."""
    kind = event.get("type")
    if isinstance(kind, str):
        found = provider_of_type(kind)
        if found is not None:
            return found, f"an event of type {kind!r}"
        if kind == "chunk" and isinstance(event.get("chunk"), Mapping):
            return "openai_chat", "a `chunk` event of chat.completions.stream()"
    if event.get("object") == "chat.completion.chunk":
        return "openai_chat", "an object 'chat.completion.chunk'"
    choices = event.get("choices")
    if isinstance(choices, list) and choices and _has_delta(choices[0]):
        return "openai_chat", "`choices` with a `delta`"
    if isinstance(event.get("candidates"), list):
        return "gemini", "`candidates`"
    keys = _BEDROCK.intersection(event)
    if keys:
        return "bedrock", f"an event keyed {min(keys)!r}"
    if isinstance(event.get("message"), Mapping) and "done" in event and "created_at" in event:
        return "ollama", "a line with `message`, `done` and `created_at`"
    return None


def _has_delta(choice: Any) -> bool:
    return isinstance(choice, Mapping) and "delta" in choice


def misuse(found: str, evidence: str, provider: str) -> str:
    """What to tell someone who fed `found`'s stream to `provider`'s adapter."""
    return (
        f"these are {LABELS[found]} ({evidence}), not {LABELS[provider]}: the stream was given "
        f"to the {provider!r} adapter; read it with the {found!r} one "
        f"(accumulate(stream, {found!r}) or adapter_for({found!r}))"
    )
