"""Whole SSE frames as events: `event:` and `id:` lines, comments and keep-alives, data over
several lines; and frames that carry no event change nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolref.streaming import CallStatus, accumulate
from toolref.streaming.adapters.base import as_event
from toolref.wire.errors import ChunkSequenceError

PAYLOAD = {"type": "message_start", "message": {"id": "msg_1", "content": []}}
TEXT = json.dumps(PAYLOAD)


@pytest.mark.parametrize(
    "frame",
    [
        f"event: message_start\ndata: {TEXT}",
        f"event: message_start\ndata: {TEXT}\n\n",
        f"id: 7\nevent: message_start\ndata:{TEXT}",
        f": a comment first\nevent: message_start\ndata: {TEXT}",
        f"event: message_start\r\ndata: {TEXT}\r\n",
        f"event: message_start\ndata: {TEXT}".encode(),
    ],
    ids=["named", "trailing-blank", "id-no-space", "comment", "crlf", "bytes"],
)
def test_a_whole_frame_is_its_data(frame: str | bytes) -> None:
    assert as_event(frame) == PAYLOAD


def test_data_over_several_lines_is_joined_by_newlines() -> None:
    frame = 'event: x\ndata: {"type": "x",\ndata:  "n": 1}'
    assert as_event(frame) == {"type": "x", "n": 1}


@pytest.mark.parametrize(
    "frame", [": OPENROUTER PROCESSING", "event: ping", "id: 3", "retry: 1000", "data:"]
)
def test_a_frame_without_data_is_an_empty_event(frame: str) -> None:
    assert as_event(frame) == {}


def test_a_done_frame_is_the_sentinel() -> None:
    assert as_event("event: done\ndata: [DONE]") is None


def test_a_frame_with_broken_data_names_the_data() -> None:
    with pytest.raises(ChunkSequenceError, match="not JSON"):
        as_event('event: x\ndata: {"type": ')


_ANTHROPIC = [
    'data: {"type": "message_start", "message": {"id": "msg_1", "content": []}}',
    'event: content_block_start\ndata: {"type": "content_block_start", "index": 0, '
    '"content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}}',
    'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
    '"delta": {"type": "input_json_delta", "partial_json": "{\\"a\\": 1}"}}',
    'event: content_block_stop\ndata: {"type": "content_block_stop", "index": 0}',
    ": keep-alive",
    'event: message_delta\ndata: {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}}',
    'event: message_stop\ndata: {"type": "message_stop"}',
]
_BEDROCK: list[Any] = [
    {"contentBlockStart": {"start": {"toolUse": {"toolUseId": "t1", "name": "f"}}}},
    {"contentBlockDelta": {"delta": {"toolUse": {"input": '{"a": 1}'}}, "contentBlockIndex": 0}},
    {"contentBlockStop": {"contentBlockIndex": 0}},
    ": keep-alive",
    {"metadata": {"usage": {"inputTokens": 1}}},
    {"someEventAddedLater": {}},
    {"messageStop": {"stopReason": "max_tokens"}},
]


@pytest.mark.parametrize(("provider", "events"), [("anthropic", _ANTHROPIC), ("bedrock", _BEDROCK)])
def test_frames_that_carry_no_event_do_not_close_the_last_block(
    provider: str, events: list[Any]
) -> None:
    """A keep-alive (or an event kind added later) between the last block's stop and a
    max_tokens stop must not release that block as complete: it was cut."""
    [call] = accumulate(events, provider)
    assert (call.status, call.error_type) == (CallStatus.INCOMPLETE, "truncated")


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\x85"], ids=["LS", "PS", "NEL"])
def test_a_line_separator_inside_the_json_is_not_a_line_end(char: str) -> None:
    """SSE ends lines at CR, LF or CRLF only; JSON may carry U+2028, U+2029 and U+0085 raw
    in a string (json.dumps(ensure_ascii=False) does), and the frame is still one event."""
    payload = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": f'{{"a": "x{char}y"}}'},
    }
    frame = "event: content_block_delta\ndata: " + json.dumps(payload, ensure_ascii=False)
    assert as_event(frame) == payload
    assert as_event(frame.encode()) == payload


@pytest.mark.parametrize("frame", [f"\ufeffevent: message_start\ndata: {TEXT}", f"\ufeff{TEXT}"])
def test_a_leading_byte_order_mark_is_dropped(frame: str) -> None:
    """The SSE spec drops one BOM at the start of a stream: its first frame carries it."""
    assert as_event(frame) == PAYLOAD
    assert as_event(frame.encode()) == PAYLOAD


def test_data_over_lines_ended_by_cr_alone_is_joined() -> None:
    frame = 'event: x\rdata: {"type": "x",\rdata:  "n": 1}\r'
    assert as_event(frame) == {"type": "x", "n": 1}
