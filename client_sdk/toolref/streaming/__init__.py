"""Streaming tool calls: provider events -> `ToolChunk`s -> `ToolBuffer` -> `ToolCall`s."""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable
from typing import Any

from toolref.streaming.adapters import (
    ADAPTERS,
    AnthropicAdapter,
    BedrockAdapter,
    CohereAdapter,
    GeminiAdapter,
    OllamaAdapter,
    OpenAIChatAdapter,
    OpenAIResponsesAdapter,
    StreamAdapter,
    adapter_for,
)
from toolref.streaming.buffer import ToolBuffer
from toolref.streaming.call import CallStatus, ToolCall
from toolref.streaming.chunk import ABORTED, FILTERED, MALFORMED, TRUNCATED, ArgPatch, ToolChunk
from toolref.streaming.event import (
    ArgumentsProgress,
    CallCompleted,
    CallFailed,
    CallStarted,
    ToolEvent,
)
from toolref.streaming.partial import partial_arguments


def _prepared(
    provider: str | StreamAdapter, buffer: ToolBuffer | None
) -> tuple[StreamAdapter, ToolBuffer]:
    adapter = adapter_for(provider) if isinstance(provider, str) else provider
    return adapter, buffer if buffer is not None else ToolBuffer(progress_interval=None)


def _finished(adapter: StreamAdapter, buffer: ToolBuffer) -> list[ToolCall]:
    buffer.feed_all(adapter.end())
    return buffer.close()


def accumulate(
    events: Iterable[Any], provider: str | StreamAdapter, buffer: ToolBuffer | None = None
) -> list[ToolCall]:
    """Every tool call of one streamed response, in call order."""
    adapter, buffer = _prepared(provider, buffer)
    for event in events:
        buffer.feed_all(adapter.feed(event))
    return _finished(adapter, buffer)


async def accumulate_async(
    events: AsyncIterable[Any], provider: str | StreamAdapter, buffer: ToolBuffer | None = None
) -> list[ToolCall]:
    """`accumulate` for an async stream (`async for event in stream`)."""
    adapter, buffer = _prepared(provider, buffer)
    async for event in events:
        buffer.feed_all(adapter.feed(event))
    return _finished(adapter, buffer)


__all__ = [
    "ABORTED",
    "ADAPTERS",
    "FILTERED",
    "MALFORMED",
    "TRUNCATED",
    "AnthropicAdapter",
    "ArgPatch",
    "ArgumentsProgress",
    "BedrockAdapter",
    "CallCompleted",
    "CallFailed",
    "CallStarted",
    "CallStatus",
    "CohereAdapter",
    "GeminiAdapter",
    "OllamaAdapter",
    "OpenAIChatAdapter",
    "OpenAIResponsesAdapter",
    "StreamAdapter",
    "ToolBuffer",
    "ToolCall",
    "ToolChunk",
    "ToolEvent",
    "accumulate",
    "accumulate_async",
    "adapter_for",
    "partial_arguments",
]
