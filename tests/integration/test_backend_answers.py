"""The answer is the next turn's dictionary on the chat-backend path too (issue 39): the
SDK (`toolref.AsyncTransport`, as an official SDK's `http_client` uses it) ->
`ToolRefMiddleware` -> the app, which streams each turn's answer (Anthropic Messages or
OpenAI Chat), the registry the service's own on the test engine.

SDK and middleware both read the stream as it passes and make the same bytes of it; the
middleware has the registry keep them (`PUT /v1/answers/{ref}`) before the stream's last
piece goes out, so from the second turn the SDK sends the assistant message compressed
against them (an edit naming the answer), every body reaching the app byte for byte. An answer the
registry lost costs one resend, as an edit without it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.integration.test_answer_dictionary import MODEL, Provider, replies, result, written_back
from tests.support.fake_provider import wire
from toolref import AsyncRegistryClient, AsyncTransport, CircuitBreaker, ToolRefMiddleware
from toolref.edits.answer import MAX_ANSWER
from toolref.edits.wire import described
from toolref_server.app import create_app
from toolref_server.settings import Settings

pytestmark = pytest.mark.engine

RECIPE = "tb_" + "a" * 26


class Recording(httpx.AsyncBaseTransport):
    """The backend's transport, recording each request's body as the SDK sent it."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner, self.sent = inner, list[bytes]()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(await request.aread())
        return await self.inner.handle_async_request(request)


@asynccontextmanager
async def backend(
    redis: Redis, provider: Provider
) -> AsyncIterator[tuple[httpx.AsyncClient, Recording, httpx.AsyncClient]]:
    # No caches: every answer and recipe read from the store, as another replica would.
    settings = Settings(redis_url="unused", edit_cache_bytes=0, answer_cache_bytes=0)
    service = create_app(settings, redis=redis)
    async with service.router.lifespan_context(service):
        raw = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=service), base_url="http://localhost:8750"
        )
        registry = AsyncRegistryClient(
            "http://localhost:8750",
            transport=httpx.ASGITransport(app=service),
            retries=0,
            breaker=CircuitBreaker(failure_threshold=100),
        )
        wrapped = ToolRefMiddleware(provider.app(), registry)
        recording = Recording(httpx.ASGITransport(app=wrapped))
        transport = AsyncTransport(recording)
        async with httpx.AsyncClient(transport=transport, base_url="http://backend") as client:
            yield client, recording, raw
        await raw.aclose()
        await registry.aclose()


async def converse(
    client: httpx.AsyncClient, provider: Provider, api: wire.Api, turns: int
) -> list[bytes]:
    path = "/v1/messages" if api == "messages" else "/v1/chat/completions"
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Build it. " * 60}]
    bodies = []
    for n in range(turns):
        body = {"model": MODEL, "max_tokens": 512, "stream": True, "messages": messages}
        data = json.dumps(body).encode()
        bodies.append(data)
        headers = {"content-type": "application/json", "x-api-key": "sk-backend-user"}
        async with client.stream("POST", path, content=data, headers=headers) as answer:
            got = b"".join([piece async for piece in answer.aiter_raw()])
        assert answer.status_code == 200, got
        assert got == provider.streamed[n]  # the stream, byte for byte
        reply = provider.replies[n]
        messages = [*messages, written_back(api, reply), result(api, reply, n)]
    return bodies


@pytest.mark.parametrize("api", ["messages", "chat"])
async def test_the_sdk_sends_the_assistant_message_against_the_answer_the_middleware_kept(
    redis: Redis, api: wire.Api
) -> None:
    provider = Provider(replies(6, 5))
    async with backend(redis, provider) as (client, recording, _):
        bodies = await converse(client, provider, api, 6)
    assert provider.seen == bodies  # every body byte for byte
    sent = recording.sent
    assert len(sent) == 6, [s[:20] for s in sent]  # no resend: each answer was there in time
    assert sent[0] == bodies[0]  # the first as it is (with the offer)
    assert all("a" in described(edit) for edit in sent[2:]), [e[:16] for e in sent]


async def test_an_answer_the_registry_lost_costs_one_resend(redis: Redis) -> None:
    provider = Provider(replies(5, 6))
    async with backend(redis, provider) as (client, recording, _):
        path = "/v1/messages"
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Build it. " * 60}]
        bodies = []
        for n in range(5):
            if n == 3:  # the answers are gone from the store; the recipes stay
                async for key in redis.scan_iter(match="tr:*:a:*"):
                    await redis.delete(key)
            body = {"model": MODEL, "max_tokens": 512, "stream": True, "messages": messages}
            bodies.append(json.dumps(body).encode())
            headers = {"content-type": "application/json", "x-api-key": "sk-backend-user"}
            answer = await client.post(path, content=bodies[-1], headers=headers)
            assert answer.status_code == 200, answer.text
            reply = provider.replies[n]
            messages = [*messages, written_back("messages", reply), result("messages", reply, n)]
    assert provider.seen == bodies
    sent = recording.sent
    assert len(sent) == 6  # turn 4 twice: refused 400 dictionary-mismatch, then without the answer
    assert "a" in described(sent[3])
    assert "a" not in described(sent[4])


async def test_the_answer_route_refuses_what_it_cannot_keep_and_stores_nothing(
    redis: Redis,
) -> None:
    octets = {"content-type": "application/octet-stream"}
    async with backend(redis, Provider([])) as (_, _, raw):
        before = await redis.dbsize()
        bad = await raw.put("/v1/answers/tb_nope", content=b"{}", headers=octets)
        assert bad.status_code == 422, bad.text
        assert "recipe ref" in bad.json()["detail"]
        url = f"/v1/answers/{RECIPE}"
        large = await raw.put(url, content=b"x" * (MAX_ANSWER + 1), headers=octets)
        assert large.status_code == 413, large.text
        assert str(MAX_ANSWER) in large.json()["detail"]
        empty = await raw.put(url, content=b"", headers=octets)
        assert empty.status_code == 422, empty.text
        json_body = await raw.put(url, content=b"{}", headers={"content-type": "application/json"})
        assert json_body.status_code == 415, json_body.text
        assert "application/octet-stream" in json_body.json()["detail"]
        assert await redis.dbsize() == before
        kept = await raw.put(url, content=b'{"role":"assistant"}', headers=octets)
        assert kept.status_code == 204, kept.text
        assert await redis.dbsize() == before + 1
