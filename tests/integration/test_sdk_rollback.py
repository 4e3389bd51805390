"""The SDK's sender before a receiver rolled back, forward, or mixed while the app runs
(review: SDK senders after a rollback).

The receivers are real: a small app behind `ToolRefMiddleware` on the registry (the test
engine), served by uvicorn, each made to act as a receiver of an older edits version by the
relay's tests' `Older` (its answers say that version; an edit written in a newer version's
bytes is refused 400 `malformed-body`, with no `Toolref-Edits`, as a receiver of 4 refuses
version 5's compact header). Before, the sender learnt the version from each answer's
`Toolref-Edits` only: the refusal reached the app, and behind replicas of 4 and 6 the
replica of 6 raised the version back, so every turn reaching the replica of 4 failed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.integration.test_relay_rollback import Older, written
from tests.support.servers import serve, serve_all
from toolref import AsyncRegistryClient, ToolReferenceManager, ToolRefMiddleware
from toolref.edits.wire import MEDIA_TYPE
from toolref.sending.said import RECENT
from toolref_server.app import create_app
from toolref_server.settings import Settings

pytestmark = pytest.mark.engine
TIMEOUT = 30  # a net for a hang, not a timing check


class Replicas(httpx.AsyncBaseTransport):
    """A load balancer without affinity: request n goes to replica n mod N (resends
    included); `sent` keeps every request."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = [httpx.URL(url) for url in urls]
        self.inner = httpx.AsyncHTTPTransport()
        self.sent: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        target = self.urls[len(self.sent) % len(self.urls)]
        request.url = request.url.copy_with(host=target.host, port=target.port)
        request.headers["host"] = f"{target.host}:{target.port}"
        self.sent.append(request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class SyncReplicas(httpx.BaseTransport):
    """`Replicas` for a blocking client (run off the loop: `asyncio.to_thread`)."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = [httpx.URL(url) for url in urls]
        self.inner = httpx.HTTPTransport()
        self.sent: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        target = self.urls[len(self.sent) % len(self.urls)]
        request.url = request.url.copy_with(host=target.host, port=target.port)
        request.headers["host"] = f"{target.host}:{target.port}"
        self.sent.append(request)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


@dataclass
class Stack:
    urls: list[str]
    receivers: list[Older]
    got: list[bytes]  # the bodies the app got, in order


@asynccontextmanager
async def receivers(redis: Redis, *versions: int) -> AsyncIterator[Stack]:
    """One receiver per version (the app behind `ToolRefMiddleware`, as `Older`), on one
    registry."""
    got: list[bytes] = []

    async def chat(request: Request) -> JSONResponse:
        got.append(await request.body())
        return JSONResponse({"choices": [{"message": {"role": "assistant", "content": "ok"}}]})

    service = create_app(Settings(redis_url="unused"), redis=redis)
    async with serve(service) as registry_url:
        registry = AsyncRegistryClient(registry_url, retries=0)
        apps = [
            Older(
                ToolRefMiddleware(
                    Starlette(routes=[Route("/chat", chat, methods=["POST"])]), registry
                ),
                v,
            )
            for v in versions
        ]
        async with serve_all(*apps) as urls:
            yield Stack(urls, apps, got)
        await registry.aclose()


class Conversation:
    """An app's conversation: each turn adds a tool call, its result and a question."""

    def __init__(self, tag: str) -> None:
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": f"conversation {tag}"},
            {"role": "user", "content": "read a.py " + "x = 1\n" * 300},
        ]

    def step(self) -> dict[str, Any]:
        n = len(self.messages)
        self.messages += [
            {"role": "assistant", "content": f"reading file {n}"},
            {"role": "user", "content": f"file {n}: " + f"y = {n}\n" * 200},
        ]
        return {"model": "m", "messages": self.messages}


def body_of(payload: dict[str, Any]) -> bytes:
    """What `httpx`'s `json=` writes (`ToolReferenceManager._request`)."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


async def turn(
    manager: ToolReferenceManager, client: httpx.AsyncClient, stack: Stack, payload: Any
) -> None:
    answer = await manager.apost(client, stack.urls[0] + "/chat", json=payload)
    assert answer.status_code == 200, answer.text  # the app never sees the refusal
    assert stack.got[-1] == body_of(payload)  # the app got the exact bytes


async def test_a_receiver_rolled_back_then_forward_is_followed_without_a_failed_turn(
    redis: Redis,
) -> None:
    """Rolled back from 6 to 4 while the app runs: before, the next edit (version 5's
    bytes) was refused 400 `malformed-body` and the app got the 400, and so did every later
    turn. Now the refused turn goes again as it is (the app gets its answer), the sender
    learns 4, and every later turn is one edit of version 4. Rolled forward to 6, the
    answers say so, and once no lower version was said for `RECENT` seconds (the sender's
    clock, injected) it writes version 5's bytes again."""
    now = [1000.0]
    manager = ToolReferenceManager()
    manager.sender.clock = lambda: now[0]
    conversation = Conversation("rolled")
    async with receivers(redis, 6) as stack:
        transport = Replicas(stack.urls)
        async with httpx.AsyncClient(transport=transport, timeout=TIMEOUT) as client:
            for _ in range(2):
                await turn(manager, client, stack, conversation.step())
            assert written(transport.sent[-1].content) == 5
            stack.receivers[0].version = 4
            for n in range(3):
                before = len(transport.sent)
                await turn(manager, client, stack, conversation.step())
                sent = transport.sent[before:]
                if n == 0:  # the refused edit, then the request as it is
                    assert [r.headers["content-type"] for r in sent] == [
                        MEDIA_TYPE,
                        "application/json",
                    ]
                else:
                    assert len(sent) == 1
                    assert sent[0].headers["content-type"] == MEDIA_TYPE
                    assert written(sent[0].content) == 4
            stack.receivers[0].version = 6
            await turn(manager, client, stack, conversation.step())
            assert written(transport.sent[-1].content) == 4  # 4 said within `RECENT`
            now[0] += RECENT
            await turn(manager, client, stack, conversation.step())
            assert written(transport.sent[-1].content) == 5


@pytest.mark.parametrize("blocking", [False, True])
async def test_replicas_of_4_and_6_cost_one_resend_and_no_failed_turn(
    redis: Redis, blocking: bool
) -> None:
    """Replicas of 6 and of 4 behind one address (a rolling upgrade, or one rolled back),
    taking requests in turn: before, the replica of 6 raised the version back after each
    refusal, so every turn reaching the replica of 4 failed to the app. Now the sender
    writes what both read once either said less: one refused edit, resent as it is, and
    every later turn one edit of version 4."""
    manager = ToolReferenceManager()
    conversation = Conversation(f"replicas {blocking}")
    turns = 8
    async with receivers(redis, 6, 4) as stack:
        url = stack.urls[0] + "/chat"
        if blocking:
            sync = SyncReplicas(stack.urls)

            def converse() -> None:
                with httpx.Client(transport=sync, timeout=TIMEOUT) as client:
                    for _ in range(turns):
                        payload = conversation.step()
                        with manager.stream(client, "POST", url, json=payload) as answer:
                            answer.read()
                            assert answer.status_code == 200, answer.text
                        assert stack.got[-1] == body_of(payload)

            await asyncio.to_thread(converse)
            sent = sync.sent
        else:
            transport = Replicas(stack.urls)
            async with httpx.AsyncClient(transport=transport, timeout=TIMEOUT) as client:
                for _ in range(turns):
                    await turn(manager, client, stack, conversation.step())
            sent = transport.sent
    assert len(sent) <= turns + 1  # at most the one refused edit
    last = sent[-(turns - 3) :]
    assert [r.headers["content-type"] for r in last] == [MEDIA_TYPE] * len(last)
    assert [written(r.content) for r in last] == [4] * len(last)
