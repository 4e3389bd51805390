"""`Toolref-Dictionary` end to end, in-process on a real engine: the manager compresses a
body against its history's dictionary followed by the body the backend kept from the turn
that history was confirmed for. What travels again every turn (`tools`, a system prompt)
and a conversation resent whole because its last message changed (Claude Code moves its
`cache_control` mark every turn) then cost a few hundred bytes, and the app still gets the
client's exact body."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from toolref import AsyncRegistryClient, ToolReferenceManager, ToolRefMiddleware
from toolref.wire import compression
from toolref.wire.headers import CHECKPOINT_HEADER, DICTIONARY_HEADER, HISTORY_HEADER
from toolref_server.app import create_app
from toolref_server.settings import Settings

from ..conftest import key_names


class Recording:
    """A chat app that keeps every body it receives, as text."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def app(self) -> Starlette:
        async def chat(request: Request) -> Response:
            self.bodies.append(await request.body())
            return JSONResponse({"ok": True})

        return Starlette(routes=[Route("/v1/messages", chat, methods=["POST"])])


@pytest.fixture
async def backend(redis: Redis) -> AsyncIterator[tuple[Recording, list[httpx.AsyncClient]]]:
    """A recording app behind `ToolRefMiddleware` on the real registry, and one client per
    replica asked for (each replica keeps its own bodies)."""
    service = create_app(Settings(redis_url="unused"), redis=redis)
    recording = Recording()
    async with service.router.lifespan_context(service):
        registry = AsyncRegistryClient(
            "http://registry", transport=httpx.ASGITransport(app=service), retries=0
        )
        clients = [
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=ToolRefMiddleware(recording.app(), registry)),
                base_url="http://b",
            )
            for _ in range(2)
        ]
        yield recording, clients
        for client in clients:
            await client.aclose()


def tools(count: int = 40) -> list[dict[str, Any]]:
    """Tool definitions the size an agent sends (about 30 KB), the same every turn."""
    rng = random.Random(7)
    words = ["path", "pattern", "offset", "limit", "command", "timeout", "glob", "content"]
    return [
        {
            "name": f"tool_{i}",
            "description": " ".join(rng.choice(words) for _ in range(80)),
            "input_schema": {
                "type": "object",
                "properties": {w: {"type": "string", "description": w * 3} for w in words},
            },
        }
        for i in range(count)
    ]


def move_mark(messages: list[dict[str, Any]]) -> None:
    """What Claude Code does before each request: `cache_control` on the last block of the
    newest user message only."""
    for message in messages:
        if message["role"] == "user" and isinstance(message["content"], list):
            for block in message["content"]:
                block.pop("cache_control", None)
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}


def agent_turn(messages: list[dict[str, Any]], n: int) -> None:
    """The model called a tool; its result goes back in the next user message."""
    messages.append(
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": f"reading file {n}"},
                {"type": "tool_use", "id": f"toolu_{n:04d}", "name": "Read", "input": {"n": n}},
            ],
        }
    )
    output = "".join(f"{n:04d}:{i:03d} def f_{i}(x): return x * {i}\n" for i in range(60))
    messages.append(
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{n:04d}", "content": output}
            ],
        }
    )


async def session(
    clients: list[httpx.AsyncClient],
    recording: Recording,
    manager: ToolReferenceManager,
    *,
    turns: int,
    mark: bool,
    messages: list[dict[str, Any]] | None = None,
) -> list[httpx.Request]:
    """An agent's session (or more turns of `messages`); every body the app gets must be
    the agent's, member for member."""
    if messages is None:
        messages = [{"role": "user", "content": [{"type": "text", "text": "fix the tests"}]}]
    sent: list[httpx.Request] = []
    done = sum(m["role"] == "assistant" for m in messages)
    for n in range(done, done + turns):
        if mark:
            move_mark(messages)
        body = {"model": "m", "system": "You are an agent. " * 200, "messages": messages}
        body["tools"] = tools()
        client = clients[n % len(clients)]
        response = await manager.apost(client, "/v1/messages", json=body)
        assert response.status_code == 200, response.text
        sent.append(response.request)
        got = json.loads(recording.bodies[-1])
        assert list(got) == list(body)
        assert json.dumps(got) == json.dumps(body)
        agent_turn(messages, n)
    return sent


async def test_tools_and_system_travel_again_as_a_few_bytes(
    backend: tuple[Recording, list[httpx.AsyncClient]],
) -> None:
    recording, clients = backend
    sizes = {}
    for kept in (16 << 20, 0):
        manager = ToolReferenceManager(compress=True, max_prior_bytes=kept)
        sent = await session(clients[:1], recording, manager, turns=10, mark=False)
        assert all(r.headers[HISTORY_HEADER].startswith("th_") for r in sent[1:])
        named = [DICTIONARY_HEADER in r.headers for r in sent[1:]]
        assert all(named) if kept else not any(named)
        sizes[kept] = [len(r.content) for r in sent[1:]]
    # The 35 KB of tools and system cost a few KB plain zstd each turn; against the last
    # body, next to nothing: only the turn's new messages.
    assert max(sizes[16 << 20]) < 1000
    assert sum(sizes[0]) > 5 * sum(sizes[16 << 20])


async def test_a_moving_cache_mark_continues_a_checkpoint(
    backend: tuple[Recording, list[httpx.AsyncClient]], redis: Redis
) -> None:
    """No confirmed history stays a prefix: the last message of each changes next turn.
    A turn goes whole, against the last body, and shows the manager the moving mark; from
    then on each turn asks the server to keep its checkpoint too (the prefix before the
    last message with no call waiting), and the next turn continues that: the tail path,
    which reads no stored message (tested by deleting them all)."""
    recording, clients = backend
    manager = ToolReferenceManager(compress=True)
    messages = [{"role": "user", "content": [{"type": "text", "text": "fix the tests"}]}]
    sent = await session(clients[:1], recording, manager, turns=8, mark=True, messages=messages)
    assert manager.checkpoints
    # The first turn's mark sat on the first message; a conversation is known by its
    # opening without cache marks, so the second turn is the one that shows the moving mark
    # (it goes whole, against the first turn's body), and the third continues a checkpoint.
    continued = [r.headers.get(HISTORY_HEADER, "").startswith("th_") for r in sent]
    assert continued == [False, False, *[True] * 6]
    assert all(CHECKPOINT_HEADER in r.headers for r in sent[1:])
    assert DICTIONARY_HEADER in sent[1].headers
    stored = [key for key in await key_names(redis) if ":m:" in key]
    await redis.delete(*stored)
    more = await session(clients[:1], recording, manager, turns=4, mark=True, messages=messages)
    assert manager.savings.fallbacks == 0
    assert all(r.headers[HISTORY_HEADER].startswith("th_") for r in more)
    assert max(len(r.content) for r in [*sent[1:], *more]) < 1200
    assert manager.savings.ratio > 20
    # The backend holds this conversation's last head and checkpoint, not one per turn:
    # continuing either lets both go (plus, at most, the two whole turns before).
    transport = clients[0]._transport
    assert isinstance(transport, httpx.ASGITransport)
    assert isinstance(transport.app, ToolRefMiddleware)
    assert len(transport.app.hydrator.memory) <= 4


async def test_a_replica_without_the_body_is_asked_again_without_it(
    backend: tuple[Recording, list[httpx.AsyncClient]],
) -> None:
    """Alternate replicas: each refuses the other's kept body (400 dictionary-mismatch);
    the manager resends without it, pausing longer after each refusal in a row. Every
    body still reaches the app exactly (`session` checks)."""
    recording, clients = backend
    manager = ToolReferenceManager(compress=True)
    await session(clients, recording, manager, turns=16, mark=True)
    assert 1 <= manager.savings.fallbacks <= 4
    assert manager.prior_refusals >= 1


async def test_a_body_named_wrongly_is_refused_and_changes_nothing(
    backend: tuple[Recording, list[httpx.AsyncClient]],
) -> None:
    """`Toolref-Dictionary` naming no history, or one this replica holds no body for, or a
    frame that does not match the body it holds: a clear 400, and the app sees nothing."""
    recording, clients = backend
    manager = ToolReferenceManager(compress=True)
    await session(clients[:1], recording, manager, turns=2, mark=True)
    held, prior = list(manager.priors.items())[-1]
    seen = len(recording.bodies)
    body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
    cases = {
        "tr_" + "a" * 26: ("invalid-history-header", "is not a history ref"),
        "th_" + "a" * 26: ("dictionary-mismatch", "does not hold"),
        held: ("dictionary-mismatch", "does not inflate"),
    }
    for name, (kind, says) in cases.items():
        frame = compression.compress(body, b"another body " + prior.body[:100], 6)
        response = await clients[0].post(
            "/v1/messages",
            content=frame,
            headers={
                "Toolref-Protocol": "2",
                "Content-Type": "application/json",
                "Content-Encoding": "zstd",
                HISTORY_HEADER: "?1",
                DICTIONARY_HEADER: name,
            },
        )
        assert response.status_code == 400, name
        problem = response.json()
        assert problem["type"].endswith(kind), problem
        assert says in problem["detail"], problem
    assert len(recording.bodies) == seen


async def test_checkpoints_need_no_compression(
    backend: tuple[Recording, list[httpx.AsyncClient]],
) -> None:
    """Without zstd (so without the kept bodies) the manager still sees the moving mark
    from the histories it was confirmed, and continues checkpoints."""
    recording, clients = backend
    manager = ToolReferenceManager(compress=False)
    sent = await session(clients[:1], recording, manager, turns=8, mark=True)
    assert manager.checkpoints
    assert not manager.priors
    continued = [json.loads(r.content).get("historyRef") is not None for r in sent]
    assert continued == [False, False, *[True] * 6]
