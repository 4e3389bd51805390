"""The fake provider's answers, per API, as the providers send them: one JSON body, or the
events of a stream (server-sent events, `sse` frames them).

- Anthropic Messages: `anthropic_message`, `anthropic_events`;
- OpenAI Chat Completions: `chat_completion`, `chat_chunks` (the usage chunk when the
  request asks `stream_options.include_usage`);
- OpenAI Responses: `responses_response`, `responses_events`;
- Gemini `generateContent` / `streamGenerateContent?alt=sse`: `gemini_response`,
  `gemini_chunks` (a function call arrives whole, in one chunk, as Gemini sends it).

An answer is a `Reply`: a text, or one tool call (`Call`). Its ids are numbered by
`Reply.index` (the step), so a resent request gets the same ids.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Literal

Api = Literal["messages", "chat", "responses", "gemini"]
APIS: tuple[Api, ...] = ("messages", "chat", "responses", "gemini")
PIECE = 32  # characters of text or arguments per streamed event


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call: the tool's name, its arguments, and (scripted sessions) the text its
    result must contain once the agent ran it."""

    name: str
    arguments: dict[str, Any]
    expect: str = ""
    # A freeform tool's input (Responses `custom_tool_call`: Codex's JavaScript `exec`),
    # in place of JSON arguments.
    input: str | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    """A tool call or a text. `index`: the step, for ids. `kind`: what a text answers
    ("text", "side", "error: ..."), kept with the request as `Recorded.answer`."""

    text: str = ""
    call: Call | None = None
    index: int = 0
    kind: str = "text"

    @property
    def arguments(self) -> str:
        if self.call is None:
            return ""
        return self.call.input if self.call.input is not None else json.dumps(self.call.arguments)

    @property
    def answer(self) -> str:
        return f"tool:{self.call.name}" if self.call and self.kind != "finish" else self.kind


def sse(data: Any, event: str | None = None, crlf: bool = False) -> bytes:
    """One server-sent event (its lines ended by CRLF as Google's servers end them, when
    `crlf`)."""
    end = "\r\n" if crlf else "\n"
    head = f"event: {event}{end}" if event else ""
    return f"{head}data: {json.dumps(data)}{end}{end}".encode()


def _pieces(text: str) -> list[str]:
    return [text[i : i + PIECE] for i in range(0, len(text), PIECE)] or [""]


# --- Anthropic Messages -------------------------------------------------------------------


def _anthropic_block(reply: Reply) -> dict[str, Any]:
    if reply.call is None:
        return {"type": "text", "text": reply.text}
    return {
        "type": "tool_use",
        "id": f"toolu_e2e_{reply.index:03d}",
        "name": reply.call.name,
        "input": reply.call.arguments,
    }


def anthropic_message(reply: Reply, model: str, input_tokens: int) -> dict[str, Any]:
    return {
        "id": f"msg_e2e_{reply.index:03d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [_anthropic_block(reply)],
        "stop_reason": "tool_use" if reply.call else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": 8,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def anthropic_events(reply: Reply, model: str, input_tokens: int) -> list[tuple[str, Any]]:
    """The (event, data) pairs Anthropic streams for `reply`."""
    whole = anthropic_message(reply, model, input_tokens)
    start = {**whole, "content": [], "stop_reason": None, "usage": {**whole["usage"]}}
    start["usage"]["output_tokens"] = 1
    block = _anthropic_block(reply)
    if reply.call is None:
        opened = {**block, "text": ""}
        deltas = [{"type": "text_delta", "text": p} for p in _pieces(reply.text)]
    else:
        opened = {**block, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(reply.arguments)]
    return [
        ("message_start", {"type": "message_start", "message": start}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": opened},
        ),
        *(
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": d})
            for d in deltas
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": 8},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


# --- OpenAI Chat Completions --------------------------------------------------------------


def chat_completion(reply: Reply, model: str, input_tokens: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.call is not None:
        message["tool_calls"] = [
            {
                "id": f"call_e2e_{reply.index:03d}",
                "type": "function",
                "function": {"name": reply.call.name, "arguments": reply.arguments},
            }
        ]
    return {
        "id": f"chatcmpl-e2e-{reply.index:03d}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if reply.call else "stop",
            }
        ],
        "usage": _chat_usage(input_tokens),
    }


def _chat_usage(input_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": input_tokens,
        "completion_tokens": 8,
        "total_tokens": input_tokens + 8,
    }


def chat_chunks(reply: Reply, model: str, input_tokens: int, usage: bool) -> list[Any]:
    """The `chat.completion.chunk`s OpenAI streams for `reply` (then `[DONE]`, not here)."""
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-e2e-{reply.index:03d}",
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    if reply.call is None:
        chunks = [chunk({"role": "assistant", "content": ""})]
        chunks += [chunk({"content": p}) for p in _pieces(reply.text)]
        chunks.append(chunk({}, "stop"))
    else:
        head = {
            "index": 0,
            "id": f"call_e2e_{reply.index:03d}",
            "type": "function",
            "function": {"name": reply.call.name, "arguments": ""},
        }
        chunks = [chunk({"role": "assistant", "content": None, "tool_calls": [head]})]
        chunks += [
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]})
            for p in _pieces(reply.arguments)
        ]
        chunks.append(chunk({}, "tool_calls"))
    if usage:
        chunks.append({**chunk({}), "choices": [], "usage": _chat_usage(input_tokens)})
    return chunks


# --- OpenAI Responses ---------------------------------------------------------------------


def responses_item(reply: Reply) -> dict[str, Any]:
    if reply.call is None:
        return {
            "type": "message",
            "id": f"msg_e2e_{reply.index:03d}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
        }
    if reply.call.input is not None:
        return {
            "type": "custom_tool_call",
            "id": f"ctc_e2e_{reply.index:03d}",
            "call_id": f"call_e2e_{reply.index:03d}",
            "name": reply.call.name,
            "input": reply.call.input,
            "status": "completed",
        }
    return {
        "type": "function_call",
        "id": f"fc_e2e_{reply.index:03d}",
        "call_id": f"call_e2e_{reply.index:03d}",
        "name": reply.call.name,
        "arguments": reply.arguments,
        "status": "completed",
    }


def responses_response(
    reply: Reply, model: str, input_tokens: int, status: str = "completed"
) -> dict[str, Any]:
    done = status == "completed"
    return {
        "id": f"resp_e2e_{reply.index:03d}",
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "output": [responses_item(reply)] if done else [],
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
        "usage": (
            {
                "input_tokens": input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 8,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": input_tokens + 8,
            }
            if done
            else None
        ),
    }


def responses_events(reply: Reply, model: str, input_tokens: int) -> list[dict[str, Any]]:
    """The Responses API events streamed for `reply` (one output item), numbered."""
    item = responses_item(reply)
    created = responses_response(reply, model, input_tokens, "in_progress")
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": created},
        {"type": "response.in_progress", "response": created},
    ]
    if reply.call is None:
        part = {"type": "output_text", "text": "", "annotations": []}
        where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        events += [
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**item, "status": "in_progress", "content": []},
            },
            {"type": "response.content_part.added", **where, "part": part},
            *(
                {"type": "response.output_text.delta", **where, "delta": p, "logprobs": []}
                for p in _pieces(reply.text)
            ),
            {"type": "response.output_text.done", **where, "text": reply.text, "logprobs": []},
            {"type": "response.content_part.done", **where, "part": item["content"][0]},
        ]
    elif item["type"] == "custom_tool_call":
        where = {"item_id": item["id"], "output_index": 0}
        events += [
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**item, "status": "in_progress", "input": ""},
            },
            *(
                {"type": "response.custom_tool_call_input.delta", **where, "delta": p}
                for p in _pieces(reply.arguments)
            ),
            {"type": "response.custom_tool_call_input.done", **where, "input": reply.arguments},
        ]
    else:
        where = {"item_id": item["id"], "output_index": 0}
        events += [
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**item, "status": "in_progress", "arguments": ""},
            },
            *(
                {"type": "response.function_call_arguments.delta", **where, "delta": p}
                for p in _pieces(reply.arguments)
            ),
            {
                "type": "response.function_call_arguments.done",
                **where,
                "arguments": reply.arguments,
            },
        ]
    events += [
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": responses_response(reply, model, input_tokens)},
    ]
    return [{**e, "sequence_number": n} for n, e in enumerate(events)]


# --- Gemini -------------------------------------------------------------------------------


def _gemini_usage(input_tokens: int) -> dict[str, int]:
    return {
        "promptTokenCount": input_tokens,
        "candidatesTokenCount": 8,
        "totalTokenCount": input_tokens + 8,
    }


def _gemini_chunk(
    reply: Reply, model: str, parts: list[dict[str, Any]], finish: str | None, usage: Any
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    chunk: dict[str, Any] = {"candidates": [candidate]}
    if usage is not None:
        chunk["usageMetadata"] = usage
    return chunk | {"modelVersion": model, "responseId": f"gemini-e2e-{reply.index:03d}"}


def _gemini_parts(reply: Reply) -> list[dict[str, Any]]:
    if reply.call is None:
        return [{"text": reply.text}]
    return [{"functionCall": {"name": reply.call.name, "args": reply.call.arguments}}]


def gemini_response(reply: Reply, model: str, input_tokens: int) -> dict[str, Any]:
    """A `generateContent` answer: one candidate, its parts whole."""
    usage = _gemini_usage(input_tokens)
    return _gemini_chunk(reply, model, _gemini_parts(reply), "STOP", usage)


def gemini_chunks(reply: Reply, model: str, input_tokens: int) -> list[dict[str, Any]]:
    """The `streamGenerateContent` chunks for `reply`: a text in pieces, the last one with
    `finishReason` and `usageMetadata`; a function call whole, in one chunk."""
    usage = _gemini_usage(input_tokens)
    if reply.call is not None:
        return [_gemini_chunk(reply, model, _gemini_parts(reply), "STOP", usage)]
    pieces = _pieces(reply.text)
    return [
        _gemini_chunk(
            reply,
            model,
            [{"text": p}],
            "STOP" if n == len(pieces) - 1 else None,
            usage if n == len(pieces) - 1 else None,
        )
        for n, p in enumerate(pieces)
    ]


# --- per API ------------------------------------------------------------------------------


def whole(api: Api, reply: Reply, model: str, input_tokens: int) -> dict[str, Any]:
    """The answer as one JSON body."""
    if api == "messages":
        return anthropic_message(reply, model, input_tokens)
    if api == "chat":
        return chat_completion(reply, model, input_tokens)
    if api == "gemini":
        return gemini_response(reply, model, input_tokens)
    return responses_response(reply, model, input_tokens)


def frames(api: Api, reply: Reply, model: str, input_tokens: int, usage: bool) -> list[bytes]:
    """The answer as a stream: its server-sent events."""
    if api == "messages":
        return [sse(data, event) for event, data in anthropic_events(reply, model, input_tokens)]
    if api == "chat":
        chunks = chat_chunks(reply, model, input_tokens, usage)
        return [*(sse(c) for c in chunks), b"data: [DONE]\n\n"]
    if api == "gemini":
        return [sse(c, crlf=True) for c in gemini_chunks(reply, model, input_tokens)]
    return [sse(e, e["type"]) for e in responses_events(reply, model, input_tokens)]
