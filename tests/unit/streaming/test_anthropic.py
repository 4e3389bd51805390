"""Anthropic blocks that `message_start` carries whole (gateways replaying a finished
message), alone or streamed again, and the events that do or do not end the last block."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from anthropic.types import RawMessageStartEvent

from toolref.streaming import CallStatus, ToolBuffer, ToolCall, adapter_for

Event = dict[str, Any]


def run(events: Iterable[Any]) -> tuple[list[ToolCall], ToolBuffer]:
    adapter = adapter_for("anthropic")
    buffer = ToolBuffer(progress_interval=None)
    for event in events:
        buffer.feed_all(adapter.feed(event))
    buffer.feed_all(adapter.end())
    return buffer.close(), buffer


def summary(calls: list[ToolCall]) -> list[tuple[str, str, CallStatus, dict[str, Any] | None]]:
    return [(call.id, call.name, call.status, call.arguments) for call in calls]


def tool(block_id: str, name: str, tool_input: Event, kind: str = "tool_use") -> Event:
    return {"type": kind, "id": block_id, "name": name, "input": tool_input}


def message_start(*content: Event, stop_reason: str | None = None) -> Event:
    return {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": list(content),
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1},
        },
    }


def streamed(position: int, block: Event, *fragments: str) -> list[Event]:
    """A block streamed the usual way: its start (input placeholder), deltas, stop."""
    start = {"type": "content_block_start", "index": position, "content_block": block}
    deltas = [
        {
            "type": "content_block_delta",
            "index": position,
            "delta": {"type": "input_json_delta", "partial_json": fragment},
        }
        for fragment in fragments
    ]
    return [start, *deltas, {"type": "content_block_stop", "index": position}]


def end(stop_reason: str) -> list[Event]:
    delta = {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None}}
    return [delta, {"type": "message_stop"}]


TEXT = {"type": "text", "text": "Looking."}
READ = tool("toolu_1", "read", {"path": "a.py"})
GREP = tool("toolu_2", "grep", {"pattern": "x"})


def test_whole_blocks_in_message_start_are_calls() -> None:
    search = tool("srvtoolu_1", "web_search", {"query": "q"}, kind="server_tool_use")
    calls, buffer = run([message_start(TEXT, READ, search, GREP), {"type": "message_stop"}])
    assert summary(calls) == [
        ("toolu_1", "read", CallStatus.COMPLETE, {"path": "a.py"}),
        ("srvtoolu_1", "web_search", CallStatus.COMPLETE, {"query": "q"}),
        ("toolu_2", "grep", CallStatus.COMPLETE, {"pattern": "x"}),
    ]
    assert [call.meta["block_index"] for call in calls] == [1, 2, 3]
    assert [call.provider_executed for call in calls] == [False, True, False]
    assert all(call.parent_id == "msg_1" for call in calls)
    assert buffer.has_tool_calls is True


def test_a_whole_block_without_input_is_a_call_without_arguments() -> None:
    block = {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}}
    calls, _ = run([message_start(block), *end("tool_use")])
    assert summary(calls) == [("toolu_1", "now", CallStatus.COMPLETE, {})]


def test_message_start_stop_reason_is_the_finish_reason_when_no_delta_follows() -> None:
    calls, buffer = run([message_start(READ, stop_reason="tool_use"), {"type": "message_stop"}])
    assert [call.status for call in calls] == [CallStatus.COMPLETE]
    assert buffer.finish_reasons == {0: "tool_use"}


def test_whole_blocks_streamed_again_are_one_call_each() -> None:
    events = [
        message_start(TEXT, READ, GREP),
        *streamed(0, {"type": "text", "text": ""}),
        *streamed(1, tool("toolu_1", "read", {}), '{"path": ', '"a.py"}'),
        *streamed(2, tool("toolu_2", "grep", {}), '{"pattern": "x"}'),
        *end("tool_use"),
    ]
    calls, _ = run(events)
    assert summary(calls) == [
        ("toolu_1", "read", CallStatus.COMPLETE, {"path": "a.py"}),
        ("toolu_2", "grep", CallStatus.COMPLETE, {"pattern": "x"}),
    ]


def test_the_streamed_arguments_win_over_the_whole_input() -> None:
    events = [
        message_start(READ),
        *streamed(0, tool("toolu_1", "read", {}), '{"path": "b.py"}'),
        *end("tool_use"),
    ]
    calls, _ = run(events)
    assert summary(calls) == [("toolu_1", "read", CallStatus.COMPLETE, {"path": "b.py"})]


def test_a_block_streamed_again_without_deltas_keeps_the_whole_input() -> None:
    calls, _ = run([message_start(READ), *streamed(0, tool("toolu_1", "read", {})), *end("x")])
    assert summary(calls) == [("toolu_1", "read", CallStatus.COMPLETE, {"path": "a.py"})]


def test_a_whole_block_streamed_again_at_another_position_is_found_by_id() -> None:
    events = [
        message_start(READ),
        *streamed(3, tool("toolu_1", "read", {}), '{"path": "a.py"}'),
        *end("tool_use"),
    ]
    calls, _ = run(events)
    assert summary(calls) == [("toolu_1", "read", CallStatus.COMPLETE, {"path": "a.py"})]


def test_blocks_streamed_after_the_whole_ones_are_more_calls() -> None:
    events = [
        message_start(TEXT, READ),
        *streamed(2, tool("toolu_2", "grep", {}), '{"pattern": "x"}'),
        *end("tool_use"),
    ]
    calls, _ = run(events)
    assert summary(calls) == [
        ("toolu_1", "read", CallStatus.COMPLETE, {"path": "a.py"}),
        ("toolu_2", "grep", CallStatus.COMPLETE, {"pattern": "x"}),
    ]


def test_another_block_at_a_whole_blocks_position_is_another_call() -> None:
    events = [
        message_start(READ),
        *streamed(0, tool("toolu_9", "grep", {}), '{"pattern": "x"}'),
        *end("tool_use"),
    ]
    calls, _ = run(events)
    assert summary(calls) == [
        ("toolu_1", "read", CallStatus.COMPLETE, {"path": "a.py"}),
        ("toolu_9", "grep", CallStatus.COMPLETE, {"pattern": "x"}),
    ]


def test_a_repeated_message_start_adds_no_call() -> None:
    calls, _ = run([message_start(READ), message_start(READ), *end("tool_use")])
    assert summary(calls) == [("toolu_1", "read", CallStatus.COMPLETE, {"path": "a.py"})]


@pytest.mark.parametrize("stop_reason", ["max_tokens", "model_context_window_exceeded"])
def test_a_truncating_stop_cuts_the_whole_block_that_ended_the_content(stop_reason: str) -> None:
    calls, buffer = run([message_start(READ, GREP), *end(stop_reason)])
    assert [(call.id, call.status, call.error_type) for call in calls] == [
        ("toolu_1", CallStatus.COMPLETE, None),
        ("toolu_2", CallStatus.INCOMPLETE, "truncated"),
    ]
    assert buffer.finish_reasons == {0: stop_reason}


def test_a_truncating_stop_after_streamed_blocks_spares_the_whole_ones() -> None:
    events = [
        message_start(READ),
        *streamed(1, tool("toolu_2", "grep", {}), '{"pattern": "x"}'),
        *end("max_tokens"),
    ]
    calls, _ = run(events)
    assert [(call.id, call.status) for call in calls] == [
        ("toolu_1", CallStatus.COMPLETE),
        ("toolu_2", CallStatus.INCOMPLETE),
    ]


def test_a_truncating_stop_after_a_text_block_spares_the_whole_blocks() -> None:
    calls, _ = run([message_start(READ, TEXT), *end("max_tokens")])
    assert [call.status for call in calls] == [CallStatus.COMPLETE]


def test_whole_blocks_survive_a_stream_that_ends_without_message_stop() -> None:
    events = [
        message_start(READ),
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": tool("toolu_2", "grep", {}),
        },
    ]
    calls, _ = run(events)
    assert [(call.id, call.status, call.error_type) for call in calls] == [
        ("toolu_1", CallStatus.COMPLETE, None),
        ("toolu_2", CallStatus.INCOMPLETE, "aborted"),
    ]


def test_whole_blocks_survive_an_error_event() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    calls, buffer = run([message_start(READ), error])
    assert [call.status for call in calls] == [CallStatus.COMPLETE]
    assert buffer.errors[0][0] == "aborted"


@pytest.mark.parametrize(
    "between",
    [{"type": "ping"}, {"type": "content_block_citation"}, {"type": "future_event", "x": 1}],
    ids=["ping", "unknown-type", "unknown-with-fields"],
)
def test_events_of_other_kinds_do_not_close_the_last_block_before_max_tokens(
    between: Event,
) -> None:
    """Only a later block or the message's end decides whether the last closed block was
    cut: a ping or an event type added later must not release it as complete."""
    events = [
        message_start(),
        *streamed(0, tool("toolu_1", "write", {}), '{"text": "ab"}'),
        between,
        *end("max_tokens"),
    ]
    calls, _ = run(events)
    assert [(call.status, call.error_type) for call in calls] == [
        (CallStatus.INCOMPLETE, "truncated")
    ]


def test_whole_blocks_from_the_sdk_event_model() -> None:
    event = RawMessageStartEvent.model_validate(message_start(TEXT, READ))
    calls, _ = run([event, *end("tool_use")])
    assert summary(calls) == [("toolu_1", "read", CallStatus.COMPLETE, {"path": "a.py"})]
