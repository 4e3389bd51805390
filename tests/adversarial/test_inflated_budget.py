"""One budget of request-body bytes in flight per process (issue 28, finding 2).

Found: a few KB of compressed body took gigabytes. One 2 KB zstd body at the gateway cost
578 MB; 24 at once (47 KB sent) peaked at 16.2 GB and stalled `/healthz` for 28.9 s; 20
stalled gzip uploads of 61 KB held 1.27 GB of the registry's memory. Nothing bounded the
inflated bytes in flight across requests. Now every reader of bodies (the registry's REST
reader, the middleware and the gateway, the relay) charges one budget per process before it
keeps bytes (TOOLREF_MAX_INFLATED_IN_FLIGHT, `budget=`, --max-inflated-in-flight): a request
past it is answered 503 `overloaded` at once, nothing it sent is stored, and the requests
within it are served.

Every test here fails on today's code, which has no budget: all the bombs are taken in.
"""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from typing import Any, Final

import httpx
import pytest
from redis.asyncio import Redis

from tests.support.servers import serve
from toolref import AsyncRegistryClient, ToolRefMiddleware
from toolref.asgi.budget import Budget, shared
from toolref.sending.editor import Editor
from toolref_relay.app import Relay
from toolref_relay.cli import config_of, parser
from toolref_relay.config import RelayConfig
from toolref_server.app import create_app
from toolref_server.settings import Settings

from .bombs import (
    CHAT,
    ENCODINGS,
    PROTOCOL,
    Upstream,
    assert_overloaded,
    charged,
    chat_body,
    compressed,
    register_body,
    sent,
    stalled,
    stored_records,
    until,
)

pytestmark = pytest.mark.engine

KIB: Final = 1024
BODY_LIMIT: Final = 64 * KIB  # as sent: every bomb here is a few hundred bytes
INFLATED_LIMIT: Final = 1024 * KIB
BUDGET: Final = 4096 * KIB
BOMB: Final = 900 * KIB  # what each bomb inflates to: within the limit, so alone it is served
FITS: Final = BUDGET // BOMB  # bombs held at once (4); the next one is refused
SETTING: Final = "TOOLREF_MAX_INFLATED_IN_FLIGHT"
LIMITS: Final[dict[str, Any]] = {
    "max_body_bytes": BODY_LIMIT,
    "max_decompressed_bytes": INFLATED_LIMIT,
    "max_inflated_in_flight": BUDGET,
}


async def test_registry_bombs_past_the_budget_get_503_and_the_rest_are_served(
    redis: Redis,
) -> None:
    """FITS uploads, each a bomb that inflates to BOMB bytes and then stalls (held in the
    registry, inflated, until the test lets them end), fill the budget; every further bomb,
    gzip or zstd, is refused at once while `/healthz` answers; once the held ones end they
    are stored, and nothing of a refused one is."""
    app = create_app(Settings(redis_url="unused", **LIMITS), redis=redis)
    budget = app.state.budget
    release = asyncio.Event()
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        held, holding = [], 0
        for n in range(FITS):
            encoding = ENCODINGS[n % 2]
            body = register_body(n, BOMB)
            bomb = compressed(body, encoding)
            assert len(bomb) < 4 * KIB
            headers = {**PROTOCOL, "content-encoding": encoding}
            held.append(
                asyncio.ensure_future(
                    client.post("/v1/invocations", content=stalled(bomb, release), headers=headers)
                )
            )
            holding += len(body)
            await charged(budget, holding)  # inflated, and held
        for n in range(FITS, FITS + 8):
            refused = await client.post(
                "/v1/invocations", **sent(register_body(n, BOMB), ENCODINGS[n % 2])
            )
            assert_overloaded(refused, SETTING, BUDGET)
        health = await client.get("/healthz")
        assert health.status_code == 200
        assert not any(upload.done() for upload in held)
        release.set()
        served = await asyncio.gather(*held)
    assert [answer.status_code for answer in served] == [200] * FITS
    assert await stored_records(redis) == FITS
    assert budget.high_water <= BUDGET
    assert budget.in_flight == 0


async def test_a_burst_of_registry_bombs_never_passes_the_budget(redis: Redis) -> None:
    """24 bombs at once (gzip and zstd, 24 x 900 KiB inflated against a 4 MiB budget):
    each is served or refused 503, the budget's high-water mark stays within it, and the
    engine holds exactly the served ones."""
    app = create_app(Settings(redis_url="unused", **LIMITS), redis=redis)
    budget = app.state.budget
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        answers = await asyncio.gather(
            *(
                client.post("/v1/invocations", **sent(register_body(n, BOMB), ENCODINGS[n % 2]))
                for n in range(24)
            )
        )
        health = await client.get("/healthz")
    assert health.status_code == 200
    served = [answer for answer in answers if answer.status_code == 200]
    print(f"\n{len(served)} of {len(answers)} served, high-water {budget.high_water}")
    for answer in answers:
        if answer.status_code != 200:
            assert_overloaded(answer, SETTING, BUDGET)
    assert served
    assert await stored_records(redis) == len(served)
    assert budget.high_water <= BUDGET
    assert budget.in_flight == 0


async def test_gateway_bombs_past_the_budget_get_503_and_a_sent_body_holds_none(
    redis: Redis,
) -> None:
    """The gateway has one upstream connection (TOOLREF_GATEWAY_MAX_CONNECTIONS=1), held by
    a first request whose answer streams on: its body was sent, so it holds nothing of the
    budget (nor of memory). FITS bombs, hydrated (inflated, parsed, their tool results
    registered) and waiting for that connection with their bodies, fill the budget; every
    further bomb is refused 503 at once, stores nothing and reaches no upstream, while
    `/healthz` answers; when the stream ends, the waiting ones are forwarded."""
    upstream = Upstream(hold=True)
    async with upstream.serving() as upstream_url:
        settings = Settings(
            redis_url="unused",
            upstreams=f"up={upstream_url}",
            gateway_max_connections=1,
            gateway_connect_timeout=60,  # also how long a request waits for the connection
            **LIMITS,
        )
        app = create_app(settings, redis=redis)
        budget = app.state.budget
        async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
            first = b'{"model": "m", "messages": [{"role": "user", "content": "hello"}]}'
            async with client.stream("POST", CHAT, content=first, headers=PROTOCOL) as streaming:
                assert streaming.status_code == 200
                await until(lambda: len(upstream.bodies) == 1)
                assert budget.in_flight == 0  # sent on: given back while the answer streams
                waiting, holding = [], 0
                for n in range(FITS):
                    body = chat_body(n, BOMB, bomb=True)
                    bomb = sent(body, ENCODINGS[n % 2])
                    assert len(bomb["content"]) < 4 * KIB
                    waiting.append(asyncio.ensure_future(client.post(CHAT, **bomb)))
                    holding += len(body)
                    await charged(budget, holding)  # hydrated, waiting for the connection
                for _ in range(3000):  # their tool results, registered on the way
                    if await stored_records(redis) == FITS:
                        break
                    await asyncio.sleep(0.01)
                for n in range(FITS, FITS + 8):
                    refused = await client.post(
                        CHAT, **sent(chat_body(n, BOMB, bomb=True), ENCODINGS[n % 2])
                    )
                    assert_overloaded(refused, SETTING, BUDGET)
                health = await client.get("/healthz")
                assert health.status_code == 200
                assert not any(request.done() for request in waiting)
                upstream.release.set()
                assert [piece async for piece in streaming.aiter_bytes()]
            forwarded = await asyncio.gather(*waiting)
    assert [answer.status_code for answer in forwarded] == [200] * FITS
    assert len(upstream.bodies) == 1 + FITS  # no refused bomb reached the upstream
    assert await stored_records(redis) == FITS  # nor the registry
    assert budget.high_water <= BUDGET
    assert budget.in_flight == 0


async def test_while_an_edited_requests_answer_streams_the_gateway_holds_none_of_it(
    redis: Redis,
) -> None:
    """An edit of a few KiB restores a body of 24 MiB at the gateway; once it is sent
    upstream and its recipe kept (which starts once the body went upstream, and runs while
    the upstream answers), nothing in the gateway references it (nor the edit, nor its
    segments, nor the recipe kept: its finished task held it as its result) while the
    answer streams on: the process's traced memory then is back near where it began, and
    the budget holds none of it. (The upstream reads and keeps nothing.)"""
    size = 24 * 1024 * KIB
    upstream = Upstream(hold=True)
    async with upstream.serving() as upstream_url:
        settings = Settings(
            redis_url="unused",
            upstreams=f"up={upstream_url}",
            max_body_bytes=size * 2,
            max_decompressed_bytes=size * 2,
            max_inflated_in_flight=size * 8,
            edit_cache_bytes=0,  # the recipes' cache holds pieces by design, bounded: not here
        )
        app = create_app(settings, redis=redis)
        budget = app.state.budget
        content = {"model": "m", "messages": [{"role": "user", "content": "x" * size}]}
        edit = Editor().prepare(JSON_HEADERS, json.dumps(content).encode(), "messages")
        assert edit is not None
        assert len(edit.body) < 64 * KIB  # the edit is small; what it restores is not
        del content
        async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
            tracemalloc.start()
            try:
                began = tracemalloc.get_traced_memory()[0]
                headers = dict(edit.headers)
                async with client.stream(
                    "POST", CHAT, content=edit.body, headers=headers
                ) as answer:
                    assert answer.status_code == 200, await answer.aread()
                    await until(lambda: len(upstream.bodies) == 1)
                    assert upstream.bodies[0] > size  # the body restored and sent whole
                    for _ in range(3000):  # the recipe kept, while the upstream holds on
                        if await redis.keys("tr:*:b:*"):
                            break
                        await asyncio.sleep(0.01)
                    await asyncio.sleep(0.05)  # its task ends after the write
                    _, peak = tracemalloc.get_traced_memory()
                    streaming = tracemalloc.get_traced_memory()[0]
                    assert budget.in_flight == 0
                    upstream.release.set()
                    assert [piece async for piece in answer.aiter_bytes()]
            finally:
                tracemalloc.stop()
    assert peak > began + size  # the body was held while it was being sent ...
    assert streaming < began + size // 4  # ... and none of it while the answer streams


async def test_a_chat_backends_middleware_refuses_bombs_past_its_budget(redis: Redis) -> None:
    """`ToolRefMiddleware` in a chat backend: the process's shared budget unless given one;
    a request past it is refused 503 before its body is inflated further, and a budget
    too small for one request within the limits is refused at construction."""
    service = create_app(Settings(redis_url="unused"), redis=redis)
    async with service.router.lifespan_context(service):
        registry = AsyncRegistryClient(
            "http://localhost:8750", transport=httpx.ASGITransport(app=service)
        )

        async def app(scope: object, receive: object, send: object) -> None:
            raise AssertionError("a refused request never reaches the app")

        assert ToolRefMiddleware(app, registry).budget is shared
        with pytest.raises(ValueError, match="budget="):
            ToolRefMiddleware(app, registry, budget=Budget(1000))
        budget = Budget(BUDGET, setting="budget=")
        backend = ToolRefMiddleware(
            app, registry, budget=budget, max_body_bytes=BODY_LIMIT, max_inflated_bytes=BOMB
        )
        others = budget.account()
        others.charge(BUDGET - BOMB // 2)  # requests in flight hold all but half a bomb
        transport = httpx.ASGITransport(app=backend)
        async with httpx.AsyncClient(transport=transport, base_url="http://b") as client:
            for encoding in ENCODINGS:
                refused = await client.post(
                    "/chat", **sent(chat_body(0, BOMB - KIB, bomb=True), encoding)
                )
                assert_overloaded(refused, "budget=", BUDGET)
        others.close()
        await registry.aclose()
    assert budget.in_flight == 0
    assert budget.high_water <= BUDGET


async def test_a_small_edit_is_charged_for_the_request_it_restores(redis: Redis) -> None:
    """An edit of one short message against a 900 KiB recipe becomes a 900 KiB body for the
    app: the restored body is charged before it is handed over, so with the budget nearly
    held by other requests the edit is refused (503, not 415: the client waits, rather
    than sending the request whole), and served once they end."""
    service = create_app(Settings(redis_url="unused"), redis=redis)
    async with service.router.lifespan_context(service):
        registry = AsyncRegistryClient(
            "http://localhost:8750", transport=httpx.ASGITransport(app=service)
        )
        budget = Budget(BUDGET, setting="budget=")
        backend = ToolRefMiddleware(
            _count_messages,
            registry,
            budget=budget,
            max_body_bytes=BODY_LIMIT,
            max_inflated_bytes=INFLATED_LIMIT,
        )
        editor = Editor()
        transport = httpx.ASGITransport(app=backend)
        async with httpx.AsyncClient(transport=transport, base_url="http://b") as client:
            big = json.loads(chat_body(0, BOMB, bomb=True))
            whole = editor.prepare(JSON_HEADERS, json.dumps(big).encode(), "messages")
            assert whole is not None
            first = await client.post("/chat", content=whole.body, headers=dict(whole.headers))
            assert first.status_code == 200, first.text
            assert editor.confirm(whole, first.headers["toolref-history"])
            big["messages"].append({"role": "user", "content": "and then?"})
            turn = editor.prepare(JSON_HEADERS, json.dumps(big).encode(), "messages")
            assert turn is not None
            assert turn.base == whole.ref
            assert len(turn.body) < KIB  # the edit is small; what it restores is not
            others = budget.account()
            others.charge(BUDGET - 100 * KIB)
            refused = await client.post("/chat", content=turn.body, headers=dict(turn.headers))
            assert_overloaded(refused, "budget=", BUDGET)
            others.close()
            served = await client.post("/chat", content=turn.body, headers=dict(turn.headers))
        await registry.aclose()
    assert served.status_code == 200, served.text
    assert served.json() == {"messages": len(big["messages"])}
    assert budget.in_flight == 0


async def test_an_edit_restoring_past_the_inflated_limit_is_sent_whole(redis: Redis) -> None:
    """`max_inflated_bytes` bounds an edit's body once restored, as it bounds an inflated
    one: refused (415: the client sends the request whole) once the registry's answer says
    how big it is, before it is built or charged; the app never sees it."""
    service = create_app(Settings(redis_url="unused"), redis=redis)
    async with service.router.lifespan_context(service):
        registry = AsyncRegistryClient(
            "http://localhost:8750", transport=httpx.ASGITransport(app=service)
        )
        budget = Budget(BUDGET, setting="budget=")
        limit = BOMB // 2
        seen: list[int] = []

        async def app(scope: Any, receive: Any, send: Any) -> None:
            seen.append(len((await receive())["body"]))
            await _count_messages(scope, _given(b'{"messages": []}'), send)

        backend = ToolRefMiddleware(
            app, registry, budget=budget, max_body_bytes=BOMB * 2, max_inflated_bytes=limit
        )
        editor = Editor()
        transport = httpx.ASGITransport(app=backend)
        async with httpx.AsyncClient(transport=transport, base_url="http://b") as client:
            part = {"role": "user", "content": "a" * (limit * 3 // 4)}
            messages = [part]
            small = {"model": "m", "messages": messages}  # within the limit
            restored = json.dumps(small).encode()
            whole = editor.prepare(JSON_HEADERS, restored, "messages")
            assert whole is not None
            first = await client.post("/chat", content=whole.body, headers=dict(whole.headers))
            assert first.status_code == 200, first.text
            assert editor.confirm(whole, first.headers["toolref-history"])
            messages.append(part)  # past it
            turn = editor.prepare(JSON_HEADERS, json.dumps(small).encode(), "messages")
            assert turn is not None
            assert turn.base == whole.ref
            assert len(turn.body) < limit  # the edit is within the limit (zstd); its body not
            refused = await client.post("/chat", content=turn.body, headers=dict(turn.headers))
        await registry.aclose()
    assert refused.status_code == 415, refused.text
    assert f"over this backend's limit of {limit}" in refused.json()["detail"]
    assert seen == [len(restored)]  # the first request only: the app never saw the edit
    assert budget.in_flight == 0
    assert budget.high_water < limit  # the refused body was never charged


def _given(body: bytes) -> Any:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


JSON_HEADERS: Final = [("content-type", "application/json")]


async def _count_messages(scope: Any, receive: Any, send: Any) -> None:
    """A chat app that answers how many messages it was given."""
    message = await receive()
    count = len(json.loads(message["body"])["messages"])
    body = json.dumps({"messages": count}).encode()
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def test_the_relay_refuses_a_turn_past_its_budget_in_the_providers_shape() -> None:
    """The relay's own budget (--max-inflated-in-flight): a turn that does not fit is
    answered 503 with Retry-After in the agent's provider's error shape; once there is room
    the same turn goes on to the gateway (here: none, so 502)."""
    config = config_of(
        parser().parse_args(
            ["relay", "--gateway", "http://127.0.0.1:9", "--max-inflated-in-flight", "200000000"]
        )
    )
    assert config.max_inflated_in_flight == 200_000_000
    with pytest.raises(ValueError, match="--max-inflated-in-flight"):
        RelayConfig("http://g", max_inflated_in_flight=100 * 2**20)  # < 64 MiB + 64 MiB
    relay = Relay(config, report=lambda line: None)
    others = relay.budget.account()
    others.charge(config.max_inflated_in_flight - BOMB // 2)
    body = compressed(chat_body(0, BOMB, bomb=True), "gzip")
    headers = {
        "content-type": "application/json",
        "content-encoding": "gzip",
        "anthropic-version": "2023-06-01",
    }
    transport = httpx.ASGITransport(app=relay)
    async with httpx.AsyncClient(transport=transport, base_url="http://relay") as client:
        refused = await client.post("/llm/up/v1/messages", content=body, headers=headers)
        others.close()
        passed = await client.post("/llm/up/v1/messages", content=body, headers=headers)
    assert refused.status_code == 503
    assert refused.headers["retry-after"].isdigit()
    error = refused.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "overloaded_error"
    assert "--max-inflated-in-flight" in error["error"]["message"]
    assert passed.status_code == 502  # past the budget now: on to the (absent) gateway
    assert relay.budget.in_flight == 0


def _amplifier(ref: str, markers: int) -> dict[str, Any]:
    """An OpenAI Chat Completions conversation whose `markers` tool calls all name `ref`:
    a few KB that fills to `markers` times the record."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "read it again and again"}]
    for n in range(markers):
        call = f"call_{n}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "read_file", "toolRef": ref},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call, "toolRef": ref})
    return {"messages": messages}


async def test_markers_that_fill_past_the_limit_or_the_budget_are_refused(redis: Redis) -> None:
    """Found (issue 28's memory round): a 51 KB hydrate body of 200 markers naming one 100 KB
    record filled to a 20 MB answer (391x) with nothing bounding it. Now the filled size is
    known before filling: past the inflated limit (what the client could have sent in full)
    it is 413 `decompressed-too-large`; within it, it is charged to the request's share of
    the budget, so one that the budget cannot hold is 503 `overloaded`; one that fits both
    is answered in full. Before the fix the first two were answered 200 with the whole fill."""
    record = 100 * KIB
    invocation = {"name": "read_file", "args": {}, "result": "r" * record}
    limits = {**LIMITS, "max_decompressed_bytes": 2048 * KIB, "max_body_bytes": 256 * KIB}
    for budget_bytes, markers, expected in (
        (8192 * KIB, 30, 413),  # fills to 3 MB: over the 2 MiB limit
        (2304 * KIB, 15, 503),  # fills to 1.5 MB, charged twice (texts and answer): over budget
        (8192 * KIB, 15, 200),
    ):
        settings = Settings(
            redis_url="unused", **{**limits, "max_inflated_in_flight": budget_bytes}
        )
        app = create_app(settings, redis=redis)
        async with app.router.lifespan_context(app):
            budget: Budget = app.state.budget
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://localhost:8750",
                headers=PROTOCOL,
            ) as client:
                made = await client.post("/v1/invocations", json={"invocations": [invocation]})
                ref = made.json()["refs"][0]["ref"]
                body = _amplifier(ref, markers)
                assert len(json.dumps(body)) < 8 * KIB
                before = await redis.dbsize()
                answer = await client.post("/v1/messages:hydrate", json=body)
            assert answer.status_code == expected, answer.text
            if expected == 413:
                assert answer.json()["type"] == "urn:toolref:problem:decompressed-too-large"
                assert "TOOLREF_MAX_DECOMPRESSED_BYTES" in answer.json()["detail"]
            if expected == 503:
                assert_overloaded(answer, SETTING, budget_bytes)
            if expected == 200:
                assert len(answer.content) > markers * record
                assert budget.high_water >= 2 * markers * record  # charged before filling
            else:
                assert await redis.dbsize() == before  # nothing new kept
            assert budget.in_flight == 0


async def test_a_handoff_whose_markers_fill_past_the_limit_is_refused(redis: Redis) -> None:
    """Found in review: `/v1/context:handoff` filled its markers with no bound (2,000
    markers to one 1 MB record took a worker to 2 GB). As hydrate does, it refuses a fill
    past the inflated limit (413), naming the setting, and answers one within it."""
    invocation = {"name": "read_file", "args": {}, "result": "r" * (100 * KIB)}
    limits = {**LIMITS, "max_decompressed_bytes": 2048 * KIB, "max_body_bytes": 256 * KIB}
    app = create_app(Settings(redis_url="unused", **limits), redis=redis)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://localhost:8750",
            headers=PROTOCOL,
        ) as client,
    ):
        made = await client.post("/v1/invocations", json={"invocations": [invocation]})
        ref = made.json()["refs"][0]["ref"]
        over = await client.post("/v1/context:handoff", json=_amplifier(ref, 30))
        within = await client.post("/v1/context:handoff", json=_amplifier(ref, 5))
    assert over.status_code == 413, over.text
    assert over.json()["type"] == "urn:toolref:problem:decompressed-too-large"
    assert "TOOLREF_MAX_DECOMPRESSED_BYTES" in over.json()["detail"]
    assert within.status_code == 200, within.text
