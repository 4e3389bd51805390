"""Adapters from raw provider stream events to `ToolChunk`s."""

from __future__ import annotations

from toolref.streaming.adapters.anthropic import AnthropicAdapter
from toolref.streaming.adapters.base import StreamAdapter
from toolref.streaming.adapters.bedrock import BedrockAdapter
from toolref.streaming.adapters.cohere import CohereAdapter
from toolref.streaming.adapters.gemini import GeminiAdapter
from toolref.streaming.adapters.ollama import OllamaAdapter
from toolref.streaming.adapters.openai_chat import OpenAIChatAdapter
from toolref.streaming.adapters.openai_responses import OpenAIResponsesAdapter
from toolref.wire.errors import ConfigurationError

ADAPTERS: dict[str, type[StreamAdapter]] = {
    cls.provider: cls
    for cls in (
        AnthropicAdapter,
        BedrockAdapter,
        CohereAdapter,
        GeminiAdapter,
        OllamaAdapter,
        OpenAIChatAdapter,
        OpenAIResponsesAdapter,
    )
}


def adapter_for(provider: str) -> StreamAdapter:
    """A fresh adapter for one response from `provider` (a key of `ADAPTERS`)."""
    try:
        return ADAPTERS[provider]()
    except KeyError:
        known = ", ".join(sorted(ADAPTERS))
        raise ConfigurationError(
            f"no stream adapter for provider {provider!r}; use one of: {known}"
        ) from None


__all__ = [
    "ADAPTERS",
    "AnthropicAdapter",
    "BedrockAdapter",
    "CohereAdapter",
    "GeminiAdapter",
    "OllamaAdapter",
    "OpenAIChatAdapter",
    "OpenAIResponsesAdapter",
    "StreamAdapter",
    "adapter_for",
]
