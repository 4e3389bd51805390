"""The web-chat demo's backend: the built page, and POST /api/chat behind `ToolRefMiddleware`.

POST /api/chat takes what AI SDK 5's `DefaultChatTransport` sends (`{id, messages, trigger,
messageId}`, `UIMessage`s with tool parts) and answers with the UI message stream protocol
(server-sent events, `x-vercel-ai-ui-message-stream: v1`) from a scripted model
(examples/web_chat_model.py) whose tools run here. The middleware restores what the page's
`toolrefFetch` sends (edits, or refs), so this code only ever sees whole messages.
Each event is sent as it is made: the answer streams through the middleware.

GET /api/received lists every request body this app received, as text, so the browser
test can compare them with the messages the page holds. Everything else is the page
(examples/web-chat/dist, built by `make demo`).

    python -m examples.web_chat_backend --registry http://127.0.0.1:8750 --port 8770
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from examples import web_chat_model
from toolref import AsyncRegistryClient, ToolRefMiddleware

PAGE = Path(__file__).resolve().parent / "web-chat" / "dist"
STREAM_HEADERS = {
    "cache-control": "no-cache",
    "x-vercel-ai-ui-message-stream": "v1",
    "x-accel-buffering": "no",  # a proxy in front must not hold the events back
}


def create_backend(
    registry: AsyncRegistryClient, page: Path = PAGE, delay: float = 0.01
) -> Starlette:
    """The app; `delay` seconds between text events, so the answer is seen to stream."""
    received: list[str] = []

    async def chat(request: Request) -> Response:
        body = await request.body()
        received.append(body.decode())
        messages = json.loads(body)["messages"]
        if not messages or messages[-1].get("role") != "user":
            return JSONResponse({"error": "the last message must be the user's"}, 400)

        async def events() -> AsyncIterator[str]:
            for chunk in web_chat_model.chunks(messages):
                yield f"data: {json.dumps(chunk)}\n\n"
                if chunk["type"] == "text-delta":
                    await asyncio.sleep(delay)
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream", headers=STREAM_HEADERS)

    async def received_bodies(request: Request) -> JSONResponse:
        return JSONResponse({"bodies": received})

    async def no_page(request: Request) -> Response:
        return PlainTextResponse(f"{page} is missing: run `make demo` (it builds the page)", 503)

    routes: list[BaseRoute] = [
        Route("/api/chat", chat, methods=["POST"]),
        Route("/api/received", received_bodies, methods=["GET"]),
    ]
    if page.is_dir():
        routes.append(Mount("/", StaticFiles(directory=page, html=True)))
    else:
        routes.append(Route("/", no_page))
    app = Starlette(routes=routes)
    app.add_middleware(ToolRefMiddleware, registry=registry, paths={"/api/chat"})
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--registry", default=os.environ.get("TOOLREF_URL", "http://127.0.0.1:8750")
    )
    parser.add_argument("--api-key", default=os.environ.get("TOOLREF_KEY"))
    parser.add_argument("--port", type=int, default=8770)
    parser.add_argument("--delay", type=float, default=0.01, help="seconds between text events")
    parser.add_argument(
        "--page", type=Path, default=PAGE, help="the built page to serve (default: the demo's)"
    )
    args = parser.parse_args()
    import uvicorn

    registry = AsyncRegistryClient(args.registry, api_key=args.api_key)
    app = create_backend(registry, page=args.page, delay=args.delay)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
