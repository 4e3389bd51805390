"""Client SDK, chat-backend middleware and registry together, in-process on a real engine."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from toolref import (
    AsyncRegistryClient,
    CircuitBreaker,
    ToolReferenceManager,
    ToolRefMiddleware,
    formats,
)
from toolref.sending.rewrite import ref_of
from toolref_server.app import create_app
from toolref_server.settings import Settings


@dataclass
class Backend:
    """A chat app that records every conversation it receives and answers with tool output."""

    seen: list[list[dict[str, Any]]] = field(default_factory=list)

    def app(self) -> Starlette:
        async def chat(request: Request) -> Response:
            body = await request.json()
            self.seen.append(body["messages"])
            n = sum(m.get("role") == "user" for m in body["messages"])
            reply = [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call_{n}",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": json.dumps({"n": n})},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": f"call_{n}", "content": f"line {n}\n" * 400},
                {"role": "assistant", "content": f"read {n}"},
            ]
            return JSONResponse({"messages": reply, "model": "scripted"})

        async def stream(request: Request) -> Response:
            body = await request.json()
            self.seen.append(body["messages"])

            async def events() -> AsyncIterator[bytes]:
                yield b"data: hello\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")

        return Starlette(
            routes=[
                Route("/chat", chat, methods=["POST"]),
                Route("/stream", stream, methods=["POST"]),
            ]
        )


class Switch(httpx.AsyncBaseTransport):
    """A transport to the registry that can be cut, as a stopped service would be."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner, self.down, self.calls = inner, False, 0
        self.bodies: list[bytes] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        self.bodies.append(await request.aread())
        if self.down:
            raise httpx.ConnectError("registry stopped", request=request)
        return await self.inner.handle_async_request(request)


@dataclass
class Setup:
    backend: Backend
    http: httpx.AsyncClient
    registry_link: Switch
    redis: Redis
    plain: httpx.AsyncClient  # the same app without the middleware


@pytest.fixture
async def setup(redis: Redis) -> AsyncIterator[Setup]:
    service = create_app(Settings(redis_url="unused"), redis=redis)
    async with service.router.lifespan_context(service):
        link = Switch(httpx.ASGITransport(app=service))
        registry = AsyncRegistryClient(
            "http://registry",
            transport=link,
            retries=0,
            breaker=CircuitBreaker(failure_threshold=2, reset_timeout=0),
        )
        backend = Backend()
        wrapped = ToolRefMiddleware(backend.app(), registry)
        async with (
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=wrapped), base_url="http://b"
            ) as http,
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=backend.app()), base_url="http://b"
            ) as plain,
        ):
            yield Setup(backend, http, link, redis, plain)


Turn = Callable[[int], Awaitable[None]]


async def converse(
    setup: Setup, manager: ToolReferenceManager, turns: int, before: Turn | None = None
) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = []
    for turn in range(turns):
        if before is not None:
            await before(turn)
        history.append({"role": "user", "content": f"turn {turn}"})
        response = await manager.apost(setup.http, "/chat", json={"messages": history})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["model"] == "scripted"  # the app's own members survive
        history.extend(body["messages"])
        # What the backend saw is exactly what the client holds.
        assert setup.backend.seen[-1] == history[: len(setup.backend.seen[-1])]
    return history


async def test_refs_shrink_uploads_and_the_backend_sees_full_messages(setup: Setup) -> None:
    manager = ToolReferenceManager()
    await converse(setup, manager, 12)
    assert manager.refs_accepted
    assert manager.savings.refs_sent > 0
    assert manager.savings.fallbacks == 0
    assert manager.savings.ratio > 3


@pytest.mark.parametrize("history_refs", [False, True])
async def test_evicted_refs_are_resent_transparently(setup: Setup, history_refs: bool) -> None:
    """Half the keys evicted before each turn from the third on. Without history refs every
    turn names its payloads by ref, so evictions come back as 409s, answered by resending;
    with them a turn sends only its new messages, and an eviction costs a resend only where
    a turn needs what was evicted. Each turn checks the backend saw exactly the client's
    conversation."""
    manager = ToolReferenceManager(history_refs=history_refs)
    rng = random.Random(7)

    async def evict(turn: int) -> None:
        keys = await setup.redis.keys("tr:*")
        if turn >= 3 and keys:
            await setup.redis.delete(*rng.sample(keys, max(1, len(keys) // 2)))

    await converse(setup, manager, 10, evict)
    if not history_refs:
        assert manager.savings.fallbacks >= 5
    assert manager.savings.refs_sent > 0


async def test_an_unknown_ref_reaches_the_client_as_409(setup: Setup) -> None:
    ref = "tr_" + "a" * 26
    messages = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "x", "toolRef": ref}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "toolRef": ref},
    ]
    response = await setup.http.post(
        "/chat", json={"messages": messages}, headers={"Toolref-Protocol": "2"}
    )
    assert response.status_code == 409
    assert response.json()["missingRefs"] == [ref]
    assert setup.backend.seen == []  # the app never saw markers


async def test_registry_down_keeps_the_chat_going_then_refs_resume(setup: Setup) -> None:
    manager = ToolReferenceManager()
    states: list[tuple[bool, int]] = []

    async def outage(turn: int) -> None:
        setup.registry_link.down = 4 <= turn < 8
        states.append((manager.refs_accepted, manager.savings.refs_sent))

    await converse(setup, manager, 12, outage)
    # Refs were in use before the outage, full payloads during it, refs again after it.
    assert states[4][0] is True
    assert all(not accepted for accepted, _ in states[6:9])
    assert manager.refs_accepted
    assert manager.savings.refs_sent > states[8][1]


async def test_protocol_1_answers_are_byte_identical_to_the_bare_app(setup: Setup) -> None:
    body = {"messages": [{"role": "user", "content": "hello"}]}
    for headers in ({}, {"Toolref-Protocol": "1"}, {"Toolref-Protocol": "nonsense"}):
        with_mw = await setup.http.post("/chat", json=body, headers=headers)
        bare = await setup.plain.post("/chat", json=body, headers=headers)
        assert with_mw.status_code == bare.status_code
        assert with_mw.content == bare.content
        assert with_mw.headers.raw == bare.headers.raw
    assert setup.registry_link.calls == 0  # protocol 1 never touches the registry


async def test_streamed_answers_confirm_refs_in_a_header(setup: Setup) -> None:
    manager = ToolReferenceManager()
    history = await converse(setup, manager, 2)
    confirmed = set(manager.confirmed)
    fresh = ToolReferenceManager(history_refs=False)
    response = await fresh.apost(setup.http, "/stream", json={"messages": history})
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.text == "data: hello\n\n"
    references = json.loads(response.headers["toolref-references"])
    # Both turns' invocations: the first confirmed before, the second registered now.
    assert set(references) == {"call_1", "call_2"}
    assert confirmed < set(references.values())
    assert set(fresh.confirmed) == set(references.values())
    # Sent again, as markers now: the client knows those refs, so none is repeated.
    again = await fresh.apost(setup.http, "/stream", json={"messages": history})
    assert fresh.savings.refs_sent == 2
    assert "toolref-references" not in again.headers


async def test_a_confirmed_history_needs_no_refs_in_the_answer(setup: Setup) -> None:
    manager = ToolReferenceManager()
    history = await converse(setup, manager, 2)
    fresh = ToolReferenceManager()
    response = await fresh.apost(setup.http, "/stream", json={"messages": history})
    assert response.headers["toolref-history"] in fresh.histories
    assert "toolref-references" not in response.headers
    # The confirmed head covers every invocation: the client confirms their refs itself.
    found = formats.scan(history, formats.get("openai-chat"))
    assert len(found.complete) == 2
    assert set(fresh.confirmed) == {ref_of(pair) for pair in found.complete}


async def test_optimistic_mode_sends_refs_without_waiting_for_confirmation(setup: Setup) -> None:
    cautious, optimistic = ToolReferenceManager(), ToolReferenceManager(optimistic=True)
    await converse(setup, cautious, 4)
    setup.backend.seen.clear()
    await converse(setup, optimistic, 4)
    assert optimistic.savings.refs_sent >= cautious.savings.refs_sent


async def test_a_backend_without_the_middleware_gets_full_payloads(setup: Setup) -> None:
    manager = ToolReferenceManager()
    history: list[dict[str, Any]] = []
    for turn in range(4):
        history.append({"role": "user", "content": f"turn {turn}"})
        response = await manager.apost(setup.plain, "/chat", json={"messages": history})
        history.extend(response.json()["messages"])
    assert not manager.refs_accepted
    assert manager.savings.refs_sent == 0
    assert "toolRef" not in json.dumps(history)
