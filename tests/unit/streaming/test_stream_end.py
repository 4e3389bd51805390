"""What the end of the events means, per provider, for every way of consuming them
(`accumulate`, `accumulate_async`, a hand-written loop over `adapter.end()`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import pytest
from openai.types.chat import ChatCompletionChunk

from toolref.streaming import (
    ABORTED,
    CallCompleted,
    CallFailed,
    CallStatus,
    ToolBuffer,
    ToolCall,
    accumulate,
    accumulate_async,
    adapter_for,
)

Event = dict[str, Any]


def chunk(*calls: Event, finish: str | None = None, choice: int = 0) -> ChatCompletionChunk:
    """A chunk as the openai SDK yields it (the SDK never yields `[DONE]`)."""
    return ChatCompletionChunk.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1_760_000_000,
            "model": "glm-5.1",
            "choices": [
                {
                    "index": choice,
                    "delta": {"tool_calls": list(calls)} if calls else {},
                    "finish_reason": finish,
                }
            ],
        }
    )


def fragment(index: int, args: str, call_id: str | None = None, name: str | None = None) -> Event:
    out: Event = {"index": index, "function": {"arguments": args}}
    if call_id is not None:
        out.update(id=call_id, type="function")
        out["function"]["name"] = name
    return out


# Two calls streamed the usual way; the router drops finish_reason and the SDK drops [DONE].
NO_FINISH = [
    chunk(fragment(0, "", "call_a", "read")),
    chunk(fragment(0, '{"path": '), fragment(1, "", "call_b", "grep")),
    chunk(fragment(0, '"a.py"}'), fragment(1, '{"pattern": "x"}')),
]
WANTED = [
    ("call_a", "read", CallStatus.COMPLETE, {"path": "a.py"}),
    ("call_b", "grep", CallStatus.COMPLETE, {"pattern": "x"}),
]


def summary(calls: list[ToolCall]) -> list[tuple[str, str, CallStatus, dict[str, Any] | None]]:
    return [(call.id, call.name, call.status, call.arguments) for call in calls]


async def _aiter(events: Iterable[Any]) -> AsyncIterator[Any]:
    for event in events:
        yield event


def _generator(events: Iterable[Any]) -> Iterator[Any]:
    yield from events  # a one-shot iterator, as an SDK stream is


def by_hand(events: Iterable[Any], provider: str) -> tuple[list[ToolCall], list[ToolCall]]:
    """The documented loop: the calls `close()` returns and those the events reported."""
    adapter, buffer = adapter_for(provider), ToolBuffer(progress_interval=None)
    reported: list[ToolCall] = []
    for event in events:
        for happened in buffer.feed_all(adapter.feed(event)):
            if isinstance(happened, CallCompleted | CallFailed):
                reported.append(happened.call)
    for happened in buffer.feed_all(adapter.end()):
        if isinstance(happened, CallCompleted | CallFailed):
            reported.append(happened.call)
    return buffer.close(), reported


def test_sdk_chunks_without_finish_reason_give_complete_calls() -> None:
    assert summary(accumulate(_generator(NO_FINISH), "openai_chat")) == WANTED


def test_async_sdk_chunks_without_finish_reason_give_complete_calls() -> None:
    calls = asyncio.run(accumulate_async(_aiter(NO_FINISH), "openai_chat"))
    assert summary(calls) == WANTED


def test_the_hand_written_loop_reports_the_calls_at_the_end() -> None:
    calls, reported = by_hand(NO_FINISH, "openai_chat")
    assert summary(calls) == WANTED
    assert summary(reported) == WANTED


def test_sdk_chunks_cut_mid_arguments_give_no_runnable_call() -> None:
    cut = [*NO_FINISH[:2], chunk(fragment(0, '"a.py"}'), fragment(1, '{"pattern": "x'))]
    for calls in (
        accumulate(_generator(cut), "openai_chat"),
        asyncio.run(accumulate_async(_aiter(cut), "openai_chat")),
    ):
        assert [(c.id, c.status, c.error_type, c.runnable) for c in calls] == [
            ("call_a", CallStatus.COMPLETE, None, True),
            ("call_b", CallStatus.INCOMPLETE, ABORTED, False),
        ]
        assert calls[1].raw_arguments == '{"pattern": "x'
        assert "no finish_reason or [DONE]" in (calls[1].error or "")


def test_a_call_with_no_arguments_yet_is_not_taken_for_a_call_without_arguments() -> None:
    """The opening chunk always has `arguments: ""`: at the end of an unterminated stream
    that is a call cut before its arguments, not a tool that takes none."""
    calls = accumulate([chunk(fragment(0, "", "call_a", "delete_all"))], "openai_chat")
    assert [(c.status, c.error_type, c.raw_arguments) for c in calls] == [
        (CallStatus.INCOMPLETE, ABORTED, "")
    ]


def test_a_whole_call_sent_as_an_object_is_complete_at_the_end() -> None:
    whole = {"index": 0, "id": "call_a", "function": {"name": "ls", "arguments": {"dir": "."}}}
    calls = accumulate(
        [{"choices": [{"index": 0, "delta": {"tool_calls": [whole]}}]}], "openai_chat"
    )
    assert summary(calls) == [("call_a", "ls", CallStatus.COMPLETE, {"dir": "."})]


def test_only_unfinished_choices_are_ended_by_the_end_of_the_events() -> None:
    events = [
        chunk(fragment(0, '{"a": 1}', "call_a", "f"), choice=0),
        chunk(fragment(0, '{"b": ', "call_b", "g"), choice=1),
        chunk(finish="length", choice=0),
    ]
    adapter, buffer = adapter_for("openai_chat"), ToolBuffer(progress_interval=None)
    for event in events:
        buffer.feed_all(adapter.feed(event))
    buffer.feed_all(adapter.end())
    calls = buffer.close()
    assert [(c.turn, c.status, c.error_type) for c in calls] == [
        (0, CallStatus.INCOMPLETE, "truncated"),
        (1, CallStatus.INCOMPLETE, ABORTED),
    ]
    assert buffer.finish_reasons == {0: "length"}


def test_done_after_the_events_adds_nothing_at_the_end() -> None:
    events = [chunk(fragment(0, '{"b": ', "call_b", "g")), "data: [DONE]"]
    (call,) = accumulate(events, "openai_chat")
    assert (call.status, call.error_type) == (CallStatus.INVALID, None)


# --- the rule per provider: a call whose arguments are whole, then the events end ---

_RESPONSES_ITEM = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f"}
_BEDROCK_START = {"toolUse": {"toolUseId": "tooluse_1", "name": "f"}}
UNTERMINATED: dict[str, tuple[list[Event], CallStatus]] = {
    # [DONE] is invisible through the SDK: the end of the events is the end.
    "openai_chat": (
        [{"choices": [{"index": 0, "delta": {"tool_calls": [fragment(0, "{}", "call_1", "f")]}}]}],
        CallStatus.COMPLETE,
    ),
    # The SDKs yield these terminal events like any other: their absence means a cut.
    "openai_responses": (
        [
            {"type": "response.output_item.added", "output_index": 0, "item": _RESPONSES_ITEM},
            {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": "{}"},
        ],
        CallStatus.INCOMPLETE,
    ),
    "anthropic": (
        [
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": "{}"},
            },
        ],
        CallStatus.INCOMPLETE,
    ),
    "cohere": (
        [
            {
                "type": "tool-call-start",
                "index": 0,
                "delta": {
                    "message": {
                        "tool_calls": {"id": "c_1", "function": {"name": "f", "arguments": "{}"}}
                    }
                },
            }
        ],
        CallStatus.INCOMPLETE,
    ),
    "bedrock": (
        [
            {"contentBlockStart": {"start": _BEDROCK_START, "contentBlockIndex": 0}},
            {"contentBlockDelta": {"delta": {"toolUse": {"input": "{}"}}, "contentBlockIndex": 0}},
        ],
        CallStatus.INCOMPLETE,
    ),
    # Whole calls, and a known Vertex habit of sending no terminal chunk: complete.
    "gemini": (
        [{"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", "args": {}}}]}}]}],
        CallStatus.COMPLETE,
    ),
    "ollama": (
        [
            {
                "message": {"tool_calls": [{"function": {"name": "f", "arguments": {}}}]},
                "done": False,
            }
        ],
        CallStatus.COMPLETE,
    ),
}


@pytest.mark.parametrize("provider", sorted(UNTERMINATED))
def test_the_end_of_the_events_per_provider(provider: str) -> None:
    events, status = UNTERMINATED[provider]
    calls = accumulate(events, provider)
    asynchronous = asyncio.run(accumulate_async(_aiter(events), provider))
    by_loop, reported = by_hand(events, provider)
    for result in (calls, asynchronous, by_loop, reported):
        assert [call.status for call in result] == [status]
        assert result[0].error_type == (ABORTED if status is CallStatus.INCOMPLETE else None)
