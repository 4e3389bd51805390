"""Exactness: a backend behind `ToolRefMiddleware` receives each request body exactly as the
client wrote it, on every path: as it is, as an edit (size-guarded or not), markers, and
after every fallback (recipes or pieces evicted, the registry down).

Arbitrary conversations of all six formats (the strategies of the format tests: unknown
members at every level in random order, floats such as `1.0`, `-0.0` and `1e-07`, big
integers, astral characters) go through a `ToolReferenceManager`, the real middleware and the
real registry on the real engine, turn by turn. The app records the bytes it receives: an
edit restores the client's bytes, so every body is checked byte for byte.

Markers (a protocol-2 client's `toolRef`s, not the manager's) have one documented exception
(docs/edits.md, "Exactness"): JSON-equal payloads of one invocation spelled with their
members in another order share one ref, and a marker is filled with the spelling registered
first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from toolref import AsyncRegistryClient, CircuitBreaker, ToolReferenceManager, ToolRefMiddleware
from toolref.edits.wire import MEDIA_TYPE
from toolref.sending import pause
from toolref.wire.encoding import dumps_json
from toolref.wire.errors import HistoryRefsRetiredError
from toolref_server.app import create_app
from toolref_server.settings import Settings

from ..conftest import all_keys
from ..unit.format_strategies import CONVERSATIONS
from .test_chat_flow import Switch

# "mark-last": the client changes its last message, as Claude Code moves its cache mark: the
# edit replaces a message of its base instead of appending.
FAULTS = ("none", "none", "evict-recipes", "evict-pieces", "registry-down", "mark-last")
EVICTED = {"evict-recipes": ("b", "k"), "evict-pieces": ("p",)}  # storage.keys' kinds


@dataclass
class Chain:
    redis: Redis
    http: httpx.AsyncClient
    link: Switch
    received: list[bytes] = field(default_factory=list)


def recorder(received: list[bytes]) -> Starlette:
    async def chat(request: Request) -> Response:
        received.append(await request.body())
        return JSONResponse({"ok": True})

    return Starlette(routes=[Route("/chat", chat, methods=["POST"])])


@pytest.fixture
async def chain(redis: Redis, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Chain]:
    # A 415 makes the client pause its edits for a while: not here, where every example
    # after a "registry-down" one would go without edits.
    monkeypatch.setattr(pause, "FIRST", 0.0)
    monkeypatch.setattr(pause, "LONGEST", 0.0)
    # No edit cache: the store decides what is held, so evicting keys is felt.
    service = create_app(Settings(redis_url="unused", edit_cache_bytes=0), redis=redis)
    async with service.router.lifespan_context(service):
        link = Switch(httpx.ASGITransport(app=service))
        registry = AsyncRegistryClient(
            "http://localhost:8750",
            transport=link,
            retries=0,
            breaker=CircuitBreaker(failure_threshold=1, reset_timeout=0),
        )
        received: list[bytes] = []
        app = ToolRefMiddleware(recorder(received), registry)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://backend"
        ) as http:
            yield Chain(redis, http, link, received)


async def evict(redis: Redis, kinds: tuple[str, ...]) -> None:
    """Delete every key of these kinds (`b` recipe nodes, `k` their chunks, `p` pieces), as
    eviction would."""
    for key in await all_keys(redis):
        name = key.decode() if isinstance(key, bytes) else key
        if name.split(":")[2] in kinds:
            await redis.delete(name)


TURNS = st.lists(st.integers(min_value=1, max_value=60), min_size=1, max_size=3, unique=True)
NUMBERS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1.0, -0.0, 1e-07, 1e16, 123456789012345680000.0, 5e-324]),
)


@pytest.mark.parametrize("name", list(CONVERSATIONS))
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
async def test_the_backend_receives_every_body_as_the_client_wrote_it(
    chain: Chain, name: str, data: st.DataObject
) -> None:
    await chain.redis.flushall()
    chain.link.down = False
    conversation = data.draw(CONVERSATIONS[name], label="conversation").messages
    manager = ToolReferenceManager(size_guard=data.draw(st.booleans(), label="size_guard"))
    cuts = sorted({min(c, len(conversation)) for c in data.draw(TURNS, label="cuts")})
    for cut in [*cuts, len(conversation), len(conversation)]:
        fault = data.draw(st.sampled_from(FAULTS), label="fault")
        event(fault)
        if fault in EVICTED:
            await evict(chain.redis, EVICTED[fault])
        chain.link.down = fault == "registry-down"
        messages = conversation[:cut]
        if fault == "mark-last" and isinstance(messages[-1], dict):
            messages = [*messages[:-1], {**messages[-1], "mark": data.draw(NUMBERS)}]
        body = {"model": "m", "messages": messages, "temperature": data.draw(NUMBERS)}
        response = await manager.apost(chain.http, "/chat", json=body)
        assert response.status_code == 200, response.text
        if response.request.headers["content-type"] == MEDIA_TYPE:
            event("sent as an edit")
        assert chain.received[-1] == dumps_json(body)
    chain.link.down = False
    assert manager.savings.requests == len(cuts) + 2


# A body as a JavaScript (or any non-Python) client writes it: number forms Python would
# write otherwise (`1.0` stays, `-0.0`, `1e-7`, `1E+2`), escapes, key order inside tool input.
WRITTEN = (
    '{"model":"m","messages":[{"role":"user","content":"go \\u00e9"},'
    '{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"calc",'
    '"input":{"b":1.0,"a":-0.0,"c":1e-7,"d":1E+2,"e":"\\u00e9\\ud83d\\ude00"}}]},'
    '{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"1.50",'
    '"is_error":false}]}],"max_tokens":1.0}'
)
PROTOCOL_2 = {"Toolref-Protocol": "2", "Content-Type": "application/json"}


async def test_bytes_no_python_client_would_write_reach_the_app_unchanged(chain: Chain) -> None:
    first = await chain.http.post("/chat", content=WRITTEN, headers=PROTOCOL_2)
    assert first.status_code == 200
    assert chain.received[-1] == WRITTEN.encode()
    (ref,) = first.json()["toolReferences"].values()
    # The same conversation with markers: the app gets the payloads as first written.
    marked = WRITTEN.replace(
        '"input":{"b":1.0,"a":-0.0,"c":1e-7,"d":1E+2,"e":"\\u00e9\\ud83d\\ude00"}',
        f'"toolRef":"{ref}"',
    ).replace('"content":"1.50"', f'"toolRef":"{ref}"')
    assert marked.count(ref) == 2
    second = await chain.http.post("/chat", content=marked, headers=PROTOCOL_2)
    assert second.status_code == 200
    assert chain.received[-1] == WRITTEN.encode()
    # The history refs of 0.2 (kept, then continued by `historyRef`) are refused.
    kept = await chain.http.post(
        "/chat", content=WRITTEN, headers={**PROTOCOL_2, "Toolref-History": "?1"}
    )
    assert kept.status_code == 400
    assert kept.json()["type"] == HistoryRefsRetiredError.problem_type()
    assert len(chain.received) == 2


async def test_a_repeated_tool_result_reaches_the_app_as_sent(chain: Chain) -> None:
    # Some clients send a result twice; the app alone would take it, so toolref must too.
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a\nb\n" * 100},
        {"role": "tool", "tool_call_id": "c1", "content": "a\nb\n" * 100},
    ]
    manager = ToolReferenceManager()
    for _ in range(3):
        body = {"messages": messages}
        response = await manager.apost(chain.http, "/chat", json=body)
        assert response.status_code == 200
        assert chain.received[-1] == dumps_json(body)
    assert manager.savings.edits == 2
    assert manager.savings.resends == 0
