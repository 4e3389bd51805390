"""Arguments and events nested past the depth bound (`toolref.streaming.depth`): deep text
makes the call invalid with its text kept, a deep object or patch is a refused chunk, a deep
event text is not JSON a stream carries; never RecursionError, whatever the caller's
stack."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolref.acp import ToolCallTracker
from toolref.streaming import (
    ArgPatch,
    CallStatus,
    ToolBuffer,
    ToolChunk,
    accumulate,
    adapter_for,
)
from toolref.streaming.depth import EVENT_DEPTH, MAX_DEPTH, text_too_deep, value_too_deep
from toolref.wire.errors import ChunkSequenceError


def _text(levels: int) -> str:
    """An object `levels` deep: `{"a":[[...]]}` (the object is level 1)."""
    return '{"a":' + "[" * (levels - 1) + "]" * (levels - 1) + "}"


def _object(levels: int) -> dict[str, Any]:
    top: dict[str, Any] = {}
    inner = top
    for _ in range(levels - 1):
        inner["a"] = {}
        inner = inner["a"]
    return top


def _finished(text: str) -> Any:
    buffer = ToolBuffer(progress_interval=None)
    buffer.feed(ToolChunk(index=0, id="c", name="f", args_delta=text))
    buffer.feed(ToolChunk(index=0, done=True))
    [call] = buffer.close()
    return call


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 990, 5_000, 100_000])
def test_argument_text_nested_past_the_bound_is_an_invalid_call_with_its_text(
    levels: int,
) -> None:
    """Before: `json.loads` of the arguments raised RecursionError out of `feed` at about
    1,000 levels (and read 990 levels, which later `copy.deepcopy` or `json.dumps` of the
    arguments could not). Now the bound is counted: the call is `invalid`, its text kept,
    the error naming the bound, like any other text that is not a JSON object."""
    text = _text(levels)
    call = _finished(text)
    assert call.status is CallStatus.INVALID
    assert call.raw_arguments == text
    assert call.arguments is None
    assert "nested past 256 levels" in (call.error or "")


def test_argument_text_at_the_bound_is_read() -> None:
    call = _finished(_text(MAX_DEPTH))
    assert call.status is CallStatus.COMPLETE
    compact = json.dumps(call.arguments, separators=(",", ":"))
    assert compact == _text(MAX_DEPTH)


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"code": "[" * 5_000 + "{" * 5_000})
    call = _finished(text)
    assert call.status is CallStatus.COMPLETE
    assert not text_too_deep(text, 2)
    assert text_too_deep('{"a":"\\"[","b":[[]]}', 2)  # an escaped quote ends no string


def test_a_deep_object_snapshot_or_patch_is_a_refused_chunk() -> None:
    """Before: an object snapshot 3,000 deep raised RecursionError measuring it, and a patch
    with a 3,000-part path built the object and raised it when the call closed. Now either
    is a `ChunkSequenceError` naming `max_depth`, not applied; at the bound, taken."""
    buffer = ToolBuffer(progress_interval=0)
    buffer.feed(ToolChunk(index=0, id="c", name="f"))
    deep_path = ArgPatch(tuple(["a"] * (MAX_DEPTH + 1)), 1)  # a leaf below 257 objects
    deep_value = ArgPatch(("a",), _object(MAX_DEPTH))
    for chunk in (
        ToolChunk(index=0, args_snapshot=_object(3_000)),
        ToolChunk(index=0, args_snapshot=_object(MAX_DEPTH + 1)),
        ToolChunk(index=0, args_patch=(ArgPatch(tuple(["a"] * 3_000), 1),)),
        ToolChunk(index=0, args_patch=(deep_path,)),
        ToolChunk(index=0, args_patch=(deep_value,)),
    ):
        with pytest.raises(ChunkSequenceError, match="max_depth=256") as caught:
            buffer.feed(chunk)
        assert caught.value.extra == {"limit": "max_depth", "maximum": MAX_DEPTH}
    buffer.feed(ToolChunk(index=0, args_patch=(ArgPatch(tuple(["a"] * MAX_DEPTH), 1),)))
    [call] = buffer.close()
    assert call.status is CallStatus.COMPLETE
    assert not value_too_deep(call.arguments, MAX_DEPTH)
    assert value_too_deep(call.arguments, MAX_DEPTH - 1)


def test_a_deep_event_text_is_not_json_a_stream_carries() -> None:
    """Before: an SSE payload nested 5,000 deep raised RecursionError from the adapter."""
    payload = '{"choices":' + "[" * 5_000 + "]" * 5_000 + "}"
    with pytest.raises(ChunkSequenceError, match=f"not JSON.*{EVENT_DEPTH} levels"):
        adapter_for("openai_chat").feed(payload)


def test_deep_arguments_in_a_chat_stream_make_an_invalid_call_acp_announces() -> None:
    """Before: the OpenAI Chat adapter read whether the text so far was an object with
    `json.loads`, and the buffer parsed it: RecursionError out of `accumulate`. Now the
    call is invalid, and the ACP tracker announces it `failed` with the text as rawInput."""
    deep = _text(5_000)
    head = {"index": 0, "id": "c", "type": "function", "function": {"name": "f"}}
    rest = {"index": 0, "function": {"arguments": deep}}
    events: list[Any] = [
        {"choices": [{"index": 0, "delta": {"tool_calls": [head]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [rest]}}]},
    ]
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    [call] = accumulate(events, "openai_chat")
    assert call.status is CallStatus.INVALID
    assert call.raw_arguments == deep
    sent: list[dict[str, Any]] = []
    ToolCallTracker("s", sink=sent.append).start_call(call)
    assert sent[0]["update"]["status"] == "failed"
    assert sent[0]["update"]["rawInput"] == {"INVALID_JSON": deep}


def test_a_deep_arguments_object_given_to_the_chat_adapter_is_refused() -> None:
    """Before: an event given as a dict (the caller's own decoder) with arguments 3,000
    deep raised RecursionError writing them out; now a `ChunkSequenceError`."""
    head = {"index": 0, "id": "c", "function": {"name": "f", "arguments": _object(3_000)}}
    event = {"choices": [{"index": 0, "delta": {"tool_calls": [head]}}]}
    with pytest.raises(ChunkSequenceError, match=f"nested past {EVENT_DEPTH} levels"):
        adapter_for("openai_chat").feed(event)
