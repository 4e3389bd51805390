"""The Python chat backend the TypeScript SDK's integration tests talk to (client_sdk/js/test/
integration.test.ts): an AI SDK 5 chat endpoint behind `ToolRefMiddleware`, with a scripted
model that calls a tool each turn, answering as an event stream.

    python -m tests.js_backend --registry http://127.0.0.1:8750 --port 8000 [--plain]

POST /api/chat takes `{id, messages, trigger}` (UIMessages) and streams `data: <json>` events:
`{"type": "message", "message": <the assistant UIMessage>}`, then `data: [DONE]`. The
message's tool part has its output, as useChat would hold it once the tool ran. GET /seen
lists the messages text of every body the app received (after the middleware), so a test
can check the app got exactly what the client holds. `--plain`: no middleware (a backend
that does not speak toolref).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from toolref import AsyncRegistryClient, ToolRefMiddleware
from toolref.kit.spans import document


def tool_output(turn: int, text: str) -> str:
    """A tool result as big as real ones: a file of a few KB, different each turn."""
    lines = [
        f"{turn:03d}:{n:04d} def handler_{n}(request): return {text!r}  # é😀" for n in range(60)
    ]
    return "\n".join(lines)


def create_app(registry: AsyncRegistryClient | None) -> Starlette:
    seen: list[str] = []

    async def chat(request: Request) -> StreamingResponse:
        raw = (await request.body()).decode()
        parsed = document(raw)
        member = parsed.members["messages"]
        seen.append(raw[member.start : member.end])
        messages: list[Any] = parsed.value["messages"]
        turn = sum(1 for m in messages if m.get("role") == "user")
        last = messages[-1]["parts"][-1].get("text", "") if messages else ""
        call_id = f"call_{turn:03d}"
        message = {
            "id": f"a{turn}",
            "role": "assistant",
            "parts": [
                {"type": "step-start"},
                {
                    "type": "tool-read_file",
                    "toolCallId": call_id,
                    "state": "output-available",
                    "input": {"path": f"src/module_{turn}.py", "limit": 1.0},
                    "output": {"text": tool_output(turn, last), "truncated": False},
                },
                {"type": "text", "text": f"Read module {turn}.", "state": "done"},
            ],
        }

        async def events() -> AsyncIterator[bytes]:
            yield b'data: {"type":"start"}\n\n'
            await asyncio.sleep(0)
            yield b"data: " + json.dumps({"type": "message", "message": message}).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def seen_texts(request: Request) -> JSONResponse:
        return JSONResponse({"seen": seen})

    app = Starlette(
        routes=[
            Route("/api/chat", chat, methods=["POST"]),
            Route("/seen", seen_texts, methods=["GET"]),
        ]
    )
    if registry is not None:
        app.add_middleware(ToolRefMiddleware, registry=registry)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", default="http://127.0.0.1:8750")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--plain", action="store_true", help="no ToolRefMiddleware")
    args = parser.parse_args()
    import uvicorn

    registry = None if args.plain else AsyncRegistryClient(args.registry)
    uvicorn.run(create_app(registry), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
