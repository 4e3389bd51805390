"""POST /v1/context:handoff, in-process on a real engine."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from toolref import handoff
from toolref_server.app import create_app
from toolref_server.settings import Settings

from .test_messages import anthropic, openai_chat, optimize, trace_conversations

OPEN, CLOSE = handoff.OPEN, handoff.CLOSE


async def post(api: httpx.AsyncClient, **body: Any) -> httpx.Response:
    return await api.post("/v1/context:handoff", json=body)


async def test_block_stats_and_digest(api: httpx.AsyncClient) -> None:
    messages = anthropic()
    response = await post(api, messages=messages)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["format"] == "anthropic"
    assert answer["block"].startswith(OPEN)
    assert answer["block"].endswith(CLOSE)
    assert answer["summarySource"] == "digest"
    assert "## Conversation summary" in answer["block"]
    assert "import os" in answer["block"]  # the file read, verbatim
    assert "exit 1" in answer["block"]
    assert "[error]" in answer["block"]
    assert answer["stats"] == {
        "toolCalls": 2,
        "kept": 2,
        "droppedDuplicates": 0,
        "leftOut": 0,
        "charsOmitted": 0,
        "interrupted": 0,
        "errors": 1,
    }
    assert "messages" not in answer


async def test_markers_are_hydrated_first(api: httpx.AsyncClient) -> None:
    full = await post(api, messages=openai_chat())
    optimized = (await optimize(api, openai_chat()))["messages"]
    assert "toolRef" in json.dumps(optimized)
    with_refs = await post(api, messages=optimized)
    assert with_refs.json()["block"] == full.json()["block"]


async def test_missing_markers_are_409_and_need_protocol_2(
    api: httpx.AsyncClient, redis: Redis
) -> None:
    optimized = (await optimize(api, openai_chat()))["messages"]
    v1 = await api.post(
        "/v1/context:handoff", json={"messages": optimized}, headers={"Toolref-Protocol": "1"}
    )
    assert v1.status_code == 400
    await redis.flushall()
    missing = await post(api, messages=optimized)
    assert missing.status_code == 409
    assert len(missing.json()["missingRefs"]) == 2


async def test_the_request_for_the_new_backend_gets_the_block(api: httpx.AsyncClient) -> None:
    request = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Now fix the bug."},
    ]
    answer = (
        await post(api, messages=anthropic(), request=request, requestFormat="openai-chat")
    ).json()
    first_user = answer["messages"][1]
    assert first_user["content"].startswith(OPEN)
    assert first_user["content"].endswith("\n\nNow fix the bug.")
    assert answer["messages"][0] == request[0]


async def test_without_text_summary(api: httpx.AsyncClient) -> None:
    answer = (await post(api, messages=anthropic(), summarizeText=False)).json()
    assert answer["summarySource"] == "none"
    assert "## Conversation summary" not in answer["block"]


@pytest.mark.parametrize(
    ("body", "phrase"),
    [
        ({"messages": [], "maxToolContextChars": 10}, "maxToolContextChars"),
        ({"messages": [], "perResultChars": 5}, "perResultChars"),
        ({"messages": "hi"}, "list"),
        ({"messages": [], "request": "hi"}, "request"),
        ({"messages": anthropic(), "format": "openai-chat"}, "message 1"),
    ],
)
async def test_bad_handoff_requests(
    api: httpx.AsyncClient, body: dict[str, Any], phrase: str
) -> None:
    response = await api.post("/v1/context:handoff", json=body)
    assert response.status_code == 422, response.text
    assert phrase in response.text


async def test_every_shared_trace_fits_its_budget(api: httpx.AsyncClient) -> None:
    for name, messages in trace_conversations():
        answer = (await post(api, messages=messages, maxToolContextChars=20_000)).json()
        block = answer["block"]
        assert len(block) <= 20_000, name
        stats = answer["stats"]
        assert stats["toolCalls"] == stats["kept"] + stats["droppedDuplicates"] + stats["leftOut"]
        assert stats["kept"] > 0, name


class Stub(httpx.AsyncBaseTransport):
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.prompts: list[Any] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.prompts.append(body["messages"])
        if self.fail:
            return httpx.Response(500, text="down")
        return httpx.Response(
            200, json={"choices": [{"message": {"content": "User wanted a Rust port; done."}}]}
        )


@pytest.fixture
async def llm_api(redis: Redis) -> AsyncIterator[tuple[httpx.AsyncClient, Stub, Stub]]:
    clients = []
    stubs = Stub(), Stub(fail=True)
    for stub in stubs:
        settings = Settings(
            redis_url="unused", llm_base_url="http://llm.test/v1", summarizer="openai-compatible"
        )
        app = create_app(settings, redis=redis, llm_transport=stub)
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://localhost:8750"
        )
        clients.append((client, lifespan))
    yield clients[0][0], clients[1][0], stubs[0]  # type: ignore[misc]
    for client, lifespan in clients:
        await client.aclose()
        await lifespan.__aexit__(None, None, None)


async def test_the_llm_writes_the_text_summary_when_configured(
    llm_api: tuple[httpx.AsyncClient, httpx.AsyncClient, Stub], redis: Redis
) -> None:
    working, failing, stub = llm_api
    answer = (await post(working, messages=anthropic())).json()
    assert answer["summarySource"].startswith("openai-compatible:")
    assert "User wanted a Rust port; done." in answer["block"]
    [prompt] = stub.prompts
    assert "Read app.py" in prompt[1]["content"]  # the dialogue, not the tool output
    assert "import os" not in prompt[1]["content"]
    await redis.flushall()  # both apps share the engine, and so the cached dialogue summary
    fallback = (await post(failing, messages=anthropic())).json()
    assert fallback["summarySource"] == "digest"
    assert "User requests:" in fallback["block"]
