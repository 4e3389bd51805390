"""The middleware never fails silently: a registry that refuses its key or cannot be reached
is logged once (at start-up, or on the first request without a lifespan) and every request
that passes by it is counted; gzip bodies are read as the registry reads them; a streamed
JSON answer is not held back to add refs."""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from toolref import AsyncRegistryClient, CircuitBreaker, ToolReferenceManager, ToolRefMiddleware
from toolref.receiving.hydrator import fallbacks
from toolref.wire.encoding import dumps_json
from toolref_server.app import create_app
from toolref_server.http.auth import hash_key
from toolref_server.settings import Settings

PROTOCOL_2 = {"Toolref-Protocol": "2"}
MESSAGES = [
    {"role": "user", "content": "list"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "a.py\nb.py\n" * 50},
]


def backend(seen: list[bytes]) -> Starlette:
    async def chat(request: Request) -> Response:
        seen.append(await request.body())
        return JSONResponse({"reply": "ok"})

    async def stream(request: Request) -> Response:
        seen.append(await request.body())

        async def chunks() -> AsyncIterator[bytes]:
            yield b'{"reply":'
            yield b'"ok"}'

        return StreamingResponse(chunks(), media_type="application/json")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield

    return Starlette(
        routes=[Route("/chat", chat, methods=["POST"]), Route("/stream", stream, methods=["POST"])],
        lifespan=lifespan,
    )


@asynccontextmanager
async def registry_app(redis: Redis, **settings: Any) -> AsyncIterator[httpx.ASGITransport]:
    service = create_app(Settings(redis_url="unused", **settings), redis=redis)
    async with service.router.lifespan_context(service):
        yield httpx.ASGITransport(app=service)


def client(transport: httpx.AsyncBaseTransport, key: str | None) -> AsyncRegistryClient:
    return AsyncRegistryClient(
        "http://localhost:8750",
        transport=transport,
        api_key=key,
        retries=0,
        breaker=CircuitBreaker(failure_threshold=100),
    )


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the middleware logged at WARNING or above (the registry's own start-up warnings,
    such as an open metrics endpoint, are the registry's)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith("toolref.receiving")
    ]


async def test_a_wrong_key_is_logged_once_at_start_up_and_each_fallback_counted(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    keys = f"acme={hash_key('right-key')}"
    async with registry_app(redis, api_keys=keys) as transport:
        seen: list[bytes] = []
        app = ToolRefMiddleware(backend(seen), client(transport, "wrong-key"))
        before = fallbacks.counts["unauthorized"]
        with caplog.at_level(logging.DEBUG, logger="toolref"):
            # The server's lifespan goes through the middleware: run it as a server would.
            await run_lifespan(app)
            startup = errors(caplog)
            assert len(startup) == 1
            assert "refused this API key" in startup[0]
            assert app.registry_problem is not None
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://b"
            ) as http:
                for _ in range(3):
                    response = await http.post(
                        "/chat", json={"messages": MESSAGES}, headers=PROTOCOL_2
                    )
                    assert response.status_code == 200
                    assert response.headers["toolref-protocol"] == "1"  # send full payloads
        assert errors(caplog) == startup  # logged once, not per request
        assert fallbacks.counts["unauthorized"] - before == 3
        assert all(json.loads(body)["messages"] == MESSAGES for body in seen)


async def run_lifespan(app: ToolRefMiddleware) -> None:
    """Startup and shutdown through the middleware, as uvicorn sends them."""
    events = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return events.pop(0)

    async def send(message: Any) -> None:
        sent.append(message)

    await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


async def test_without_a_lifespan_the_first_request_checks_the_registry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    seen: list[bytes] = []
    app = ToolRefMiddleware(backend(seen), client(httpx.MockTransport(refuse), None))
    before = fallbacks.counts["unavailable"]
    with caplog.at_level(logging.DEBUG, logger="toolref"):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://b"
        ) as http:
            for _ in range(2):
                response = await http.post("/chat", json={"messages": MESSAGES}, headers=PROTOCOL_2)
                assert response.status_code == 200
                assert response.headers["toolref-protocol"] == "1"
    logged = errors(caplog)
    assert len(logged) == 1
    assert "registry check failed" in logged[0]
    assert fallbacks.counts["unavailable"] - before == 2


async def test_gzip_bodies_are_read_as_the_registry_reads_them(redis: Redis) -> None:
    async with registry_app(redis) as transport:
        seen: list[bytes] = []
        app = ToolRefMiddleware(backend(seen), client(transport, None))
        body = json.dumps({"messages": MESSAGES}).encode()
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://b"
        ) as http:
            response = await http.post(
                "/chat",
                content=gzip.compress(body),
                headers={
                    **PROTOCOL_2,
                    "Content-Type": "application/json",
                    "Content-Encoding": "gzip",
                },
            )
            assert response.status_code == 200
            assert response.headers["toolref-protocol"] == "2"
            # As written, up to the whitespace between messages (each message is verbatim).
            assert json.loads(seen[0]) == json.loads(body)
            assert all(json.dumps(m).encode() in seen[0] for m in MESSAGES)
            bomb = gzip.compress(b" " * (2 * 2**20))
            app.hydrator.max_inflated_bytes = 2**20
            refused = await http.post(
                "/chat",
                content=bomb,
                headers={
                    **PROTOCOL_2,
                    "Content-Type": "application/json",
                    "Content-Encoding": "gzip",
                },
            )
            assert refused.status_code == 413
            assert refused.json()["type"].endswith("decompressed-too-large")


async def test_a_streamed_json_answer_is_not_held_to_add_refs(redis: Redis) -> None:
    async with registry_app(redis) as transport:
        seen: list[bytes] = []
        app = ToolRefMiddleware(backend(seen), client(transport, None))
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://b"
        ) as http:
            body = {"messages": MESSAGES}
            whole = await http.post("/chat", json=body, headers=PROTOCOL_2)
            added = whole.json()["toolReferences"]
            assert set(added) == {"c1"}  # one piece: added to it
            assert "toolref-references" not in whole.headers
            streamed = await http.post("/stream", json=body, headers=PROTOCOL_2)
            assert streamed.content == b'{"reply":"ok"}'  # as the app wrote it
            assert json.loads(streamed.headers["toolref-references"]) == added


async def test_edits_to_a_backend_whose_registry_refuses_its_key_go_as_they_are(
    redis: Redis,
) -> None:
    """The registry refuses the middleware's key: the middleware cannot apply an edit, so it
    answers 415 and the manager sends the request as it is; the app gets every turn."""
    keys = f"acme={hash_key('right-key')}"
    async with registry_app(redis, api_keys=keys) as transport:
        seen: list[bytes] = []
        app = ToolRefMiddleware(backend(seen), client(transport, "wrong-key"))
        manager = ToolReferenceManager()
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://b"
        ) as http:
            bodies = [{"messages": MESSAGES[:n]} for n in (1, 2, 3)]
            for body in bodies:
                response = await manager.apost(http, "/chat", json=body)
                assert response.status_code == 200, response.text
        assert seen == [dumps_json(body) for body in bodies]


@pytest.mark.parametrize("key", ["messages", "input"])
async def test_the_whitespace_between_messages_reaches_the_app_as_sent(
    redis: Redis, key: str
) -> None:
    """Found in review: with its default messages keys (more than one), the middleware
    joined the hydrated messages with "," and dropped the whitespace around them, and with
    one key it repeated the first separator between every two: a Python client's `, ` (or
    any pretty-printed body) reached the app changed. Each separator is the client's now."""
    texts = [json.dumps(m) for m in MESSAGES]
    listed = f"[ {texts[0]},\n  {texts[1]} ,{texts[2]}\n]"
    body = f'{{"model": "m", "{key}": {listed}}}'.encode()
    async with registry_app(redis) as transport:
        seen: list[bytes] = []
        app = ToolRefMiddleware(backend(seen), client(transport, None))
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://b"
        ) as http:
            response = await http.post(
                "/chat", content=body, headers={**PROTOCOL_2, "Content-Type": "application/json"}
            )
    assert response.status_code == 200
    assert response.headers["toolref-protocol"] == "2"
    assert seen == [body]
