"""Client SDK, chat-backend middleware and registry together, in-process on a real engine.

The manager sends each request as it is until the backend's `ToolRefMiddleware` answers that
it reads edits, then as edits the middleware restores through the registry
(`POST /v1/edits:apply`); protocol-2 requests with `toolRef` markers are still hydrated and
their refs confirmed; the history-ref protocol of 0.2 is refused."""

from __future__ import annotations

import asyncio
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
from toolref.edits.wire import VERSION as EDITS_VERSION
from toolref.sending import pause
from toolref.sending.rewrite import rewrite
from toolref.wire.encoding import dumps_json
from toolref.wire.errors import HistoryRefsRetiredError
from toolref_server.app import create_app
from toolref_server.settings import Settings


@dataclass
class Backend:
    """A chat app that records every conversation it receives and answers with tool output."""

    seen: list[list[dict[str, Any]]] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)  # each body, as received

    def app(self) -> Starlette:
        async def chat(request: Request) -> Response:
            self.raw.append(await request.body())
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
            self.raw.append(await request.body())
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
    # No edit cache: the store decides what is held, so evicting keys is felt.
    service = create_app(Settings(redis_url="unused", edit_cache_bytes=0), redis=redis)
    async with service.router.lifespan_context(service):
        link = Switch(httpx.ASGITransport(app=service))
        registry = AsyncRegistryClient(
            "http://localhost:8750",
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
    """`turns` turns of a chat through `manager`; each checks the app received exactly the
    bytes the client's conversation is (what `httpx` would have sent for `json=`)."""
    history: list[dict[str, Any]] = []
    for turn in range(turns):
        if before is not None:
            await before(turn)
        history.append({"role": "user", "content": f"turn {turn}"})
        body = {"messages": history}
        response = await manager.apost(setup.http, "/chat", json=body)
        assert response.status_code == 200, response.text
        assert setup.backend.raw[-1] == dumps_json(body)
        answer = response.json()
        assert answer["model"] == "scripted"  # the app's own members survive
        assert "toolReferences" not in answer  # an edit's answer is the app's, untouched
        history.extend(answer["messages"])
    return history


async def test_edits_shrink_uploads_and_the_backend_sees_exact_messages(setup: Setup) -> None:
    manager = ToolReferenceManager()
    await converse(setup, manager, 12)
    savings = manager.savings
    assert savings.requests == 12
    assert savings.edits == 11  # the first offered edits; each later one was one
    assert savings.resends == 0
    assert savings.ratio > 3


async def test_evicted_keys_are_resent_transparently(setup: Setup) -> None:
    """Half the keys (recipes' nodes, chunks and pieces) evicted before each turn from the
    third on: an edit whose base or pieces are gone is a 409 the manager resends on by
    itself, and the app still gets every turn exactly (`converse`)."""
    manager = ToolReferenceManager()
    rng = random.Random(7)
    evicted = 0

    async def evict(turn: int) -> None:
        nonlocal evicted
        keys = await setup.redis.keys("tr:*")
        if turn >= 3 and keys:
            chosen = rng.sample(keys, max(1, len(keys) // 2))
            evicted += await setup.redis.delete(*chosen)

    await converse(setup, manager, 10, evict)
    assert evicted > 0
    assert manager.savings.resends >= 3  # evictions were felt ...
    assert manager.savings.edits == 9  # ... and every turn after the first went as an edit


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


async def test_registry_down_keeps_the_chat_going_then_edits_resume(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry unreachable for turns 4 to 7: the middleware cannot apply the first
    edit (415), the manager sends that turn as it is and pauses its edits for a while
    (`toolref.sending.pause`, shortened here): the later outage turns go as they are, one
    request each (but a probe edit once a pause is over). The registry back and the pause
    over, the turns are edits again against the recipe confirmed before the outage."""
    monkeypatch.setattr(pause, "FIRST", 0.2)
    monkeypatch.setattr(pause, "LONGEST", 0.2)
    manager = ToolReferenceManager()
    sent: list[int] = []
    full: list[int] = []

    async def outage(turn: int) -> None:
        setup.registry_link.down = 4 <= turn < 8
        if turn == 8:
            await asyncio.sleep(0.25)  # the pause is over
        sent.append(manager.savings.sent_bytes)
        full.append(manager.savings.full_bytes)

    await converse(setup, manager, 12, outage)
    sent.append(manager.savings.sent_bytes)
    full.append(manager.savings.full_bytes)
    cost = [sent[n + 1] - sent[n] for n in range(12)]
    size = [full[n + 1] - full[n] for n in range(12)]
    assert all(cost[n] * 3 < size[n] for n in (2, 3)), (cost, size)  # edits before
    assert cost[4] > size[4], (cost, size)  # an edit refused (415), then the turn whole
    assert cost[5:8] == size[5:8], (cost, size)  # as they are, one request each
    assert all(cost[n] * 3 < size[n] for n in range(8, 12)), (cost, size)  # edits again
    assert manager.savings.resends == 0  # no miss: the recipes outlived the outage


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
    """A protocol-2 request (a client of `toolRef` markers, not the manager) to a streamed
    answer: the refs of the invocations it sent in full come in `Toolref-References`, the
    stream untouched; sent again with those refs as markers, the app gets the conversation
    whole and the answer names no ref again."""
    history = await converse(setup, ToolReferenceManager(), 2)
    protocol_2 = {"Toolref-Protocol": "2"}
    response = await setup.http.post("/stream", json={"messages": history}, headers=protocol_2)
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.text == "data: hello\n\n"
    references = json.loads(response.headers["toolref-references"])
    assert set(references) == {"call_1", "call_2"}  # both turns' invocations
    marked = rewrite(history, formats.get("openai-chat"), set(references.values()))
    assert len(marked.used) == 2
    again = await setup.http.post("/stream", json={"messages": marked.messages}, headers=protocol_2)
    assert again.text == "data: hello\n\n"
    assert "toolref-references" not in again.headers
    assert setup.backend.seen[-1] == history


async def test_a_backend_without_the_middleware_gets_requests_as_they_are(setup: Setup) -> None:
    """No answer says `Toolref-Edits`: every request goes as the app made it (with an offer
    the app ignores), never an edit."""
    manager = ToolReferenceManager()
    history: list[dict[str, Any]] = []
    for turn in range(4):
        history.append({"role": "user", "content": f"turn {turn}"})
        body = {"messages": history}
        response = await manager.apost(setup.plain, "/chat", json=body)
        assert response.request.headers["toolref-edits"] == str(EDITS_VERSION)
        assert response.request.headers["content-type"] == "application/json"
        assert setup.backend.raw[-1] == dumps_json(body)
        history.extend(response.json()["messages"])
    assert manager.savings.edits == 0
    assert manager.savings.sent_bytes == manager.savings.full_bytes
    assert setup.registry_link.calls == 0


@pytest.mark.parametrize(
    ("headers", "member"),
    [
        ({"Toolref-History": "?1"}, {}),
        ({"Toolref-History": "th_" + "a" * 26}, {}),
        ({"Toolref-Dictionary": "th_" + "a" * 26}, {}),
        ({"Toolref-Checkpoint": "?1"}, {}),
        ({}, {"historyRef": "th_" + "a" * 26}),
    ],
    ids=["keep", "continue", "dictionary", "checkpoint", "body-member"],
)
async def test_a_request_of_the_retired_history_refs_is_refused(
    setup: Setup, headers: dict[str, str], member: dict[str, str]
) -> None:
    """A 0.2 client's history-ref request: 400 `history-refs-retired` naming the upgrade;
    the app never sees it and the registry keeps nothing."""
    body = {**member, "messages": [{"role": "user", "content": "hello"}]}
    response = await setup.http.post(
        "/chat", json=body, headers={"Toolref-Protocol": "2", **headers}
    )
    assert response.status_code == 400, response.text
    problem = response.json()
    assert problem["type"] == HistoryRefsRetiredError.problem_type()
    assert "0.3" in problem["detail"]
    assert "upgrade" in problem["detail"]
    assert setup.backend.seen == []
    assert await setup.redis.keys("tr:*") == []
