"""A chat backend's `ToolRefMiddleware` whose registry is rolled back while it runs (review:
version negotiation behind a middleware).

The parts are real: the registry app on the test engine and the app behind the middleware,
each served by uvicorn, the Python SDK's manager sending over real sockets. The registry is
made one of an older edits version by the relay's tests' `Older` (its capabilities and its
answers' `Toolref-Edits` say that version, and an edit written in a newer version's bytes is
refused 400 `malformed-body`, as a registry of 4 refuses version 5's compact header).

Before, the middleware asked its registry's version once, at start-up: rolled back from 6
to 4, it went on telling its clients 6, each edit (version 5's bytes) was refused by the
registry and answered 415 (`cause` `malformed-body`), the sender paused its edits (1 s,
doubled to 30 s) and, told 6 again by the request as it is, sent version 5's bytes after
each pause, refused again, for ever. Now the middleware asks the registry's capabilities
again when it refuses an edit as unreadable (at most once per `RECHECK_SECONDS`, one
question in flight) and tells the lower version from then on; a sender takes the 415 naming
`malformed-body` as the refusal it stands for (the version below the edit's bytes said, no
pause), as it takes a gateway's 400.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.integration.test_relay_rollback import Older, written
from tests.support.servers import serve
from toolref import AsyncRegistryClient, ToolReferenceManager, ToolRefMiddleware
from toolref.asgi.scope import Receive, Scope, Send
from toolref.edits.wire import MEDIA_TYPE
from toolref.receiving.registry_edits import RAISE_SECONDS, RECHECK_SECONDS
from toolref.sending.said import RECENT
from toolref_server.app import create_app
from toolref_server.settings import Settings

pytestmark = pytest.mark.engine
TIMEOUT = 30  # a net for a hang, not a timing check
MALFORMED = "urn:toolref:problem:malformed-body"


class Asked:
    """The registry app, counting the capabilities asked of it."""

    def __init__(self, app: Any) -> None:
        self.app, self.capabilities = app, 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/v1/capabilities":
            self.capabilities += 1
        await self.app(scope, receive, send)


@dataclass
class Stack:
    url: str
    registry: Older  # set its `version` to roll it back or forward
    asked: Asked
    middleware: ToolRefMiddleware
    got: list[bytes] = field(default_factory=list)  # the bodies the app got, in order


@asynccontextmanager
async def backend(redis: Redis) -> AsyncIterator[Stack]:
    """The app behind `ToolRefMiddleware`, its registry (`Older`, at 6) the real one."""
    got: list[bytes] = []

    async def chat(request: Request) -> JSONResponse:
        got.append(await request.body())
        return JSONResponse({"choices": [{"message": {"role": "assistant", "content": "ok"}}]})

    older = Older(create_app(Settings(redis_url="unused"), redis=redis), 6)
    asked = Asked(older)
    async with serve(asked) as registry_url:
        registry = AsyncRegistryClient(registry_url, retries=0)
        middleware = ToolRefMiddleware(
            Starlette(routes=[Route("/chat", chat, methods=["POST"])]), registry
        )
        async with serve(middleware) as url:
            yield Stack(url + "/chat", older, asked, middleware, got)
        await registry.aclose()


class Recorded(httpx.AsyncBaseTransport):
    """Every request sent, with its answer's `Toolref-Edits`."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.sent: list[tuple[httpx.Request, int, str | None]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        self.sent.append((request, response.status_code, response.headers.get("toolref-edits")))
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class Conversation:
    """An app's conversation: each turn adds a tool call, its result and a question."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "rolled back behind a middleware"},
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


async def test_a_registry_rolled_back_behind_a_middleware_costs_one_resend(
    redis: Redis,
) -> None:
    """Rolled back from 6 to 4: before, each edit after it was refused (415), the sender
    paused and, told 6 again, wrote version 5's bytes after each pause, every one refused,
    for ever (here: the turn after the refusal went as it is, paused). Now the refused turn
    goes again as it is, and every later turn is one edit of version 4, also past
    `RECENT` (the middleware tells 4 now, not only the refusal). Rolled forward, the
    middleware tells 6 again once it asked (`RAISE_SECONDS` after its last question), and the
    sender follows its rule (`toolref.sending.said`)."""
    now = [1000.0]
    manager = ToolReferenceManager()
    manager.sender.clock = lambda: now[0]
    conversation = Conversation()
    transport = Recorded()
    async with (
        backend(redis) as stack,
        httpx.AsyncClient(transport=transport, timeout=TIMEOUT) as client,
    ):
        stack.middleware.registry_edits.clock = lambda: now[0]

        async def turn() -> list[tuple[httpx.Request, int, str | None]]:
            now[0] += 0.5  # two turns a second: within the pause a 415 begins (1 s)
            payload = conversation.step()
            before = len(transport.sent)
            answer = await manager.apost(client, stack.url, json=payload)
            assert answer.status_code == 200, answer.text  # the app never sees the refusal
            assert stack.got[-1] == body_of(payload)  # the exact bytes
            return transport.sent[before:]

        for _ in range(2):
            await turn()
        assert written(transport.sent[-1][0].content) == 5
        stack.registry.version = 4
        refused = await turn()
        assert [(r.headers["content-type"], status) for r, status, _ in refused] == [
            (MEDIA_TYPE, 415),
            ("application/json", 200),
        ]
        assert refused[1][2] == "4"  # the request as it is is told what the registry reads
        for n in range(4):
            if n == 2:
                now[0] += RECENT + 1  # what the refusal said is old: the answers say 4
            sent = await turn()
            assert [(r.headers["content-type"], status) for r, status, _ in sent] == [
                (MEDIA_TYPE, 200)
            ], n
            assert written(sent[0][0].content) == 4
            assert sent[0][2] == "4"
        # rolled forward: an edit after `RAISE_SECONDS` has the registry asked again (in the
        # background), the answers say 6, and once 4 was not said for `RECENT` the sender
        # writes version 5's bytes again
        stack.registry.version = 6
        now[0] += RAISE_SECONDS
        assert (await turn())[0][2] == "4"
        rechecking = stack.middleware.registry_edits.rechecking
        assert rechecking is not None
        await rechecking
        sent = await turn()
        assert (written(sent[0][0].content), sent[0][2]) == (4, "6")
        now[0] += RECENT
        sent = await turn()
        assert [(r.headers["content-type"], status) for r, status, _ in sent] == [(MEDIA_TYPE, 200)]
        assert (written(sent[0][0].content), sent[0][2]) == (5, "6")


async def test_the_middleware_asks_again_bounded_and_follows_a_roll_forward(
    redis: Redis,
) -> None:
    """Edits refused as unreadable by the registry, several at once and more later: its
    capabilities are asked once more, not once per refusal (one question in flight, at most
    once per `RECHECK_SECONDS`), and the 415 says what it stands for. Rolled forward, the
    middleware tells the higher version again once `RAISE_SECONDS` passed (asked in the
    background, on a request)."""
    edit = bytes([5, 0, 0])  # version 5's compact header: a registry of 4 refuses it
    async with backend(redis) as stack, httpx.AsyncClient(timeout=TIMEOUT) as client:
        now = [1000.0]
        stack.middleware.registry_edits.clock = lambda: now[0]

        async def offered() -> str | None:
            answer = await client.post(stack.url, json={"messages": []}, headers=OFFER)
            assert answer.status_code == 200
            told: str | None = answer.headers.get("toolref-edits")
            return told

        async def refused() -> dict[str, Any]:
            answer = await client.post(stack.url, content=edit, headers=EDIT)
            assert answer.status_code == 415, answer.text
            problem: dict[str, Any] = answer.json()
            return problem

        assert await offered() == "6"
        at_start = stack.asked.capabilities
        stack.registry.version = 4
        problems = await asyncio.gather(*(refused() for _ in range(4)))
        assert {p["cause"] for p in problems} == {MALFORMED}
        assert stack.asked.capabilities == at_start + 1  # one question for all four
        assert await offered() == "4"
        now[0] += RECHECK_SECONDS - 1
        await refused()
        assert stack.asked.capabilities == at_start + 1  # not again within RECHECK_SECONDS
        now[0] += 1
        await refused()
        assert stack.asked.capabilities == at_start + 2
        stack.registry.version = 6  # rolled forward
        assert await offered() == "4"
        now[0] += RAISE_SECONDS
        assert await offered() == "4"  # asked again in the background, not waited for
        rechecking = stack.middleware.registry_edits.rechecking
        assert rechecking is not None
        await rechecking
        assert stack.asked.capabilities == at_start + 3
        assert await offered() == "6"
        assert await offered() == "6"
        assert stack.asked.capabilities == at_start + 3  # at its own version: not asked


OFFER = {"toolref-edits": "6"}
EDIT = {"content-type": MEDIA_TYPE}


def test_the_middleware_asks_again_as_often_as_a_sender_relearns() -> None:
    """The middleware's question while it tells a lower version comes once a sender's
    window of versions said (`said.RECENT`) is over: a receiver imports no sender, so the
    two numbers are written twice and kept equal here."""
    from toolref.sending.said import RECENT

    assert RAISE_SECONDS == RECENT
