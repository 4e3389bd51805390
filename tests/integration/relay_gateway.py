"""The service's gateway as the relay's tests use it, and providers to put behind it.

`gateway` serves the real service (registry and gateway in one app, on the test engine)
with upstreams served next to it; `Recorded` keeps what arrived on the gateway's wire from
the relay: path, headers, body bytes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Iterable, Sized
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.fake_provider import wire
from tests.support.servers import serve, serve_all
from toolref.asgi.scope import ASGIApp, Message, Receive, Scope, Send
from toolref_server.app import create_app
from toolref_server.settings import Settings

KEY = "tenant-key-never-logged"
MODEL = "scripted-1"
OK = wire.Reply(text="ok")  # what `Scripted` answers, as Anthropic Messages


@dataclass
class Arrival:
    """A request as it reached the gateway: path (query included), headers, body bytes."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""


def wire_bytes(arrival: Arrival) -> int:
    """What the relay counts on its wire for a turn: body and header lines."""
    return len(arrival.body) + header_lines(arrival.headers.items())


def header_lines(pairs: Iterable[tuple[Sized, Sized]]) -> int:
    """The bytes of header lines on the wire (`name: value` and CRLF, each): what the relay
    counts of the agent's request (`request.headers.raw` of the agent's client)."""
    return sum(len(k) + len(v) + 4 for k, v in pairs)


@dataclass
class Recorded:
    """`app`, keeping every `/llm/` request that reached it."""

    app: ASGIApp
    url: str = ""
    arrivals: list[Arrival] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/llm/"):
            await self.app(scope, receive, send)
            return
        query = scope.get("query_string", b"").decode()
        arrival = Arrival(
            scope["method"],
            scope["path"] + (f"?{query}" if query else ""),
            {k.decode().lower(): v.decode() for k, v in scope["headers"]},
        )
        self.arrivals.append(arrival)
        await self.app(scope, _kept(receive, arrival), send)


@asynccontextmanager
async def gateway(
    redis: Redis, providers: dict[str, ASGIApp], *, keys: bool = True, **settings: Any
) -> AsyncIterator[Recorded]:
    """The service with `providers` as its upstreams (by name), one tenant whose key is
    `KEY` (`keys=False`: no API keys, the one local tenant, as `make serve` runs it);
    `settings`: more of the service's settings."""
    names = list(providers)
    async with serve_all(*providers.values()) as urls:
        upstreams = ",".join(f"{n}={u}" for n, u in zip(names, urls, strict=True))
        tenant = f"t={hashlib.sha256(KEY.encode()).hexdigest()}" if keys else ""
        config = Settings(redis_url="unused", upstreams=upstreams, api_keys=tenant, **settings)
        recorded = Recorded(create_app(config, redis=redis))
        async with serve(recorded) as url:
            recorded.url = url
            yield recorded


def _kept(receive: Receive, arrival: Arrival) -> Receive:
    async def wrapped() -> Message:
        message = await receive()
        arrival.body += message.get("body", b"")
        return message

    return wrapped


@dataclass
class Scripted:
    """A provider answering Anthropic Messages and OpenAI Chat Completions with one text
    event stream or JSON answer (`OK`, as the fake provider writes Anthropic's, whatever
    the path); what it received, and switches for the relay's tests that the fake provider
    has not (a stream held or broken after its first event, a 413, `/echo`, `/v1/models`).

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
        return JSONResponse({"data": [{"id": MODEL}]}, headers={"x-provider": "yes"})

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
            return JSONResponse(wire.anthropic_message(OK, MODEL, 1), headers={"x-provider": "yes"})
        return StreamingResponse(self._events(), media_type="text/event-stream")

    async def _events(self) -> AsyncIterator[bytes]:
        first, *rest = wire.anthropic_events(OK, MODEL, 1)
        try:
            yield wire.sse(first[1], first[0])
            if self.die:
                raise RuntimeError("the provider died mid-stream (on purpose)")
            if self.gate is not None:
                await self.gate.wait()
            for event, data in rest:
                yield wire.sse(data, event)
        finally:
            self.ended.set()
