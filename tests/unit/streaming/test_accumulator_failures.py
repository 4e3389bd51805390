"""Failures of existing accumulators (notes/streaming.md §0 and §7) that the quirk and
fixture tests did not already pin down, each checked against the adapters and the buffer."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.streams import replay
from toolref.streaming import ArgumentsProgress, CallStatus, ToolBuffer, accumulate, adapter_for
from toolref.wire.errors import ChunkSequenceError


def chunk(*calls: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    delta = {"tool_calls": list(calls)} if calls else {}
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


@pytest.mark.parametrize(
    "name", ["anthropic_invalid_json.sse", "anthropic_fine_grained_max_tokens.sse"]
)
def test_live_progress_never_raises_on_text_that_will_not_parse(name: str) -> None:
    """§0.6, §7.2: the anthropic SDK raises ValueError out of the stream iterator when the
    buffered JSON is invalid, ending the stream. Progress values here are best effort (None
    when unreadable) and the call still ends invalid or incomplete, on recorded streams."""
    adapter, buffer = adapter_for("anthropic"), ToolBuffer(progress_interval=0)
    values = []
    for data in replay.payloads(replay.RECORDED / name):
        for happened in buffer.feed_all(adapter.feed(data)):
            if isinstance(happened, ArgumentsProgress):
                values.append(happened.value)
    buffer.feed_all(adapter.end())
    [call] = buffer.close()
    assert call.status in {CallStatus.INVALID, CallStatus.INCOMPLETE}
    assert len(values) >= 3
    assert values[-1] is None or isinstance(values[-1], dict)


def test_fine_grained_progress_shows_the_cut_string_so_far() -> None:
    adapter, buffer = adapter_for("anthropic"), ToolBuffer(progress_interval=0)
    last: dict[str, Any] | None = None
    path = replay.RECORDED / "anthropic_fine_grained_max_tokens.sse"
    for data in replay.payloads(path):
        for happened in buffer.feed_all(adapter.feed(data)):
            if isinstance(happened, ArgumentsProgress):
                last = happened.value
    assert last is not None
    assert last["filename"] == "taxes.txt"
    assert last["lines_of_text"][-1] == "Filing taxes"


def test_id_and_name_may_come_after_the_first_fragment() -> None:
    """§7.5: the Vercel AI SDK throws when the first delta of an index lacks id or name;
    here the call takes them when they come."""
    events = [
        chunk({"index": 0, "function": {"arguments": '{"q": '}}),
        chunk({"index": 0, "id": "call_1", "type": "function", "function": {"name": "search"}}),
        chunk({"index": 0, "function": {"arguments": '"x"}'}}),
        chunk(finish="tool_calls"),
    ]
    [call] = accumulate(events, "openai_chat")
    assert (call.id, call.name, call.status, call.arguments) == (
        "call_1",
        "search",
        CallStatus.COMPLETE,
        {"q": "x"},
    )


def test_a_name_streamed_in_fragments_is_joined() -> None:
    """A compatible server that splits the name ("read_" then "note") across fragments."""
    events = [
        chunk({"index": 0, "id": "call-1", "function": {"name": "read_", "arguments": ""}}),
        chunk({"index": 0, "function": {"name": "note", "arguments": '{"path":"note.md"}'}}),
        chunk(finish="tool_calls"),
        "data: [DONE]",
    ]
    [call] = accumulate(events, "openai_chat")
    assert (call.name, call.arguments) == ("read_note", {"path": "note.md"})


def test_a_parallel_call_whose_id_and_name_were_dropped_is_never_run() -> None:
    """§7.3: LiteLLM's re-chunker dropped id and name of later parallel calls (#39796), and
    its builder then dropped such calls silently. Here the call stays, named by its place,
    invalid for want of a name; the first call is untouched."""
    events = [
        chunk({"index": 0, "id": "call_a", "function": {"name": "f", "arguments": '{"a": 1}'}}),
        chunk({"index": 1, "function": {"arguments": '{"b": 2}'}}),
        chunk(finish="tool_calls"),
    ]
    first, second = accumulate(events, "openai_chat")
    assert (first.id, first.status) == ("call_a", CallStatus.COMPLETE)
    assert (second.id, second.status, second.runnable) == (
        "call_toolref_2",
        CallStatus.INVALID,
        False,
    )
    assert second.raw_arguments == '{"b": 2}'
    assert "no tool name" in (second.error or "")


def test_text_after_object_arguments_is_refused_and_says_so() -> None:
    """§7.6: pydantic-ai raises "Cannot apply JSON deltas to non-JSON tool arguments" when a
    call mixes object and text arguments; it is nonsense here too, but the error says what
    was mixed."""
    events = [
        chunk({"index": 0, "id": "call_a", "function": {"name": "f", "arguments": {"a": 1}}}),
        chunk({"index": 0, "function": {"arguments": ', "b": 2'}}),
    ]
    with pytest.raises(ChunkSequenceError, match="argument text and object arguments"):
        accumulate(events, "openai_chat")
