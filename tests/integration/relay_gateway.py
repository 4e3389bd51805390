"""A stand-in for the service's gateway, until it lands, and providers to put behind it.

`StandInGateway` speaks the gateway's contract: `/llm/{name}/{path}` goes through
`ToolRefMiddleware` (hydrating refs and history refs through the real registry) to the
provider app called `name`, with `/{path}`; every other path is the registry service
itself, as on the real service's one base URL. It keeps what arrived on its wire.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from toolref import AsyncRegistryClient, ToolRefMiddleware
from toolref.asgi import ASGIApp, Message, Receive, Scope, Send


@dataclass
class Arrival:
    """A request as it reached the gateway: path (query included), headers, body bytes."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""


@dataclass
class StandInGateway:
    service: ASGIApp  # the registry app, its lifespan run by the caller
    providers: dict[str, ASGIApp]
    max_body_bytes: int = 32 * 2**20
    arrivals: list[Arrival] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.registry = AsyncRegistryClient(
            "http://registry.test", transport=httpx.ASGITransport(app=self.service), retries=0
        )
        self.hydrating = {
            name: ToolRefMiddleware(app, registry=self.registry, max_body_bytes=self.max_body_bytes)
            for name, app in self.providers.items()
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        path: str = scope["path"]
        if scope["type"] != "http" or not path.startswith("/llm/"):
            await self.service(scope, receive, send)
            return
        _, _, name, rest = path.split("/", 3)
        query = scope.get("query_string", b"").decode()
        arrival = Arrival(
            scope["method"],
            path + (f"?{query}" if query else ""),
            {k.decode().lower(): v.decode() for k, v in scope["headers"]},
        )
        self.arrivals.append(arrival)
        inner = {**scope, "path": "/" + rest, "raw_path": ("/" + rest).encode()}
        await self.hydrating[name](inner, _kept(receive, arrival), send)


def _kept(receive: Receive, arrival: Arrival) -> Receive:
    async def wrapped() -> Message:
        message = await receive()
        arrival.body += message.get("body", b"")
        return message

    return wrapped


@dataclass
class Scripted:
    """A provider answering Anthropic Messages and OpenAI Chat Completions with one text
    event stream or JSON answer; what it received, and switches for the tests.

    gate: set, the stream goes on past its first event (None: no waiting).
    limit: bodies larger than this are refused with 413 in Anthropic's shape.
    die: the stream breaks off after its first event.
    """

    gate: asyncio.Event | None = None
    limit: int | None = None
    die: bool = False
    received: list[bytes] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    ended: asyncio.Event = field(default_factory=asyncio.Event)  # a stream's generator ended

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/messages", self._answer, methods=["POST"]),
                Route("/v1/chat/completions", self._answer, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/echo", self._echo, methods=["POST", "PUT"]),
            ]
        )

    async def _models(self, request: Request) -> Response:
        self.headers.append(dict(request.headers))
        return JSONResponse({"data": [{"id": "scripted-1"}]}, headers={"x-provider": "yes"})

    async def _echo(self, request: Request) -> Response:
        self.headers.append(dict(request.headers))
        body = await request.body()
        self.received.append(body)
        return Response(body, media_type="application/octet-stream")

    async def _answer(self, request: Request) -> Response:
        body = await request.body()
        self.received.append(body)
        self.headers.append(dict(request.headers))
        if self.limit is not None and len(body) > self.limit:
            error = {"type": "error", "error": {"type": "request_too_large", "message": "big"}}
            return JSONResponse(error, status_code=413)
        value = json.loads(body)
        if not value.get("stream"):
            return JSONResponse(_message("ok"), headers={"x-provider": "yes"})
        return StreamingResponse(self._events(), media_type="text/event-stream")

    async def _events(self) -> AsyncIterator[bytes]:
        try:
            yield _sse("message_start", {"type": "message_start", "message": _message("")})
            if self.die:
                raise RuntimeError("the provider died mid-stream (on purpose)")
            if self.gate is not None:
                await self.gate.wait()
            yield _sse(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": _text("")},
            )
            delta = {"type": "text_delta", "text": "ok"}
            yield _sse(
                "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
            )
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
            yield _sse(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 1},
                },
            )
            yield _sse("message_stop", {"type": "message_stop"})
        finally:
            self.ended.set()


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _message(text: str) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "scripted-1",
        "content": [_text(text)] if text else [],
        "stop_reason": "end_turn" if text else None,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
