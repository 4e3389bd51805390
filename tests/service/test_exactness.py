"""Exactness: a backend behind `ToolRefMiddleware` receives each request body exactly as the
client wrote it, on every path: plain, markers, zstd, history refs, and after every fallback
(refs evicted, a history evicted, the registry down).

Arbitrary conversations of all six formats (the strategies of the format tests: unknown
members at every level in random order, floats such as `1.0`, `-0.0` and `1e-07`, big
integers, astral characters) go through a `ToolReferenceManager`, the real middleware and the
real registry on the real engine, turn by turn. The app records the bytes it receives.

One documented exception (docs/edits.md, "Exactness"): JSON-equal payloads of one
invocation spelled with their members in another order share one ref, and a marker is filled
with the spelling registered first. Such conversations are checked for JSON equality and for
the first spelling; all others byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from toolref import (
    AsyncRegistryClient,
    CircuitBreaker,
    ToolReferenceManager,
    ToolRefMiddleware,
    formats,
)
from toolref.sending.rewrite import ref_of
from toolref.wire.encoding import dumps_json
from toolref.wire.headers import DICTIONARY_HEADER, HISTORY_HEADER
from toolref_server.app import create_app
from toolref_server.settings import Settings

from ..conftest import all_keys
from ..unit.format_strategies import CONVERSATIONS
from .test_chat_flow import Switch

# "mark-last": the client changes its last message, as Claude Code moves its cache mark: no
# confirmed history is a prefix, and the conversation goes whole against the last body kept.
FAULTS = ("none", "none", "evict-refs", "evict-history", "registry-down", "mark-last")


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
async def chain(redis: Redis) -> AsyncIterator[Chain]:
    service = create_app(Settings(redis_url="unused"), redis=redis)
    async with service.router.lifespan_context(service):
        link = Switch(httpx.ASGITransport(app=service))
        registry = AsyncRegistryClient(
            "http://registry",
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


async def evict(redis: Redis, kind: str) -> None:
    """Delete every key of one kind (`i` records, `h` history nodes), as eviction would."""
    for key in await all_keys(redis):
        name = key.decode() if isinstance(key, bytes) else key
        if name.startswith(f"tr:local:{kind}:"):
            await redis.delete(name)


def spelled_twice(messages: list[Any]) -> bool:
    """Does one invocation occur twice with payloads that are JSON-equal but written
    differently (members in another order)? The documented exception."""
    try:
        found = formats.scan(messages, formats.detect(messages))
    except ValueError:
        return False
    spellings: dict[str, set[bytes]] = {}
    for pair in found.complete:
        invocation = pair.invocation()
        text = dumps_json([invocation["args"], invocation["result"]])
        spellings.setdefault(ref_of(pair), set()).add(text)
    return any(len(texts) > 1 for texts in spellings.values())


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
    manager = ToolReferenceManager(
        compress=data.draw(st.sampled_from([None, True, False]), label="compress"),
        history_refs=data.draw(st.booleans(), label="history_refs"),
        optimistic=data.draw(st.booleans(), label="optimistic"),
    )
    cuts = sorted({min(c, len(conversation)) for c in data.draw(TURNS, label="cuts")})
    for cut in [*cuts, len(conversation), len(conversation)]:
        fault = data.draw(st.sampled_from(FAULTS), label="fault")
        event(fault)
        if fault in ("evict-refs", "evict-history"):
            await evict(chain.redis, "i" if fault == "evict-refs" else "h")
        chain.link.down = fault == "registry-down"
        messages = conversation[:cut]
        if fault == "mark-last" and isinstance(messages[-1], dict):
            messages = [*messages[:-1], {**messages[-1], "mark": data.draw(NUMBERS)}]
        body = {"model": "m", "messages": messages, "temperature": data.draw(NUMBERS)}
        response = await manager.apost(chain.http, "/chat", json=body)
        assert response.status_code == 200, response.text
        if DICTIONARY_HEADER in response.request.headers:
            event("compressed against a kept body")
        if manager.checkpoints and response.request.headers.get(HISTORY_HEADER, "?")[0] == "t":
            event("continued, with checkpoints asked")
        received = chain.received[-1]
        assert json.loads(received) == body
        if spelled_twice(messages):
            event("one invocation spelled twice (the documented exception)")
            continue
        assert received == dumps_json(body)
        assert json.dumps(json.loads(received)) == json.dumps(body)
    chain.link.down = False


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
    # Kept as a history, then continued with one new message: the history comes back as
    # it was written, followed by the new message as written.
    kept = await chain.http.post(
        "/chat", content=WRITTEN, headers={**PROTOCOL_2, "Toolref-History": "?1"}
    )
    head = kept.headers["toolref-history"]
    new = '{"role":"assistant","content":[{"type":"text","text":"done: 1.0E+2"}]}'
    continued = '{"model":"m","historyRef":"' + head + '","messages":[' + new + "]}"
    third = await chain.http.post("/chat", content=continued, headers=PROTOCOL_2)
    assert third.status_code == 200, third.text
    messages = WRITTEN[WRITTEN.index("[") : WRITTEN.rindex("]") + 1]
    assert (
        chain.received[-1]
        == ('{"model":"m","messages":' + messages[:-1] + "," + new + "]}").encode()
    )


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
    assert manager.savings.fallbacks == 0
