"""Adapter behaviour the stream fixtures do not cover: routing keys, close signals, finish
and stop reasons, provider errors, and the event coercion every adapter shares."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pytest
from anthropic.types import RawContentBlockDeltaEvent, RawContentBlockStartEvent
from openai.types.responses import (
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseOutputItemAddedEvent,
)

from toolref.streaming import ADAPTERS, CallStatus, ToolBuffer, ToolCall, adapter_for
from toolref.streaming.adapters.base import as_event
from toolref.streaming.adapters.gemini import json_path
from toolref.wire.errors import ChunkSequenceError, ConfigurationError

Event = dict[str, Any]


def run(provider: str, events: Iterable[Any]) -> tuple[list[ToolCall], ToolBuffer]:
    """Feed `events` through a fresh adapter and buffer; the closed calls and the buffer."""
    adapter = adapter_for(provider)
    buffer = ToolBuffer(progress_interval=None)
    for event in events:
        buffer.feed_all(adapter.feed(event))
    buffer.feed_all(adapter.end())
    return buffer.close(), buffer


def summary(calls: list[ToolCall]) -> list[tuple[str, str, CallStatus, dict[str, Any] | None]]:
    return [(call.id, call.name, call.status, call.arguments) for call in calls]


# --- OpenAI Responses ---


def fc_item(
    item_id: str | None,
    call_id: str,
    name: str,
    arguments: str = "",
    status: str = "in_progress",
) -> Event:
    item: Event = {
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }
    if item_id is not None:
        item["id"] = item_id
    return item


def added(output_index: int, item: Event) -> Event:
    return {"type": "response.output_item.added", "output_index": output_index, "item": item}


def item_done(output_index: int, item: Event) -> Event:
    return {"type": "response.output_item.done", "output_index": output_index, "item": item}


def args_delta(output_index: int, item_id: str, delta: str, kind: str = "function_call") -> Event:
    prefix = {
        "function_call": "response.function_call_arguments",
        "custom_tool_call": "response.custom_tool_call_input",
        "mcp_call": "response.mcp_call_arguments",
    }[kind]
    return {
        "type": f"{prefix}.delta",
        "output_index": output_index,
        "item_id": item_id,
        "delta": delta,
    }


def args_done(output_index: int, item_id: str, arguments: str) -> Event:
    return {
        "type": "response.function_call_arguments.done",
        "output_index": output_index,
        "item_id": item_id,
        "arguments": arguments,
    }


def completed(output: list[Event] | None = None, status: str = "completed") -> Event:
    response: Event = {"id": "resp_1", "object": "response", "status": status}
    if output is not None:
        response["output"] = output
    return {"type": "response.completed", "response": response}


def test_responses_call_id_is_the_call_id_and_item_id_goes_to_meta() -> None:
    events = [
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
        added(0, fc_item("fc_1", "call_1", "get_weather")),
        args_delta(0, "fc_1", '{"city": "Paris"}'),
        item_done(0, fc_item("fc_1", "call_1", "get_weather", '{"city": "Paris"}', "completed")),
        completed(),
    ]
    calls, buffer = run("openai_responses", events)
    assert summary(calls) == [("call_1", "get_weather", CallStatus.COMPLETE, {"city": "Paris"})]
    assert calls[0].meta["item_id"] == "fc_1"
    assert calls[0].meta["status"] == "completed"
    assert calls[0].kind == "function_call"
    assert calls[0].parent_id == "resp_1"
    assert buffer.finish_reasons == {0: "completed"}


def test_responses_done_item_is_authoritative_for_the_call_id() -> None:
    """The official docs example shows call_id changing between added and done: the done
    item wins."""
    events = [
        added(0, fc_item("fc_1", "call_1234xyz", "get_weather")),
        args_delta(0, "fc_1", '{"location":"Paris, France"}'),
        item_done(
            0, fc_item("fc_1", "call_2345abc", "get_weather", '{"location":"Paris, France"}')
        ),
        completed(),
    ]
    calls, _ = run("openai_responses", events)
    assert [call.id for call in calls] == ["call_2345abc"]


def test_responses_route_deltas_by_output_index_not_item_id() -> None:
    """Interleaved deltas of two calls, each with a fresh item_id (Copilot rotates them)."""
    events = [
        added(1, fc_item("fc_a", "call_a", "tool_a")),
        added(2, fc_item("fc_b", "call_b", "tool_b")),
        args_delta(2, "rotated-1", '{"b":'),
        args_delta(1, "rotated-2", '{"a":'),
        args_delta(1, "rotated-3", "1}"),
        args_delta(2, "rotated-4", "2}"),
        completed(),
    ]
    calls, _ = run("openai_responses", events)
    assert summary(calls) == [
        ("call_a", "tool_a", CallStatus.COMPLETE, {"a": 1}),
        ("call_b", "tool_b", CallStatus.COMPLETE, {"b": 2}),
    ]
    assert [call.meta["output_index"] for call in calls] == [1, 2]
    assert [call.index for call in calls] == [0, 1]


def test_responses_item_without_id_is_identified_by_call_id() -> None:
    events = [
        added(0, fc_item(None, "call_1", "f")),
        args_delta(0, "", "{}"),
        item_done(0, fc_item(None, "call_1", "f", "{}", "completed")),
        completed(),
    ]
    calls, _ = run("openai_responses", events)
    assert summary(calls) == [("call_1", "f", CallStatus.COMPLETE, {})]
    assert "item_id" not in calls[0].meta


def test_responses_deltas_without_an_added_item_still_open_a_call() -> None:
    events = [
        args_delta(0, "fc_1", '{"x": 1}'),
        item_done(0, fc_item("fc_1", "call_1", "f", '{"x": 1}', "completed")),
        completed(),
    ]
    calls, _ = run("openai_responses", events)
    assert summary(calls) == [("call_1", "f", CallStatus.COMPLETE, {"x": 1})]


def test_responses_mcp_call_is_provider_executed() -> None:
    item: Event = {
        "type": "mcp_call",
        "id": "mcp_1",
        "name": "search_repo",
        "server_label": "github",
        "arguments": "",
    }
    final = {**item, "arguments": '{"q": "toolref"}', "status": "completed"}
    events = [
        added(0, item),
        args_delta(0, "mcp_1", '{"q": ', "mcp_call"),
        args_delta(0, "mcp_1", '"toolref"}', "mcp_call"),
        {
            "type": "response.mcp_call_arguments.done",
            "output_index": 0,
            "item_id": "mcp_1",
            "arguments": '{"q": "toolref"}',
        },
        item_done(0, final),
        completed(),
    ]
    calls, buffer = run("openai_responses", events)
    assert summary(calls) == [("mcp_1", "search_repo", CallStatus.COMPLETE, {"q": "toolref"})]
    (call,) = calls
    assert call.kind == "mcp_call"
    assert call.provider_executed is True
    assert call.runnable is False
    assert call.meta["server_label"] == "github"
    assert buffer.has_tool_calls is False


def test_responses_custom_tool_call_input_is_freeform_text() -> None:
    code = "print('hi')"
    item: Event = {
        "type": "custom_tool_call",
        "id": "ctc_1",
        "call_id": "call_c",
        "name": "run_python",
        "input": "",
    }
    events = [
        added(0, item),
        args_delta(0, "ctc_1", "print(", "custom_tool_call"),
        args_delta(0, "ctc_1", "'hi')", "custom_tool_call"),
        {
            "type": "response.custom_tool_call_input.done",
            "output_index": 0,
            "item_id": "ctc_1",
            "input": code,
        },
        item_done(0, {**item, "input": code, "status": "completed"}),
        completed(),
    ]
    calls, buffer = run("openai_responses", events)
    (call,) = calls
    assert call.kind == "custom_tool_call"
    assert call.status is CallStatus.COMPLETE
    assert call.arguments == {"input": code}
    assert call.raw_arguments == code
    assert buffer.has_tool_calls is True


def test_responses_failed_makes_open_calls_incomplete() -> None:
    events = [
        added(0, fc_item("fc_1", "call_1", "f")),
        args_delta(0, "fc_1", '{"x": 1}'),
        item_done(0, fc_item("fc_1", "call_1", "f", '{"x": 1}', "completed")),
        added(1, fc_item("fc_2", "call_2", "g")),
        args_delta(1, "fc_2", '{"y": '),
        {
            "type": "response.failed",
            "response": {
                "id": "resp_1",
                "status": "failed",
                "error": {"code": "server_error", "message": "The model crashed"},
            },
        },
    ]
    calls, buffer = run("openai_responses", events)
    assert [call.status for call in calls] == [CallStatus.COMPLETE, CallStatus.INCOMPLETE]
    assert calls[1].error_type == "aborted"
    assert calls[1].raw_arguments == '{"y": '
    assert "server_error" in (calls[1].error or "")
    assert "The model crashed" in (calls[1].error or "")
    assert buffer.finish_reasons == {0: "failed"}


def test_responses_error_event_makes_open_calls_incomplete() -> None:
    events = [
        added(0, fc_item("fc_1", "call_1", "f")),
        args_delta(0, "fc_1", '{"y": '),
        {
            "type": "error",
            "code": "rate_limit_exceeded",
            "message": "Slow down",
            "param": None,
            "sequence_number": 3,
        },
    ]
    calls, buffer = run("openai_responses", events)
    (call,) = calls
    assert call.status is CallStatus.INCOMPLETE
    assert call.error_type == "aborted"
    assert "rate_limit_exceeded: Slow down" in (call.error or "")
    assert buffer.errors[0][0] == "aborted"


def test_responses_stream_without_terminal_event_is_aborted() -> None:
    events = [added(0, fc_item("fc_1", "call_1", "f")), args_delta(0, "fc_1", '{"x": 1}')]
    calls, _ = run("openai_responses", events)
    assert [(call.status, call.error_type) for call in calls] == [
        (CallStatus.INCOMPLETE, "aborted")
    ]


def test_responses_completed_recovers_items_whose_done_never_came() -> None:
    """Ciphertext deltas and no output_item.done: the completed response's output has the
    final item (openai-python 3.54 'Recover finalized items')."""
    final = fc_item("fc_1", "call_1", "read_file", '{"path": "a.txt"}', "completed")
    events = [
        added(0, {"type": "reasoning", "id": "rs_1", "summary": []}),
        item_done(0, {"type": "reasoning", "id": "rs_1", "summary": []}),
        added(1, fc_item("fc_1", "call_1", "read_file")),
        args_delta(1, "fc_1", "gAAAAABo-ciphertext"),
        completed([{"type": "reasoning", "id": "rs_1", "summary": []}, final]),
    ]
    calls, _ = run("openai_responses", events)
    assert summary(calls) == [("call_1", "read_file", CallStatus.COMPLETE, {"path": "a.txt"})]
    assert calls[0].meta["status"] == "completed"


def test_responses_completed_without_output_closes_with_the_done_arguments() -> None:
    events = [
        added(0, fc_item("fc_1", "call_1", "f")),
        args_delta(0, "fc_1", "ciphertext"),
        args_done(0, "fc_1", '{"x": 1}'),
        completed(),
    ]
    calls, _ = run("openai_responses", events)
    assert summary(calls) == [("call_1", "f", CallStatus.COMPLETE, {"x": 1})]


def test_responses_incomplete_reason_is_in_the_error() -> None:
    events = [
        added(0, fc_item("fc_1", "call_1", "f")),
        args_delta(0, "fc_1", '{"x": '),
        {
            "type": "response.incomplete",
            "response": {
                "id": "resp_1",
                "status": "incomplete",
                "incomplete_details": {"reason": "content_filter"},
            },
        },
    ]
    calls, buffer = run("openai_responses", events)
    assert calls[0].status is CallStatus.INCOMPLETE
    assert "content_filter" in (calls[0].error or "")
    assert buffer.finish_reasons == {0: "incomplete"}


def test_responses_sdk_model_objects_are_accepted() -> None:
    added_event = ResponseOutputItemAddedEvent.model_validate(
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "sequence_number": 1,
            "item": fc_item("fc_1", "call_1", "f"),
        }
    )
    delta = ResponseFunctionCallArgumentsDeltaEvent.model_validate(
        {
            "type": "response.function_call_arguments.delta",
            "output_index": 0,
            "item_id": "fc_1",
            "delta": '{"x": 1}',
            "sequence_number": 2,
        }
    )
    calls, _ = run("openai_responses", [added_event, delta, completed()])
    assert summary(calls) == [("call_1", "f", CallStatus.COMPLETE, {"x": 1})]


# --- Anthropic ---


def a_start(index: int, block: Event) -> Event:
    return {"type": "content_block_start", "index": index, "content_block": block}


def a_tool(index: int, block_id: str, name: str, **extra: Any) -> Event:
    return a_start(index, {"type": "tool_use", "id": block_id, "name": name, "input": {}, **extra})


def a_delta(index: int, delta: Event) -> Event:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def a_json(index: int, text: str) -> Event:
    return a_delta(index, {"type": "input_json_delta", "partial_json": text})


def a_stop(index: int) -> Event:
    return {"type": "content_block_stop", "index": index}


def a_message_start(message_id: str = "msg_1") -> Event:
    return {
        "type": "message_start",
        "message": {"id": message_id, "type": "message", "role": "assistant", "content": []},
    }


def a_end(stop_reason: str) -> list[Event]:
    return [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": 10},
        },
        {"type": "message_stop"},
    ]


def test_anthropic_ignores_ping_text_and_thinking_blocks() -> None:
    events = [
        a_message_start("msg_abc"),
        {"type": "ping"},
        a_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        a_delta(0, {"type": "thinking_delta", "thinking": "The user wants weather."}),
        a_delta(0, {"type": "signature_delta", "signature": "EqQBCgIYAhIM"}),
        a_stop(0),
        a_start(1, {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}),
        a_stop(1),
        a_start(2, {"type": "text", "text": ""}),
        {"type": "ping"},
        a_delta(2, {"type": "text_delta", "text": "Okay, checking."}),
        a_stop(2),
        a_tool(3, "toolu_1", "get_weather"),
        {"type": "ping"},
        a_json(3, '{"location": "Paris"}'),
        a_stop(3),
        *a_end("tool_use"),
    ]
    calls, buffer = run("anthropic", events)
    assert summary(calls) == [
        ("toolu_1", "get_weather", CallStatus.COMPLETE, {"location": "Paris"})
    ]
    assert calls[0].index == 0
    assert calls[0].meta["block_index"] == 3
    assert calls[0].parent_id == "msg_abc"
    assert buffer.finish_reasons == {0: "tool_use"}


def test_anthropic_keeps_caller_and_toolset_meta() -> None:
    events = [
        a_message_start(),
        a_tool(
            0,
            "toolu_1",
            "read",
            caller={"type": "code_execution_20250825", "tool_id": "srvtoolu_9"},
            toolset_name="files",
        ),
        a_json(0, "{}"),
        a_stop(0),
        *a_end("tool_use"),
    ]
    calls, _ = run("anthropic", events)
    assert calls[0].meta["caller"] == {"type": "code_execution_20250825", "tool_id": "srvtoolu_9"}
    assert calls[0].meta["toolset_name"] == "files"


def test_anthropic_mcp_tool_use_is_provider_executed_with_server_name() -> None:
    events = [
        a_message_start(),
        a_start(
            0,
            {
                "type": "mcp_tool_use",
                "id": "mcptoolu_1",
                "name": "echo",
                "server_name": "example",
                "input": {},
            },
        ),
        a_json(0, '{"text": "hi"}'),
        a_stop(0),
        *a_end("end_turn"),
    ]
    calls, buffer = run("anthropic", events)
    (call,) = calls
    assert call.kind == "mcp_tool_use"
    assert call.provider_executed is True
    assert call.meta["server_name"] == "example"
    assert buffer.has_tool_calls is False


def test_anthropic_sdk_model_objects_are_accepted() -> None:
    start = RawContentBlockStartEvent.model_validate(
        a_tool(0, "toolu_1", "f", caller={"type": "direct"})
    )
    delta = RawContentBlockDeltaEvent.model_validate(a_json(0, '{"x": 1}'))
    calls, _ = run("anthropic", [a_message_start(), start, delta, a_stop(0), *a_end("tool_use")])
    assert summary(calls) == [("toolu_1", "f", CallStatus.COMPLETE, {"x": 1})]
    assert calls[0].meta["caller"] == {"type": "direct"}


@pytest.mark.parametrize(
    ("stop_reason", "error_type"),
    [("max_tokens", "truncated"), ("model_context_window_exceeded", "truncated")],
)
def test_anthropic_truncating_stop_reason_cuts_the_last_closed_block(
    stop_reason: str, error_type: str
) -> None:
    events = [
        a_message_start(),
        a_tool(0, "toolu_1", "f"),
        a_json(0, '{"x": 1}'),
        a_stop(0),
        a_tool(1, "toolu_2", "g"),
        a_json(1, '{"y": "abc'),
        a_stop(1),
        *a_end(stop_reason),
    ]
    calls, buffer = run("anthropic", events)
    assert [call.status for call in calls] == [CallStatus.COMPLETE, CallStatus.INCOMPLETE]
    assert calls[1].error_type == error_type
    assert buffer.finish_reasons == {0: stop_reason}


def test_anthropic_refusal_with_an_open_block_is_filtered() -> None:
    events = [
        a_message_start(),
        a_tool(0, "toolu_1", "f"),
        a_json(0, '{"x": '),
        *a_end("refusal"),
    ]
    calls, _ = run("anthropic", events)
    assert [(call.status, call.error_type) for call in calls] == [
        (CallStatus.INCOMPLETE, "filtered")
    ]


@pytest.mark.parametrize(
    ("provider", "events"),
    [
        pytest.param(
            "anthropic",
            [
                a_message_start(),
                a_tool(0, "toolu_1", "f"),
                a_json(0, '{"x": 1}'),
                a_stop(0),
                *a_end("refusal"),
            ],
            id="anthropic-refusal",
        ),
        pytest.param(
            "bedrock",
            [
                {
                    "contentBlockStart": {
                        "start": {"toolUse": {"toolUseId": "tooluse_1", "name": "f"}},
                        "contentBlockIndex": 0,
                    }
                },
                {
                    "contentBlockDelta": {
                        "delta": {"toolUse": {"input": "{}"}},
                        "contentBlockIndex": 0,
                    }
                },
                {"contentBlockStop": {"contentBlockIndex": 0}},
                {"messageStop": {"stopReason": "guardrail_intervened"}},
            ],
            id="bedrock-guardrail",
        ),
    ],
)
def test_filtering_stop_reason_on_the_last_closed_block_is_filtered(
    provider: str, events: list[Event]
) -> None:
    calls, _ = run(provider, events)
    assert [(call.status, call.error_type) for call in calls] == [
        (CallStatus.INCOMPLETE, "filtered")
    ]


def test_anthropic_stream_ending_without_message_stop() -> None:
    """A closed block stays complete; the block still open when the stream ends is
    aborted."""
    events = [
        a_message_start(),
        a_tool(0, "toolu_1", "f"),
        a_json(0, '{"x": 1}'),
        a_stop(0),
        a_tool(1, "toolu_2", "g"),
        a_json(1, '{"y": 2}'),
    ]
    calls, _ = run("anthropic", events)
    assert [(call.status, call.error_type) for call in calls] == [
        (CallStatus.COMPLETE, None),
        (CallStatus.INCOMPLETE, "aborted"),
    ]
    assert calls[1].raw_arguments == '{"y": 2}'


def test_anthropic_stream_ending_right_after_a_block_stop_keeps_the_call() -> None:
    events = [a_message_start(), a_tool(0, "toolu_1", "f"), a_json(0, '{"x": 1}'), a_stop(0)]
    calls, _ = run("anthropic", events)
    assert summary(calls) == [("toolu_1", "f", CallStatus.COMPLETE, {"x": 1})]


def test_anthropic_error_event_details_reach_the_call() -> None:
    events = [
        a_message_start(),
        a_tool(0, "toolu_1", "f"),
        a_json(0, '{"x": '),
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    ]
    calls, buffer = run("anthropic", events)
    assert calls[0].error_type == "aborted"
    assert "overloaded_error: Overloaded" in (calls[0].error or "")
    assert buffer.errors[0][0] == "aborted"


# --- Gemini ---

# Field names of google-genai 3.4.0 models, in `model_dump(mode="json")` order: the SDK dumps
# every field, `None` included, in snake_case.
_RESPONSE_FIELDS = (
    "sdk_http_response",
    "candidates",
    "create_time",
    "model_version",
    "prompt_feedback",
    "response_id",
    "usage_metadata",
    "model_status",
    "automatic_function_calling_history",
    "parsed",
)
_CANDIDATE_FIELDS = (
    "content",
    "citation_metadata",
    "finish_message",
    "token_count",
    "finish_reason",
    "grounding_metadata",
    "avg_logprobs",
    "index",
    "logprobs_result",
    "safety_ratings",
    "url_context_metadata",
    "continuation_token",
)
_PART_FIELDS = (
    "media_resolution",
    "code_execution_result",
    "executable_code",
    "file_data",
    "function_call",
    "function_response",
    "inline_data",
    "text",
    "thought",
    "thought_signature",
    "video_metadata",
    "tool_call",
    "tool_response",
    "part_metadata",
    "audio_transcription",
    "media_processing",
    "speech_metadata",
    "document_metadata",
    "spreadsheet_metadata",
    "audio_metadata",
)
_FUNCTION_CALL_FIELDS = ("id", "args", "name", "partial_args", "will_continue")
_PARTIAL_ARG_FIELDS = (
    "bool_value",
    "json_path",
    "null_value",
    "number_value",
    "string_value",
    "will_continue",
)


def dumped(fields: tuple[str, ...], **values: Any) -> Event:
    assert set(values) <= set(fields), set(values) - set(fields)
    return {name: values.get(name) for name in fields}


def sdk_response(*candidates: Event, response_id: str | None = None) -> Event:
    return dumped(_RESPONSE_FIELDS, candidates=list(candidates), response_id=response_id)


def sdk_candidate(parts: list[Event], **values: Any) -> Event:
    return dumped(_CANDIDATE_FIELDS, content={"parts": parts, "role": "model"}, **values)


def sdk_call_part(signature: str | None = None, **call: Any) -> Event:
    return dumped(
        _PART_FIELDS,
        function_call=dumped(_FUNCTION_CALL_FIELDS, **call),
        thought_signature=signature,
    )


def sdk_partial(**values: Any) -> Event:
    return dumped(_PARTIAL_ARG_FIELDS, **values)


def test_gemini_snake_case_keys_with_candidate_index() -> None:
    """Whole calls and Vertex partial args as google-genai `model_dump(mode="json")` gives
    them (snake_case, every field present)."""
    events = [
        sdk_response(
            sdk_candidate(
                [
                    sdk_call_part("c2lnLTE=", name="get_weather", args={"city": "Paris"}, id="a"),
                    sdk_call_part(name="plan", id="b", will_continue=True),
                ],
                index=0,
            ),
            response_id="resp_snake",
        ),
        sdk_response(
            sdk_candidate(
                [
                    sdk_call_part(
                        partial_args=[
                            sdk_partial(
                                json_path="$.stops[0]", string_value="Ro", will_continue=True
                            )
                        ],
                        will_continue=True,
                    )
                ],
                index=0,
            )
        ),
        sdk_response(
            sdk_candidate(
                [
                    sdk_call_part(
                        partial_args=[
                            sdk_partial(json_path="$.stops[0]", string_value="me"),
                            sdk_partial(json_path="$.days", number_value=3.0),
                            sdk_partial(json_path="$.rail", bool_value=True),
                            sdk_partial(json_path="$.note", null_value="NULL_VALUE"),
                        ],
                        will_continue=True,
                    )
                ],
                index=0,
            )
        ),
        sdk_response(sdk_candidate([sdk_call_part()], index=0, finish_reason="STOP")),
    ]
    calls, buffer = run("gemini", events)
    assert summary(calls) == [
        ("a", "get_weather", CallStatus.COMPLETE, {"city": "Paris"}),
        (
            "b",
            "plan",
            CallStatus.COMPLETE,
            {"stops": ["Rome"], "days": 3.0, "rail": True, "note": None},
        ),
    ]
    assert calls[0].meta["thought_signature"] == "c2lnLTE="
    assert calls[0].parent_id == "resp_snake"
    assert buffer.finish_reasons == {0: "STOP"}


def test_gemini_snake_case_model_dump_without_candidate_index() -> None:
    event = sdk_response(
        sdk_candidate(
            [sdk_call_part("c2ln", name="get_weather", args={"city": "Paris"})],
            finish_reason="STOP",
        )
    )
    assert event["candidates"][0]["index"] is None
    calls, _ = run("gemini", [event])
    assert summary(calls) == [
        ("call_toolref_1", "get_weather", CallStatus.COMPLETE, {"city": "Paris"})
    ]


def g_chunk(parts: list[Event] | None = None, finish: str | None = None, **extra: Any) -> Event:
    candidate: Event = {"index": 0}
    if parts is not None:
        candidate["content"] = {"role": "model", "parts": parts}
    if finish is not None:
        candidate["finishReason"] = finish
    candidate.update(extra)
    return {"candidates": [candidate]}


def g_call(**call: Any) -> Event:
    return {"functionCall": call}


def test_gemini_malformed_function_call_is_a_turn_error() -> None:
    message = "Malformed function call: print(default_api.get_weather(city='Paris'"
    events = [g_chunk(finish="MALFORMED_FUNCTION_CALL", finishMessage=message)]
    calls, buffer = run("gemini", events)
    assert calls == []
    error_type, error = buffer.errors[0]
    assert error_type == "malformed"
    assert "MALFORMED_FUNCTION_CALL" in error
    assert message in error
    assert buffer.has_tool_calls is False


def test_gemini_malformed_function_call_fails_an_open_call() -> None:
    events = [
        g_chunk([g_call(name="plan", id="p1", willContinue=True)]),
        g_chunk([g_call(partialArgs=[{"jsonPath": "$.a", "stringValue": "x"}], willContinue=True)]),
        g_chunk(finish="MALFORMED_FUNCTION_CALL"),
    ]
    calls, _ = run("gemini", events)
    assert [(call.status, call.error_type) for call in calls] == [
        (CallStatus.INCOMPLETE, "malformed")
    ]


@pytest.mark.parametrize(
    ("reason", "error_type"), [("MAX_TOKENS", "truncated"), ("SAFETY", "filtered")]
)
def test_gemini_cut_finish_reasons_fail_the_open_call(reason: str, error_type: str) -> None:
    events = [
        g_chunk([g_call(name="write", id="w1", willContinue=True)]),
        g_chunk(
            [
                g_call(
                    partialArgs=[
                        {"jsonPath": "$.text", "stringValue": "Once", "willContinue": True}
                    ],
                    willContinue=True,
                )
            ]
        ),
        g_chunk(finish=reason),
    ]
    calls, buffer = run("gemini", events)
    assert [(call.status, call.error_type) for call in calls] == [
        (CallStatus.INCOMPLETE, error_type)
    ]
    assert calls[0].raw_arguments == '{"text":"Once"}'
    assert buffer.finish_reasons == {0: reason}


def test_gemini_stream_cut_mid_string_leaves_the_open_call_incomplete() -> None:
    """No terminal chunk is Vertex's known quirk (its last partial argument is whole, and the
    call is closed as it stands); but a stream that ends while a partial argument said more
    of its string would come was cut mid-string: that call is incomplete, never runnable.
    Calls already closed in the turn, and whole calls, stay complete."""
    start = g_chunk([g_call(name="write", id="w1", willContinue=True)])
    more = {"jsonPath": "$.path", "stringValue": "/etc/pass", "willContinue": True}
    cut = g_chunk([g_call(partialArgs=[more], willContinue=True)])
    events = [g_chunk([g_call(name="ls", args={"dir": "."})]), start, cut]
    calls, buffer = run("gemini", events)
    assert [(c.name, c.status, c.error_type, c.runnable) for c in calls] == [
        ("ls", CallStatus.COMPLETE, None, True),
        ("write", CallStatus.INCOMPLETE, "aborted", False),
    ]
    assert calls[1].raw_arguments == '{"path":"/etc/pass"}'
    assert "mid-string" in (calls[1].error or "")
    assert buffer.has_tool_calls is True  # the whole call is still runnable
    whole = {"jsonPath": "$.path", "stringValue": "wd"}  # the string's last piece: whole
    calls, _ = run(
        "gemini", [start, cut, g_chunk([g_call(partialArgs=[whole], willContinue=True)])]
    )
    assert [(c.status, c.arguments) for c in calls] == [
        (CallStatus.COMPLETE, {"path": "/etc/passwd"})
    ]


def test_gemini_a_string_begun_in_the_part_that_names_the_call_goes_on() -> None:
    """A call's first part may carry partial arguments beside its name: a string it begins
    (`willContinue: true`) goes on in the next part (its first piece was dropped: the call
    was opened after the piece was marked as continuing), and a stream cut right after that
    first part left the call incomplete, not complete."""
    first = {"jsonPath": "$.path", "stringValue": "/etc/pass", "willContinue": True}
    start = g_chunk([g_call(name="write", id="w1", willContinue=True, partialArgs=[first])])
    rest = {"jsonPath": "$.path", "stringValue": "wd"}
    calls, _ = run("gemini", [start, g_chunk([g_call(partialArgs=[rest])]), g_chunk(finish="STOP")])
    assert [(c.status, c.arguments) for c in calls] == [
        (CallStatus.COMPLETE, {"path": "/etc/passwd"})
    ]
    calls, _ = run("gemini", [start])
    assert [(c.status, c.error_type) for c in calls] == [(CallStatus.INCOMPLETE, "aborted")]


def test_gemini_whole_calls_stay_open_until_the_turn_finishes() -> None:
    """Whole calls wait for their turn's finish (a signature may still come), so MAX_TOKENS
    in the same turn makes them incomplete too."""
    events = [
        g_chunk([g_call(name="f", args={"x": 1})]),
        g_chunk(finish="MAX_TOKENS"),
    ]
    calls, _ = run("gemini", events)
    assert [(call.status, call.error_type) for call in calls] == [
        (CallStatus.INCOMPLETE, "truncated")
    ]


def test_gemini_nested_and_quoted_json_paths() -> None:
    events = [
        g_chunk([g_call(name="cook", id="c1", willContinue=True)]),
        g_chunk(
            [
                g_call(
                    partialArgs=[
                        {"jsonPath": "$.recipe.ingredients[0].name", "stringValue": "flour"},
                        {"jsonPath": "$.recipe.ingredients[0]['grams']", "numberValue": 500},
                        {
                            "jsonPath": "$.recipe['prep time']",
                            "stringValue": "1",
                            "willContinue": True,
                        },
                    ],
                    willContinue=True,
                )
            ]
        ),
        g_chunk(
            [
                g_call(
                    partialArgs=[
                        {"jsonPath": "$.recipe['prep time']", "stringValue": "0 min"},
                        {"jsonPath": "$.recipe.ingredients[1].name", "stringValue": "salt"},
                        {"jsonPath": "$['it\\'s']", "boolValue": True},
                    ],
                )
            ]
        ),
        g_chunk(finish="STOP"),
    ]
    calls, _ = run("gemini", events)
    assert calls[0].arguments == {
        "recipe": {
            "ingredients": [{"name": "flour", "grams": 500}, {"name": "salt"}],
            "prep time": "10 min",
        },
        "it's": True,
    }


@pytest.mark.parametrize(
    ("path", "steps"),
    [
        ("$", ()),
        ("$.location", ("location",)),
        ("$.recipe.ingredients[0].name", ("recipe", "ingredients", 0, "name")),
        ("$['a b'][2]['c']", ("a b", 2, "c")),
        ("$['it\\'s']", ("it's",)),
        ("$['back\\\\slash']", ("back\\slash",)),
        ('$["double"]', ("double",)),
        ("$.matrix[0][1]", ("matrix", 0, 1)),
    ],
)
def test_json_path_steps(path: str, steps: tuple[str | int, ...]) -> None:
    assert json_path(path) == steps


@pytest.mark.parametrize(
    ("path", "steps"),
    [("$['a\\nb']", ("a\nb",)), ("$['tab\\there']", ("tab\there",)), ("$['\\u0007']", ("\a",))],
)
def test_json_path_decodes_rfc9535_escapes(path: str, steps: tuple[str | int, ...]) -> None:
    assert json_path(path) == steps


@pytest.mark.parametrize("path", ["location", "$.", "$[abc]", "$['open", "$.a..b", "$[-1]"])
def test_json_path_rejects_what_it_cannot_read(path: str) -> None:
    with pytest.raises(ChunkSequenceError):
        json_path(path)


def test_gemini_continuation_without_an_open_call_raises() -> None:
    adapter = adapter_for("gemini")
    event = g_chunk([g_call(partialArgs=[{"jsonPath": "$.a", "stringValue": "x"}])])
    with pytest.raises(ChunkSequenceError, match="continues no open call"):
        adapter.feed(event)


def test_gemini_empty_function_call_without_an_open_call_is_ignored() -> None:
    calls, _ = run("gemini", [g_chunk([g_call()], finish="STOP")])
    assert calls == []


def test_gemini_missing_ids_are_synthesized_and_present_ids_kept() -> None:
    events = [
        g_chunk([g_call(name="f", args={"n": 1}), g_call(name="f", args={"n": 2}, id="fc_7")]),
        g_chunk([g_call(name="g", args={})], finish="STOP"),
    ]
    calls, _ = run("gemini", events)
    assert [call.id for call in calls] == ["call_toolref_1", "fc_7", "call_toolref_3"]
    assert [bool(call.meta.get("synthesized_id")) for call in calls] == [True, False, True]


def test_gemini_signature_after_the_finish_chunk_joins_the_first_call() -> None:
    events = [
        g_chunk([g_call(name="f", args={"n": 1}), g_call(name="f", args={"n": 2})], "STOP"),
        g_chunk([{"text": "", "thoughtSignature": "late-sig"}]),
    ]
    calls, _ = run("gemini", events)
    assert [call.meta.get("thought_signature") for call in calls] == ["late-sig", None]
    assert [call.status for call in calls] == [CallStatus.COMPLETE] * 2


def test_gemini_signature_on_a_text_part_is_not_a_call_signature() -> None:
    events = [
        g_chunk([g_call(name="f", args={})]),
        g_chunk([{"text": "Done.", "thoughtSignature": "text-sig"}], "STOP"),
    ]
    calls, _ = run("gemini", events)
    assert "thought_signature" not in calls[0].meta


def test_gemini_error_mid_stream_aborts_open_calls() -> None:
    events = [
        g_chunk([g_call(name="plan", id="p1", willContinue=True)]),
        {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}},
    ]
    calls, _ = run("gemini", events)
    assert [(call.status, call.error_type) for call in calls] == [
        (CallStatus.INCOMPLETE, "aborted")
    ]
    assert "The model is overloaded." in (calls[0].error or "")


# --- Cohere ---


def c_start(index: int, call_id: str, name: str, *, as_list: bool = False) -> Event:
    call: Any = {"id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
    return {
        "type": "tool-call-start",
        "index": index,
        "delta": {"message": {"tool_calls": [call] if as_list else call}},
    }


def c_delta(index: int, text: str, *, as_list: bool = False) -> Event:
    call: Any = {"function": {"arguments": text}}
    return {
        "type": "tool-call-delta",
        "index": index,
        "delta": {"message": {"tool_calls": [call] if as_list else call}},
    }


def c_end(index: int) -> Event:
    return {"type": "tool-call-end", "index": index}


def c_message_end(reason: str, error: str | None = None) -> Event:
    delta: Event = {"finish_reason": reason}
    if error is not None:
        delta["error"] = error
    return {"type": "message-end", "delta": delta}


def test_cohere_accepts_tool_calls_as_a_list() -> None:
    events = [
        {"id": "msg_c", "type": "message-start", "delta": {"message": {"role": "assistant"}}},
        c_start(0, "get_weather_1", "get_weather", as_list=True),
        c_delta(0, '{"location": ', as_list=True),
        c_delta(0, '"Madrid"}', as_list=True),
        c_end(0),
        c_message_end("TOOL_CALL"),
    ]
    calls, buffer = run("cohere", events)
    assert summary(calls) == [
        ("get_weather_1", "get_weather", CallStatus.COMPLETE, {"location": "Madrid"})
    ]
    assert calls[0].parent_id == "msg_c"
    assert buffer.finish_reasons == {0: "TOOL_CALL"}


def test_cohere_max_tokens_cuts_the_open_call() -> None:
    events = [
        c_start(0, "a", "f"),
        c_delta(0, '{"x": 1}'),
        c_end(0),
        c_start(1, "b", "g"),
        c_delta(1, '{"y": "ab'),
        c_message_end("MAX_TOKENS"),
    ]
    calls, buffer = run("cohere", events)
    assert [(call.status, call.error_type) for call in calls] == [
        (CallStatus.COMPLETE, None),
        (CallStatus.INCOMPLETE, "truncated"),
    ]
    assert buffer.finish_reasons == {0: "MAX_TOKENS"}


def test_cohere_error_finish_reason_aborts_with_its_detail() -> None:
    events = [
        c_start(0, "a", "f"),
        c_delta(0, '{"x": '),
        c_message_end("ERROR", "internal server error"),
    ]
    calls, _ = run("cohere", events)
    (call,) = calls
    assert (call.status, call.error_type) == (CallStatus.INCOMPLETE, "aborted")
    assert "ERROR" in (call.error or "")
    assert "internal server error" in (call.error or "")


def test_cohere_stream_without_message_end() -> None:
    events = [c_start(0, "a", "f"), c_delta(0, '{"x": 1}'), c_end(0), c_start(1, "b", "g")]
    calls, _ = run("cohere", events)
    assert [(call.status, call.error_type) for call in calls] == [
        (CallStatus.COMPLETE, None),
        (CallStatus.INCOMPLETE, "aborted"),
    ]


def test_cohere_ignores_text_plan_and_citation_events() -> None:
    events = [
        {"type": "tool-plan-delta", "delta": {"message": {"tool_plan": "I will look."}}},
        {"type": "content-start", "index": 0, "delta": {"message": {"content": {"type": "text"}}}},
        {"type": "content-delta", "index": 0, "delta": {"message": {"content": {"text": "Hi"}}}},
        {"type": "content-end", "index": 0},
        {"type": "citation-start", "index": 0, "delta": {"message": {"citations": {}}}},
        {"type": "citation-end", "index": 0},
        c_message_end("COMPLETE"),
    ]
    calls, buffer = run("cohere", events)
    assert calls == []
    assert buffer.finish_reasons == {0: "COMPLETE"}
    assert buffer.errors == {}


# --- Bedrock ---


def b_tool_start(block: int, tool_id: str, name: str, **extra: Any) -> Event:
    return {
        "contentBlockStart": {
            "start": {"toolUse": {"toolUseId": tool_id, "name": name, **extra}},
            "contentBlockIndex": block,
        }
    }


def b_input(block: int, text: str) -> Event:
    return {
        "contentBlockDelta": {"delta": {"toolUse": {"input": text}}, "contentBlockIndex": block}
    }


def b_stop(block: int) -> Event:
    return {"contentBlockStop": {"contentBlockIndex": block}}


def b_message_stop(reason: str) -> Event:
    return {"messageStop": {"stopReason": reason}}


def test_bedrock_nova_whole_input_in_one_delta() -> None:
    events = [
        {"messageStart": {"role": "assistant"}},
        b_tool_start(0, "tooluse_1", "top_song"),
        b_input(0, '{"sign":"WZPZ"}'),
        b_stop(0),
        b_tool_start(1, "tooluse_2", "top_song"),
        b_input(1, '{"sign":"KEXP"}'),
        b_stop(1),
        b_message_stop("tool_use"),
        {"metadata": {"usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}}},
    ]
    calls, buffer = run("bedrock", events)
    assert summary(calls) == [
        ("tooluse_1", "top_song", CallStatus.COMPLETE, {"sign": "WZPZ"}),
        ("tooluse_2", "top_song", CallStatus.COMPLETE, {"sign": "KEXP"}),
    ]
    assert buffer.finish_reasons == {0: "tool_use"}


def test_bedrock_server_tool_use_is_provider_executed() -> None:
    events = [
        b_tool_start(0, "srvtooluse_1", "web_search", type="server_tool_use"),
        b_input(0, '{"query": "weather"}'),
        b_stop(0),
        b_message_stop("end_turn"),
    ]
    calls, buffer = run("bedrock", events)
    (call,) = calls
    assert call.kind == "server_tool_use"
    assert call.provider_executed is True
    assert call.status is CallStatus.COMPLETE
    assert buffer.has_tool_calls is False


@pytest.mark.parametrize(
    "exception",
    [
        "modelStreamErrorException",
        "throttlingException",
        "internalServerException",
        "serviceUnavailableException",
        "validationException",
    ],
)
def test_bedrock_exception_events_abort_open_calls(exception: str) -> None:
    events = [
        b_tool_start(1, "tooluse_1", "f"),
        b_input(1, '{"x": 1}'),
        b_stop(1),
        b_tool_start(2, "tooluse_2", "g"),
        b_input(2, '{"y": '),
        {exception: {"message": "something broke", "originalStatusCode": 500}},
    ]
    calls, buffer = run("bedrock", events)
    assert [(call.status, call.error_type) for call in calls] == [
        (CallStatus.COMPLETE, None),
        (CallStatus.INCOMPLETE, "aborted"),
    ]
    assert exception in (calls[1].error or "")
    assert "something broke" in (calls[1].error or "")
    assert buffer.errors[0][0] == "aborted"


def test_bedrock_max_tokens_with_the_last_block_closed_is_incomplete() -> None:
    events = [
        {"contentBlockDelta": {"delta": {"text": "Checking."}, "contentBlockIndex": 0}},
        {"contentBlockStop": {"contentBlockIndex": 0}},
        b_tool_start(1, "tooluse_1", "f"),
        b_input(1, '{"x": 1}'),
        b_stop(1),
        b_tool_start(2, "tooluse_2", "g"),
        b_input(2, '{"y": "ab'),
        b_stop(2),
        b_message_stop("max_tokens"),
    ]
    calls, buffer = run("bedrock", events)
    assert [(call.status, call.error_type) for call in calls] == [
        (CallStatus.COMPLETE, None),
        (CallStatus.INCOMPLETE, "truncated"),
    ]
    assert calls[1].raw_arguments == '{"y": "ab'
    assert [call.meta["block_index"] for call in calls] == [1, 2]
    assert buffer.finish_reasons == {0: "max_tokens"}


def test_bedrock_text_after_the_last_tool_releases_it_before_max_tokens() -> None:
    """Only the last thing generated can be cut: a text block after the tool closes it."""
    events = [
        b_tool_start(0, "tooluse_1", "f"),
        b_input(0, '{"x": 1}'),
        b_stop(0),
        {"contentBlockDelta": {"delta": {"text": "And so"}, "contentBlockIndex": 1}},
        {"contentBlockStop": {"contentBlockIndex": 1}},
        b_message_stop("max_tokens"),
    ]
    calls, _ = run("bedrock", events)
    assert summary(calls) == [("tooluse_1", "f", CallStatus.COMPLETE, {"x": 1})]


# --- Ollama ---


def o_line(tool_calls: list[Event] | None = None, **extra: Any) -> str:
    message: Event = {"role": "assistant", "content": ""}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return json.dumps({"model": "qwen3", "message": message, "done": False, **extra})


def test_ollama_done_reason_length_is_recorded_and_whole_calls_stay_complete() -> None:
    events = [
        o_line([{"function": {"name": "f", "arguments": {"x": 1}}}]),
        o_line(done=True, done_reason="length"),
    ]
    calls, buffer = run("ollama", events)
    assert summary(calls) == [("call_toolref_1", "f", CallStatus.COMPLETE, {"x": 1})]
    assert buffer.finish_reasons == {0: "length"}
    assert buffer.errors[0][0] == "truncated"


def test_ollama_error_line_is_a_turn_error() -> None:
    events = [
        o_line([{"function": {"name": "f", "arguments": {}}}]),
        json.dumps({"error": "model runner has unexpectedly stopped"}),
    ]
    calls, buffer = run("ollama", events)
    assert [call.status for call in calls] == [CallStatus.COMPLETE]
    error_type, error = buffer.errors[0]
    assert error_type == "aborted"
    assert "model runner has unexpectedly stopped" in error


def test_ollama_arguments_as_a_string() -> None:
    events = [
        o_line(
            [
                {"function": {"name": "f", "arguments": '{"x": 1}'}},
                {"function": {"name": "g", "arguments": '{"x": '}},
                {"function": {"name": "h"}},
            ]
        ),
        o_line(done=True, done_reason="stop"),
    ]
    calls, _ = run("ollama", events)
    assert [(call.name, call.status, call.arguments) for call in calls] == [
        ("f", CallStatus.COMPLETE, {"x": 1}),
        ("g", CallStatus.INVALID, None),
        ("h", CallStatus.COMPLETE, {}),
    ]
    assert calls[1].raw_arguments == '{"x": '


def test_ollama_stream_without_a_done_line_is_aborted_but_keeps_whole_calls() -> None:
    calls, buffer = run("ollama", [o_line([{"function": {"name": "f", "arguments": {}}}])])
    assert [call.status for call in calls] == [CallStatus.COMPLETE]
    assert buffer.errors[0][0] == "aborted"


# --- as_event and adapter_for ---

PAYLOAD = {"type": "ping", "n": 1}
PAYLOAD_TEXT = json.dumps(PAYLOAD)


@pytest.mark.parametrize(
    "event",
    [
        PAYLOAD,
        PAYLOAD_TEXT,
        f"  {PAYLOAD_TEXT}\n",
        f"data: {PAYLOAD_TEXT}",
        f"data:{PAYLOAD_TEXT}\n\n",
        PAYLOAD_TEXT.encode(),
        f"data: {PAYLOAD_TEXT}\n\n".encode(),
        bytearray(PAYLOAD_TEXT.encode()),
    ],
    ids=["dict", "json", "padded", "sse", "sse-no-space", "bytes", "sse-bytes", "bytearray"],
)
def test_as_event_reads_dicts_json_text_and_bytes(event: Any) -> None:
    assert as_event(event) == PAYLOAD


def test_as_event_returns_the_same_dict() -> None:
    event = {"type": "x"}
    assert as_event(event) is event


def test_as_event_dumps_sdk_models_by_alias_without_nones() -> None:
    model = ResponseOutputItemAddedEvent.model_validate(
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "sequence_number": 1,
            "item": {**fc_item("fc_1", "call_1", "f"), "async": True},
        }
    )
    event = as_event(model)
    assert event is not None
    assert event["item"]["async"] is True
    assert "namespace" not in event["item"]
    assert event["item"]["call_id"] == "call_1"


@pytest.mark.parametrize("event", ["[DONE]", "data: [DONE]", "data: [DONE]\n\n", b"data: [DONE]"])
def test_as_event_done_sentinel_is_none(event: str | bytes) -> None:
    assert as_event(event) is None


@pytest.mark.parametrize(
    ("event", "match"),
    [
        ("not json", "not JSON"),
        ("data: {", "not JSON"),
        ("", "not JSON"),
        ("[1, 2]", "JSON list, not an object"),
        ('"text"', "JSON str, not an object"),
        ("42", "JSON int, not an object"),
        (42, "cannot read a int"),
        (None, "cannot read a NoneType"),
    ],
)
def test_as_event_rejects_what_is_not_one_event(event: Any, match: str) -> None:
    with pytest.raises(ChunkSequenceError, match=match):
        as_event(event)


def test_as_event_rejects_bytes_that_are_not_utf8() -> None:
    with pytest.raises(ChunkSequenceError):
        as_event(b"data: \xff\xfe")


def test_adapters_skip_the_done_sentinel() -> None:
    for provider in ADAPTERS:
        assert adapter_for(provider).feed("data: [DONE]") == []


def test_adapter_for_unknown_provider_names_the_known_ones() -> None:
    with pytest.raises(ConfigurationError) as info:
        adapter_for("nope")
    message = str(info.value)
    assert "'nope'" in message
    for provider in (
        "anthropic",
        "bedrock",
        "cohere",
        "gemini",
        "ollama",
        "openai_chat",
        "openai_responses",
    ):
        assert provider in message
    assert sorted(ADAPTERS) == [
        "anthropic",
        "bedrock",
        "cohere",
        "gemini",
        "ollama",
        "openai_chat",
        "openai_responses",
    ]


def test_adapter_for_gives_a_fresh_adapter_each_time() -> None:
    assert adapter_for("anthropic") is not adapter_for("anthropic")


def test_responses_local_shell_call_is_a_call_of_local_shell() -> None:
    """Found in review: a `local_shell_call` item (Codex CLI's local shell, run by the
    client) was no tool item to the adapter, so `ToolBuffer` reported no call and
    `has_tool_calls` was False for a turn that asked for a command. It is a call of
    `local_shell` now, its `action` object the arguments."""
    action = {"type": "exec", "command": ["ls", "-la"], "env": {}}
    item: Event = {"type": "local_shell_call", "id": "lsh_1", "call_id": "call_ls"}
    events = [
        added(0, {**item, "status": "in_progress", "action": action}),
        item_done(0, {**item, "status": "completed", "action": action}),
        completed(),
    ]
    calls, buffer = run("openai_responses", events)
    assert summary(calls) == [("call_ls", "local_shell", CallStatus.COMPLETE, action)]
    assert calls[0].kind == "local_shell_call"
    assert calls[0].meta["item_id"] == "lsh_1"
    assert buffer.has_tool_calls is True


def test_responses_shell_patch_and_computer_calls_are_calls_of_their_tools() -> None:
    """Found in review: `shell_call`, `apply_patch_call` and `computer_call` items were no
    tool items to the adapter, so a turn asking for a command, a patch or a click reported
    no call. They are calls of `shell` (`action`), `apply_patch` (`operation`) and
    `computer` (`{"actions": [...]}`, or `action` where `actions` is none); a shell call in a hosted
    container (`environment` a `container_reference`) is the provider's to run."""
    shell = {"commands": ["ls"], "timeout_ms": 1000}
    patch = {"type": "delete_file", "path": "a.py"}
    click = {"type": "click", "button": "left", "x": 1, "y": 2}
    hosted = {"type": "container_reference", "container_id": "cntr_1"}
    items: list[Event] = [
        {"type": "shell_call", "id": "sh_1", "call_id": "c_sh", "action": shell},
        {"type": "apply_patch_call", "id": "ap_1", "call_id": "c_ap", "operation": patch},
        {"type": "computer_call", "id": "cu_1", "call_id": "c_cu", "actions": [click]},
        {"type": "computer_call", "id": "cu_2", "call_id": "c_c2", "action": click},
        {"type": "shell_call", "call_id": "c_h", "action": shell, "environment": hosted},
    ]
    events = [added(n, item) for n, item in enumerate(items)]
    events += [item_done(n, item) for n, item in enumerate(items)]
    calls, buffer = run("openai_responses", [*events, completed()])
    assert summary(calls) == [
        ("c_sh", "shell", CallStatus.COMPLETE, shell),
        ("c_ap", "apply_patch", CallStatus.COMPLETE, patch),
        ("c_cu", "computer", CallStatus.COMPLETE, {"actions": [click]}),
        ("c_c2", "computer", CallStatus.COMPLETE, click),
        ("c_h", "shell", CallStatus.COMPLETE, shell),
    ]
    assert [c.provider_executed for c in calls] == [False, False, False, False, True]
    assert buffer.has_tool_calls is True


# --- OpenAI Chat: custom (freeform) tool calls ---


def chat_calls(*calls: Event, finish: str | None = None) -> Event:
    delta: Event = {"tool_calls": list(calls)} if calls else {}
    return {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


PATCH = "*** Begin Patch\n*** Add File: a.py\n+print(1)\n*** End Patch\n"


def test_chat_custom_tool_call_input_is_freeform_text() -> None:
    """Found in review: a Chat `type: "custom"` call streams `custom: {name, input}`, not
    `function`; the adapter read neither, so the call had no name (invalid) and
    `has_tool_calls` was False for a turn asking for it. It is a `custom` call now, its input
    the text as streamed (`{"input": ...}`, as the Responses adapter's `custom_tool_call`),
    beside a function call in the same turn."""
    events = [
        chat_calls(
            {"index": 0, "id": "call_c", "type": "custom", "custom": {"name": "apply_patch"}}
        ),
        chat_calls({"index": 0, "custom": {"input": PATCH[:20]}}),
        chat_calls(
            {"index": 0, "custom": {"input": PATCH[20:]}},
            {"index": 1, "id": "call_f", "type": "function", "function": {"name": "ls"}},
        ),
        chat_calls({"index": 1, "function": {"arguments": "{}"}}),
        chat_calls(finish="tool_calls"),
    ]
    calls, buffer = run("openai_chat", events)
    custom, function = calls
    assert (custom.id, custom.name, custom.kind) == ("call_c", "apply_patch", "custom")
    assert custom.status is CallStatus.COMPLETE
    assert custom.arguments == {"input": PATCH}
    assert custom.raw_arguments == PATCH
    assert summary([function]) == [("call_f", "ls", CallStatus.COMPLETE, {})]
    assert function.kind == "function"
    assert buffer.has_tool_calls is True


def test_chat_custom_input_that_looks_like_a_resend_is_appended() -> None:
    """Freeform text is not JSON: a delta that begins with the text so far is more text
    (a function call's would be read as a cumulative server's resend)."""
    events = [
        chat_calls(
            {"index": 0, "id": "c", "type": "custom", "custom": {"name": "p", "input": "a"}}
        ),
        chat_calls({"index": 0, "custom": {"input": "ab"}}),
        chat_calls({"index": 0, "custom": {"input": " "}}),
        chat_calls(finish="tool_calls"),
    ]
    (call,), _ = run("openai_chat", events)
    assert call.arguments == {"input": "aab "}


def test_chat_custom_call_cut_off_without_a_finish_is_incomplete() -> None:
    """Whether freeform text is whole cannot be read from it: a stream that ends with no
    finish_reason and no [DONE] leaves the call incomplete (a function call's text is
    complete when it is a whole object)."""
    events = [
        chat_calls(
            {"index": 0, "id": "c", "type": "custom", "custom": {"name": "p", "input": "{}"}}
        )
    ]
    (call,), buffer = run("openai_chat", events)
    assert call.status is CallStatus.INCOMPLETE
    assert "freeform" in (call.error or "")
    assert buffer.has_tool_calls is False


def test_chat_call_both_custom_and_function_is_refused() -> None:
    events = [
        chat_calls(
            {"index": 0, "id": "c", "type": "custom", "custom": {"name": "p", "input": "a"}}
        ),
        chat_calls({"index": 0, "function": {"arguments": "{}"}}),
    ]
    with pytest.raises(ChunkSequenceError, match="custom"):
        run("openai_chat", events)
