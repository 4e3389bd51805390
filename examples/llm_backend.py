"""An LLM-shaped backend behind `ToolRefMiddleware`, with a scripted stand-in for the model.

It answers the official SDKs as the providers do: OpenAI Chat Completions
(`POST /v1/chat/completions`), OpenAI Responses (`POST /v1/responses`) and Anthropic Messages
(`POST /v1/messages`, and `/v1/messages/count_tokens`), streamed as the providers' own
server-sent events (with an await between events, as a real model's tokens come) or as one
JSON answer. The "model" asks for a tool when the user writes `read PATH` or `list PATH`,
and answers in text once the tool's result is in; the client runs the tools.

The middleware hydrates the refs and history refs clients send (see
examples/openai_client.py and examples/anthropic_client.py), so this code only ever sees
whole requests. GET /received lists every request body the app was given, as it got it
(`--no-record`: none are kept, for runs that last hours). `--plain` serves the same app
without the middleware (a backend that knows nothing of toolref).

    python examples/llm_backend.py --registry http://127.0.0.1:8750 --port 8001
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from toolref import AsyncRegistryClient, ToolRefMiddleware

MODEL = "scripted-1"
PIECE = 24  # characters of text or arguments per streamed event


@dataclass(frozen=True, slots=True)
class Turn:
    """What the model makes of a conversation: the last thing said, and calls made so far."""

    user: str | None  # the user's last words, when they spoke last
    result: str | None  # the last tool result, when one came last
    calls: int  # tool calls in the conversation so far


@dataclass(frozen=True, slots=True)
class Reply:
    """A tool call (`name`, `arguments` as JSON text) or a text answer."""

    text: str = ""
    name: str | None = None
    arguments: str = ""


def scripted_model(turn: Turn) -> Reply:
    if turn.result is not None:
        return Reply(text=f"The tool returned {len(turn.result)} characters.")
    words = (turn.user or "").split()
    if len(words) == 2 and words[0] in ("read", "list"):
        name = "read_file" if words[0] == "read" else "list_dir"
        return Reply(name=name, arguments=json.dumps({"path": words[1]}))
    return Reply(text=f"You said: {turn.user}")


def _text(content: Any) -> str:
    """The text of a message's content: a string, or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _pieces(text: str) -> list[str]:
    return [text[i : i + PIECE] for i in range(0, len(text), PIECE)] or [""]


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


# --- OpenAI Chat Completions ------------------------------------------------------------


def chat_turn(messages: list[Any]) -> Turn:
    calls = sum(len(m.get("tool_calls") or []) for m in messages if isinstance(m, dict))
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return Turn(None, _text(last.get("content")), calls)
    return Turn(_text(last.get("content")), None, calls)


def chat_chunks(reply: Reply, calls: int) -> list[dict[str, Any]]:
    """The `chat.completion.chunk` events OpenAI streams for `reply`."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-{calls}",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    if reply.name is None:
        events = [chunk({"role": "assistant", "content": ""})]
        events += [chunk({"content": piece}) for piece in _pieces(reply.text)]
        return [*events, chunk({}, "stop")]
    call = {"index": 0, "id": f"call_{calls + 1}", "type": "function"}
    events = [
        chunk(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{**call, "function": {"name": reply.name, "arguments": ""}}],
            }
        )
    ]
    events += [
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        for piece in _pieces(reply.arguments)
    ]
    return [*events, chunk({}, "tool_calls")]


def chat_completion(reply: Reply, calls: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.name is not None:
        message["tool_calls"] = [
            {
                "id": f"call_{calls + 1}",
                "type": "function",
                "function": {"name": reply.name, "arguments": reply.arguments},
            }
        ]
    finish = "stop" if reply.name is None else "tool_calls"
    return {
        "id": f"chatcmpl-{calls}",
        "object": "chat.completion",
        "created": 1700000000,
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


# --- Anthropic Messages -----------------------------------------------------------------


def anthropic_turn(messages: list[Any]) -> Turn:
    calls = sum(
        1
        for m in messages
        if isinstance(m, dict) and isinstance(m.get("content"), list)
        for block in m["content"]
        if isinstance(block, dict) and block.get("type") == "tool_use"
    )
    last = messages[-1] if messages else {}
    content = last.get("content")
    if isinstance(content, list):
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        if results:
            return Turn(None, _text(results[-1].get("content")), calls)
    return Turn(_text(content), None, calls)


def _anthropic_block(reply: Reply, calls: int) -> dict[str, Any]:
    if reply.name is None:
        return {"type": "text", "text": reply.text}
    return {
        "type": "tool_use",
        "id": f"toolu_{calls + 1:02d}",
        "name": reply.name,
        "input": json.loads(reply.arguments),
    }


def anthropic_message(reply: Reply, calls: int) -> dict[str, Any]:
    return {
        "id": f"msg_{calls}",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [_anthropic_block(reply, calls)],
        "stop_reason": "end_turn" if reply.name is None else "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def anthropic_events(reply: Reply, calls: int) -> list[tuple[str, dict[str, Any]]]:
    """The (event, data) pairs Anthropic streams for `reply`."""
    whole = anthropic_message(reply, calls)
    start = {**whole, "content": [], "stop_reason": None}
    block = _anthropic_block(reply, calls)
    if reply.name is None:
        opened = {**block, "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in _pieces(reply.text)]
    else:
        opened = {**block, "input": {}}
        deltas = [
            {"type": "input_json_delta", "partial_json": piece}
            for piece in _pieces(reply.arguments)
        ]
    return [
        ("message_start", {"type": "message_start", "message": start}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": opened},
        ),
        *(
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
            for delta in deltas
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": 1},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


# --- OpenAI Responses ---------------------------------------------------------------------


def responses_turn(items: list[Any]) -> Turn:
    calls = sum(1 for i in items if isinstance(i, dict) and i.get("type") == "function_call")
    last = items[-1] if items else {}
    if last.get("type") == "function_call_output":
        return Turn(None, _text(last.get("output")), calls)
    return Turn(_text(last.get("content")), None, calls)


def _responses_item(reply: Reply, calls: int) -> dict[str, Any]:
    if reply.name is None:
        return {
            "type": "message",
            "id": f"msg_{calls}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
        }
    return {
        "type": "function_call",
        "id": f"fc_{calls + 1}",
        "call_id": f"call_{calls + 1}",
        "name": reply.name,
        "arguments": reply.arguments,
        "status": "completed",
    }


def responses_response(reply: Reply, calls: int, status: str = "completed") -> dict[str, Any]:
    return {
        "id": f"resp_{calls}",
        "object": "response",
        "created_at": 1700000000,
        "model": MODEL,
        "status": status,
        "output": [_responses_item(reply, calls)] if status == "completed" else [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


def responses_events(reply: Reply, calls: int) -> list[dict[str, Any]]:
    """The Responses API events streamed for `reply` (one output item)."""
    item = _responses_item(reply, calls)
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": responses_response(reply, calls, "in_progress")}
    ]
    if reply.name is None:
        opened = {**item, "status": "in_progress", "content": []}
        events.append({"type": "response.output_item.added", "output_index": 0, "item": opened})
        events += [
            {
                "type": "response.output_text.delta",
                "item_id": item["id"],
                "output_index": 0,
                "content_index": 0,
                "delta": piece,
            }
            for piece in _pieces(reply.text)
        ]
    else:
        opened = {**item, "status": "in_progress", "arguments": ""}
        events.append({"type": "response.output_item.added", "output_index": 0, "item": opened})
        events += [
            {
                "type": "response.function_call_arguments.delta",
                "item_id": item["id"],
                "output_index": 0,
                "delta": piece,
            }
            for piece in _pieces(reply.arguments)
        ]
    events.append({"type": "response.output_item.done", "output_index": 0, "item": item})
    events.append({"type": "response.completed", "response": responses_response(reply, calls)})
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


# --- the app ------------------------------------------------------------------------------


def create_backend(
    registry: AsyncRegistryClient | None, delay: float = 0.01, record: bool = True
) -> Starlette:
    """The backend app; `registry` None: without the middleware. `delay`: seconds between
    streamed events. `record`: keep every request body for GET /received (tests); off, a
    long run's memory stays flat."""
    received: list[str] = []

    async def streamed(frames: list[bytes]) -> AsyncIterator[bytes]:
        for n, frame in enumerate(frames):
            if n:
                await asyncio.sleep(delay)  # the model producing its next tokens
            yield frame

    def answer(body: dict[str, Any], frames: list[bytes], whole: Callable[[], Any]) -> Response:
        if body.get("stream"):
            return StreamingResponse(streamed(frames), media_type="text/event-stream")
        return JSONResponse(whole())

    async def read(request: Request) -> dict[str, Any]:
        text = (await request.body()).decode()
        if record:
            received.append(text)
        body: dict[str, Any] = json.loads(text)
        return body

    async def chat(request: Request) -> Response:
        body = await read(request)
        turn = chat_turn(body["messages"])
        reply = scripted_model(turn)
        frames = [_sse(c) for c in chat_chunks(reply, turn.calls)] + [b"data: [DONE]\n\n"]
        return answer(body, frames, lambda: chat_completion(reply, turn.calls))

    async def messages(request: Request) -> Response:
        body = await read(request)
        turn = anthropic_turn(body["messages"])
        reply = scripted_model(turn)
        frames = [_sse(data, event) for event, data in anthropic_events(reply, turn.calls)]
        return answer(body, frames, lambda: anthropic_message(reply, turn.calls))

    async def count_tokens(request: Request) -> Response:
        body = await read(request)
        return JSONResponse({"input_tokens": len(json.dumps(body["messages"])) // 4})

    async def responses(request: Request) -> Response:
        body = await read(request)
        items = body["input"]
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        turn = responses_turn(items)
        reply = scripted_model(turn)
        frames = [_sse(e, e["type"]) for e in responses_events(reply, turn.calls)]
        return answer(body, frames, lambda: responses_response(reply, turn.calls))

    async def seen(request: Request) -> JSONResponse:
        return JSONResponse({"received": received})

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/received", seen, methods=["GET"]),
        ]
    )
    app.state.received = received
    if registry is not None:
        app.add_middleware(ToolRefMiddleware, registry=registry)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--registry", default=os.environ.get("TOOLREF_URL", "http://127.0.0.1:8750")
    )
    parser.add_argument("--api-key", default=os.environ.get("TOOLREF_API_KEY"))
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--plain", action="store_true", help="without ToolRefMiddleware")
    parser.add_argument(
        "--no-record", action="store_true", help="keep no request bodies (GET /received is empty)"
    )
    args = parser.parse_args()
    import uvicorn

    registry = None if args.plain else AsyncRegistryClient(args.registry, api_key=args.api_key)
    app = create_backend(registry, record=not args.no_record)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
