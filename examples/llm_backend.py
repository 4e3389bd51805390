"""An LLM-shaped backend behind `ToolRefMiddleware`, with a scripted stand-in for the model.

It answers the official SDKs as the providers do: OpenAI Chat Completions
(`POST /v1/chat/completions`), OpenAI Responses (`POST /v1/responses`) and Anthropic Messages
(`POST /v1/messages`, and `/v1/messages/count_tokens`), streamed as the providers' own
server-sent events (with an await between events, as a real model's tokens come) or as one
JSON answer. The "model" asks for a tool when the user writes `read PATH` or `list PATH`,
and answers in text once the tool's result is in; the client runs the tools.

The provider's side (the routes, the wire formats) is the repository's fake provider
(tests/support/fake_provider, also what the end-to-end tests run real agents against), so
this file holds only what a backend of yours would: the middleware in front of the app.
The middleware restores the edits clients send (see examples/openai_client.py and
examples/anthropic_client.py) through the registry, so the app only ever sees whole
requests. GET /received lists every request body the app was given, as it got it.
`--plain` serves the same app without the middleware (a backend that knows nothing of
toolref). Run it from a clone of the repository:

    python examples/llm_backend.py --registry http://127.0.0.1:8750 --port 8001
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from toolref import AsyncRegistryClient, ToolRefMiddleware
from toolref.wire.endpoints import CHANNEL

if not __package__:  # run as `python examples/llm_backend.py`: the fake provider is the
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # checkout's test support
from tests.support.fake_provider import Api, Call, FakeProvider, Reply, last_turn


def scripted_model(api: Api, body: dict[str, Any]) -> Reply:
    """`read PATH` or `list PATH` asks for a tool; a tool result is answered with its size;
    anything else is said back."""
    turn = last_turn(api, body)
    if turn.result is not None:
        return Reply(text=f"The tool returned {len(turn.result)} characters.", index=turn.calls)
    words = (turn.user or "").split()
    if len(words) == 2 and words[0] in ("read", "list"):
        name = "read_file" if words[0] == "read" else "list_dir"
        return Reply(call=Call(name, {"path": words[1]}), index=turn.calls)
    return Reply(text=f"You said: {turn.user}", index=turn.calls)


def create_backend(
    registry: AsyncRegistryClient | None,
    delay: float = 0.01,
    record: bool = True,
    channel: bool = False,
) -> Starlette:
    """The backend app; `registry` None: without the middleware. `delay`: seconds between
    streamed events. `app.state.provider.requests`: every request the app was given (none
    kept without `record`: a long run's memory stays flat). `channel`: the middleware serves
    clients' channels (at /v1/channel: the SDK's `AsyncTransport` sends its turns there)."""
    provider = FakeProvider(scripted_model, delay=delay, record=record)

    async def received(request: Request) -> JSONResponse:
        return JSONResponse({"received": [r.body.decode() for r in provider.requests]})

    app = Starlette(routes=[Route("/received", received, methods=["GET"]), Mount("", provider.app)])
    app.state.provider = provider
    if registry is not None:
        path = CHANNEL if channel else None
        app.add_middleware(ToolRefMiddleware, registry=registry, channel_path=path)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--registry", default=os.environ.get("TOOLREF_URL", "http://127.0.0.1:8750")
    )
    parser.add_argument("--api-key", default=os.environ.get("TOOLREF_KEY"))
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--plain", action="store_true", help="without ToolRefMiddleware")
    parser.add_argument(
        "--no-record", action="store_true", help="keep no request bodies (GET /received is empty)"
    )
    parser.add_argument(
        "--channel", action="store_true", help="serve clients' channels (at /v1/channel)"
    )
    args = parser.parse_args()
    import uvicorn

    registry = None if args.plain else AsyncRegistryClient(args.registry, api_key=args.api_key)
    app = create_backend(registry, record=not args.no_record, channel=args.channel)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
