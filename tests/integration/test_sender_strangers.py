"""Both SDKs' senders before an answer to an edit from no receiver of edits: no
`Toolref-History`, no `Toolref-Edits`, no toolref problem (review: answers that are not
toolref's).

Over real sockets: a raw proxy (`Proxy`) in front of the real gateway (registry and gateway
in one app, on the test engine), whose upstream is a provider that counts its calls. The
proxy forwards every request as it came, and is told what to do with an edit: answer 504
after the gateway answered it (a proxy's timeout after a long generation: the provider was
called), or refuse it 400 unread (a firewall refusing the unknown media type). The senders
are Python's `AsyncTransport` and JS's `toolrefFetch` (client_sdk/js/dist, in node:
tests/support/js_replay.mjs).

Before, either SDK sent any refusal from no receiver of edits (4xx or 5xx) again as the
request as it is: behind the proxy's 504 the provider got the conversation twice (a second
model call the user pays for, and a second answer the app never saw); and a refusal of the
media type other than 415 paused nothing, so behind a firewall refusing edits 400 every
turn cost a refused edit and a resend (the gateway's answers say `Toolref-Edits` again).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.conftest import need
from tests.integration.test_js_parity import DIST, Replay
from tests.support.servers import serve, serve_all
from toolref import AsyncTransport, ToolReferenceManager
from toolref.edits.wire import MEDIA_TYPE
from toolref_server.app import create_app
from toolref_server.settings import Settings

pytestmark = pytest.mark.engine
TIMEOUT = 30  # a net for a hang, not a timing check
PATH = "/llm/up/v1/chat/completions"
HEADERS = {"content-type": "application/json"}


@dataclass
class Counting:
    """The provider: an OpenAI chat completion for each call, counted."""

    calls: int = 0

    async def chat(self, request: Request) -> JSONResponse:
        await request.body()
        self.calls += 1
        message = {"role": "assistant", "content": f"answer {self.calls}"}
        return JSONResponse(
            {"id": "c", "object": "chat.completion", "choices": [{"message": message}]}
        )


@dataclass
class Proxy:
    """A raw proxy in front of `target`; `edits` says what it does with an edit: "forward",
    "504" (forwarded, then answered 504 as a proxy timing out), "400" (refused, unread)."""

    target: str = ""
    edits: str = "forward"
    kinds: list[str] = field(default_factory=list)  # "edit" / "as it is", in order

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        request = Request(scope, receive)
        body = await request.body()
        edit = request.headers.get("content-type") == MEDIA_TYPE
        self.kinds.append("edit" if edit else "as it is")
        if edit and self.edits == "400":
            await Response("<html>400 Bad Request</html>", 400, media_type="text/html")(
                scope, receive, send
            )
            return
        headers = [
            (k, v) for k, v in request.headers.items() if k not in ("host", "content-length")
        ]
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            answer = await client.post(
                self.target + request.url.path, content=body, headers=headers
            )
        if edit and self.edits == "504":
            reply = Response("<html>504 Gateway Time-out</html>", 504, media_type="text/html")
        else:
            kept = {k: v for k, v in answer.headers.items() if k not in _HOP}
            reply = Response(answer.content, answer.status_code, headers=kept)
        await reply(scope, receive, send)


_HOP = ("content-length", "transfer-encoding", "connection", "content-encoding")


@dataclass
class Stack:
    url: str  # the proxy's
    proxy: Proxy
    provider: Counting


@asynccontextmanager
async def stack(redis: Redis) -> AsyncIterator[Stack]:
    provider = Counting()
    app = Starlette(routes=[Route("/v1/chat/completions", provider.chat, methods=["POST"])])
    async with serve(app) as provider_url:
        settings = Settings(redis_url="unused", upstreams=f"up={provider_url}")
        proxy = Proxy()
        async with serve_all(create_app(settings, redis=redis), proxy) as [gateway_url, url]:
            proxy.target = gateway_url
            yield Stack(url, proxy, provider)


def payload(turn: int) -> dict[str, Any]:
    messages = [{"role": "user", "content": f"turn {i}: " + "why " * 200} for i in range(turn)]
    return {"model": "m", "messages": messages}


@pytest.fixture
def replay() -> Iterator[Replay]:
    node = shutil.which("node")
    if node is None:
        need("no node on PATH: the JS SDK's side needs node >= 20.19")
    if not DIST.is_file():
        need(f"{DIST} is missing: npm run build in client_sdk/js")
    assert node is not None
    running = Replay(node, zstd=False)
    running.zstd = None  # type: ignore[assignment]  # either: this test reads no records
    yield running
    running.close()


class Python:
    """The Python SDK's sender: one `AsyncTransport` for every turn; its clock is `now`
    (seconds), which a test moves on."""

    def __init__(self, url: str) -> None:
        self.url, self.now = url, 0.0
        manager = ToolReferenceManager()
        manager.sender.clock = lambda: self.now
        transport = AsyncTransport(httpx.AsyncHTTPTransport(), manager=manager)
        self.client = httpx.AsyncClient(transport=transport, timeout=TIMEOUT)

    async def turn(self, n: int) -> int:
        answer = await self.client.post(self.url + PATH, json=payload(n), headers=HEADERS)
        return answer.status_code

    async def aclose(self) -> None:
        await self.client.aclose()


def js_turn(replay: Replay, url: str, n: int) -> int:
    """Turn `n` through the JS SDK (one `toolrefFetch` for every turn): its status."""
    line = {"url": url + PATH, "body": json.dumps(payload(n)), "headers": HEADERS}
    assert replay.process.stdin is not None
    assert replay.process.stdout is not None
    replay.process.stdin.write(json.dumps(line) + "\n")
    replay.process.stdin.flush()
    record = replay.process.stdout.readline()
    if not record:
        raise AssertionError(f"js_replay.mjs ended: {replay.stderr()}")
    return int(json.loads(record)["status"])


async def test_python_hands_a_proxys_504_to_an_edit_on_without_a_second_model_call(
    redis: Redis,
) -> None:
    async with stack(redis) as running:
        sender = Python(running.url)
        assert [await sender.turn(n) for n in (1, 2)] == [200, 200]
        assert running.proxy.kinds == ["as it is", "edit"]  # an edit, answered
        running.proxy.edits, calls = "504", running.provider.calls
        assert await sender.turn(3) == 504  # the app's to retry, as without toolref
        assert running.provider.calls == calls + 1  # the provider got the turn once
        assert running.proxy.kinds[2:] == ["edit"]
        running.proxy.edits = "forward"  # the app retries: the endpoint forgotten, as it is
        assert await sender.turn(3) == 200
        assert running.proxy.kinds[3:] == ["as it is"]
        await sender.aclose()


async def test_js_hands_a_proxys_504_to_an_edit_on_without_a_second_model_call(
    redis: Redis, replay: Replay
) -> None:
    async with stack(redis) as running:

        async def turn(n: int) -> int:
            return await asyncio.to_thread(js_turn, replay, running.url, n)

        assert [await turn(n) for n in (1, 2)] == [200, 200]
        assert running.proxy.kinds == ["as it is", "edit"]
        running.proxy.edits, calls = "504", running.provider.calls
        assert await turn(3) == 504
        assert running.provider.calls == calls + 1
        assert running.proxy.kinds[2:] == ["edit"]
        running.proxy.edits = "forward"
        assert await turn(3) == 200
        assert running.proxy.kinds[3:] == ["as it is"]


async def test_python_behind_a_firewall_refusing_edits_400_costs_a_few_refused_edits(
    redis: Redis,
) -> None:
    """Two hours of turns a minute apart (the sender's clock), each answered 200 with
    `Toolref-Edits` by the gateway behind: edits are tried again after 5 minutes, doubled,
    at most an hour apart (`toolref.sending.stranger`), not at every turn."""
    async with stack(redis) as running:
        running.proxy.edits = "400"
        sender = Python(running.url)
        for n in range(1, 121):
            sender.now += 60.0
            assert await sender.turn(n) == 200
        await sender.aclose()
    refused = running.proxy.kinds.count("edit")
    # edits at minutes 2, 7, 17, 37, 77: before, 119 (one a turn)
    assert refused == 5, running.proxy.kinds
    assert len(running.proxy.kinds) == 120 + refused
