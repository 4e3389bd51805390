"""The answer a conversation's next turn writes back, streamed as its provider streams it:
what the fast fake upstream answers a turn with when the bench scripts it (issue 39: the
answer is the next turn's dictionary, so the upstream must answer what the agent then
writes back, as the real provider did when the trace was recorded).

`next_answer(turns, n)`: the assistant message that follows turn `n` in the next turn of
the same conversation (None: the conversation ends, or goes on without one); `stream(fmt,
message)`: its server-sent events, Anthropic Messages or OpenAI Chat. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from loadtests.patterns import Turn

PIECE: Final = 48  # characters per delta, about what providers stream


def next_answer(turns: Sequence[Turn], n: int) -> dict[str, Any] | None:
    here = turns[n]
    for later in turns[n + 1 :]:
        if later.conversation != here.conversation:
            continue
        messages, said = later.messages, len(here.messages)
        if len(messages) > said:  # grown (cache marks may have moved on the way)
            found = messages[said]
            if isinstance(found, dict) and found.get("role") == "assistant":
                return found
        return None
    return None


def stream(fmt: str, message: dict[str, Any]) -> bytes:
    return _anthropic(message) if fmt == "anthropic" else _chat(message)


def _sse(data: Any, event: str | None = None) -> str:
    return (f"event: {event}\n" if event else "") + f"data: {json.dumps(data)}\n\n"


def _pieces(text: str) -> list[str]:
    return [text[i : i + PIECE] for i in range(0, len(text), PIECE)] or [""]


def _anthropic(message: dict[str, Any]) -> bytes:
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
    start = {"id": "msg_bench", "type": "message", "role": "assistant", "model": "bench-1"}
    out = [_sse({"type": "message_start", "message": {**start, "content": []}}, "message_start")]
    for index, block in enumerate(blocks):
        kind = block.get("type")
        opened, deltas = dict(block), []
        if kind == "text":
            opened["text"] = ""
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(block.get("text", ""))]
        elif kind == "tool_use":
            opened["input"] = {}
            text = json.dumps(block.get("input", {}))
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(text)]
        elif kind == "thinking":
            opened["thinking"], opened["signature"] = "", ""
            deltas = [
                {"type": "thinking_delta", "thinking": p}
                for p in _pieces(block.get("thinking", ""))
            ]
            deltas.append({"type": "signature_delta", "signature": block.get("signature", "")})
        opened.pop("cache_control", None)
        event = {"type": "content_block_start", "index": index, "content_block": opened}
        out.append(_sse(event, "content_block_start"))
        for delta in deltas:
            event = {"type": "content_block_delta", "index": index, "delta": delta}
            out.append(_sse(event, "content_block_delta"))
        out.append(_sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    ending: dict[str, Any] = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}
    out += [_sse(ending, "message_delta"), _sse({"type": "message_stop"}, "message_stop")]
    return "".join(out).encode()


def _chat(message: dict[str, Any]) -> bytes:
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "model": "bench-1"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return _sse({**base, "choices": [choice]})

    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    out = [chunk({"role": "assistant", "content": "" if content is not None else None})]
    out += [chunk({"content": p}) for p in (_pieces(content) if content else [])]
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function", {})
        head = {
            "index": index,
            "id": call.get("id", ""),
            "type": "function",
            "function": {"name": function.get("name", ""), "arguments": ""},
        }
        out.append(chunk({"tool_calls": [head]}))
        for p in _pieces(function.get("arguments", "")):
            out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]}))
    out.append(chunk({}, "tool_calls" if message.get("tool_calls") else "stop"))
    return ("".join(out) + "data: [DONE]\n\n").encode()
