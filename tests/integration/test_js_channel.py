"""The JS SDK's channel (issue 39: "the Python and JS SDKs get the same"): a Node process
sending through `toolrefFetch()` (client_sdk/js/dist, tests/support/js_channel.mjs) to a
backend whose `ToolRefMiddleware` serves a channel sends every edit as a frame on one
WebSocket, no HTTP request per turn, as Python's `AsyncTransport` does
(tests/integration/test_sdk_channel.py).

Over real sockets (uvicorn): the registry app on the test engine, the LLM-shaped backend of
examples/llm_backend.py behind the middleware, counting its HTTP requests and WebSocket
upgrades. Every turn the app receives exactly the body the Node app wrote, and the Node app
the streamed answer piece by piece; a receiver that drains the channel as a turn is written
(1012, "every turn read was answered") has that turn sent over HTTP and the next on a new
channel; an upgrade refused (404, 401, 429) leaves every turn on HTTP, each answered.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import pytest
from examples.llm_backend import create_backend
from redis.asyncio import Redis
from starlette.applications import Starlette

from tests.conftest import need
from tests.support.processes import ROOT
from tests.support.servers import serve, serve_all
from toolref import AsyncRegistryClient
from toolref.asgi.scope import ASGIApp, Message, Receive, Scope, Send
from toolref.edits.wire import MEDIA_TYPE
from toolref.websocket import channel as frames
from toolref.wire.endpoints import CHANNEL
from toolref_server.app import create_app
from toolref_server.settings import Settings

pytestmark = pytest.mark.engine
SCRIPT: Final = ROOT / "tests" / "support" / "js_channel.mjs"
DIST: Final = ROOT / "client_sdk" / "js" / "dist" / "index.js"
TIMEOUT: Final = 30  # seconds: a net for a hang, not a timing check
TURNS: Final = 6
SYSTEM: Final = "You are terse. " + "Context line " * 200  # worth an edit: resent each turn


@dataclass
class Seen:
    """The backend as served: its HTTP requests (method, path, content type), its WebSocket
    upgrades; `refuse`: answer each upgrade with that status (a toolref problem); `drain_at`:
    on the first channel, close it drained when its `drain_at`-th frame comes, unread."""

    app: ASGIApp
    refuse: int | None = None
    drain_at: int | None = None
    http: list[tuple[str, str, str]] = field(default_factory=list)
    sockets: list[str] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            content_type = dict(scope["headers"]).get(b"content-type", b"").decode()
            self.http.append((scope["method"], scope["path"], content_type))
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        self.sockets.append(scope["path"])
        if self.refuse is not None:
            await receive()  # websocket.connect
            await _refuse(send, self.refuse)
            return
        if self.drain_at is not None and len(self.sockets) == 1:
            receive = _draining(receive, send, self.drain_at)
        await self.app(scope, receive, send)

    def edits_over_http(self) -> int:
        return sum(1 for method, _, kind in self.http if method == "POST" and kind == MEDIA_TYPE)

    def posts(self) -> int:
        return sum(1 for method, _, _ in self.http if method == "POST")


async def _refuse(send: Send, status: int) -> None:
    slug = {404: "not-found", 401: "unauthorized", 429: "quota-exceeded"}[status]
    body = json.dumps({"type": f"urn:toolref:problem:{slug}", "quota": "channels"}).encode()
    headers = [(b"content-type", b"application/problem+json")]
    await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
    await send({"type": "websocket.http.response.body", "body": body})


def _draining(receive: Receive, send: Send, at: int) -> Receive:
    """`receive` that, at the `at`-th frame, closes the channel drained (as a receiver's
    graceful stop does with a turn written as its close went out) without reading it."""
    count = 0

    async def wrapped() -> Message:
        nonlocal count
        message = await receive()
        if message["type"] == "websocket.receive" and message.get("bytes") is not None:
            count += 1
            if count == at:
                code, reason = frames.DRAINED
                await send({"type": "websocket.close", "code": code, "reason": reason})
                return {"type": "websocket.disconnect", "code": code}
        return message

    return wrapped


class Node:
    """tests/support/js_channel.mjs, one request at a time (an asyncio subprocess: the
    servers run on this loop)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls) -> Node:
        if not DIST.is_file():
            need(f"{DIST} is missing: make test builds it (npm run build in client_sdk/js)")
        node = shutil.which("node")
        if node is None:
            need("no node on PATH: the JS SDK's channel test needs node >= 20.19")
        assert node is not None
        process = await asyncio.create_subprocess_exec(
            node,
            str(SCRIPT),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=64 << 20,  # a line holds an answer of a few MiB
        )
        return cls(process)

    async def send(self, url: str, body: bytes) -> dict[str, Any]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        line = {"url": url, "body": body.decode(), "headers": {"content-type": "application/json"}}
        self.process.stdin.write(json.dumps(line).encode() + b"\n")
        await self.process.stdin.drain()
        answer = await asyncio.wait_for(self.process.stdout.readline(), TIMEOUT)
        if not answer:
            assert self.process.stderr is not None
            raise AssertionError(f"js_channel.mjs ended: {(await self.process.stderr.read())!r}")
        record: dict[str, Any] = json.loads(answer)
        assert "error" not in record, record
        return record

    async def close(self) -> int:
        """End its input; its exit code (it exits by itself: an idle channel holds no
        process open)."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        return await asyncio.wait_for(self.process.wait(), TIMEOUT)


def bodies() -> list[bytes]:
    """A conversation's requests, each the one before plus an answer and a question."""
    messages: list[dict[str, str]] = [{"role": "system", "content": SYSTEM}]
    out = []
    for turn in range(TURNS):
        messages.append({"role": "user", "content": f"Question {turn}: é \u2028 {'x' * turn}"})
        body = {"model": "m", "stream": True, "messages": messages}
        out.append(json.dumps(body, ensure_ascii=False, separators=(", ", ": ")).encode())
        messages.append({"role": "assistant", "content": f"You said: Question {turn}"})
    return out


@dataclass
class Backend:
    url: str
    app: Starlette
    seen: Seen


@pytest.fixture
async def registry_url(redis: Redis) -> AsyncIterator[str]:
    async with serve(create_app(Settings(redis_url="unused"), redis=redis)) as url:
        yield url


@asynccontextmanager
async def served(registry_url: str, **seen: Any) -> AsyncIterator[Backend]:
    registry = AsyncRegistryClient(registry_url, retries=0)
    app = create_backend(registry, delay=0.001, channel=True)
    watched = Seen(app, **seen)
    try:
        async with serve_all(watched) as [url]:
            yield Backend(url, app, watched)
    finally:
        await registry.aclose()


async def converse(found: Backend) -> list[dict[str, Any]]:
    node = await Node.start()
    records = [await node.send(found.url + "/v1/chat/completions", body) for body in bodies()]
    assert await node.close() == 0
    return records


def assert_exact(found: Backend, records: list[dict[str, Any]]) -> None:
    """The app got each body the Node app wrote, byte for byte, once; each turn answered
    with the stream the app wrote."""
    assert found.app.state.provider.bodies() == bodies()
    for turn, record in enumerate(records):
        assert record["status"] == 200
        assert f"You said: Question {turn}" in record["answer"].replace('"', "")
        assert record["answer"].rstrip().endswith("data: [DONE]")


async def test_edits_ride_the_channel_the_backend_tells_of(registry_url: str) -> None:
    async with served(registry_url) as found:
        records = await converse(found)
    assert_exact(found, records)
    assert found.seen.sockets == [CHANNEL]  # one upgrade
    assert found.seen.posts() == 1  # the first turn (the offer); none after it
    assert [record["info"]["edit"] for record in records] == [False] + [True] * (TURNS - 1)
    assert all(record["pieces"] > 1 for record in records[1:])  # streamed as it came
    assert all(not record["reports"] for record in records)


async def test_a_drained_close_sends_the_unread_turn_over_http_then_opens_a_new_channel(
    registry_url: str,
) -> None:
    async with served(registry_url, drain_at=2) as found:
        records = await converse(found)
    assert_exact(found, records)  # the unread turn reached the app once, over HTTP
    assert found.seen.sockets == [CHANNEL, CHANNEL]  # a new channel at once: not failed
    assert found.seen.posts() == 2  # the offer, and the turn the drained channel did not read
    assert found.seen.edits_over_http() == 1
    assert all(not record["reports"] for record in records)  # no back-off said


@pytest.mark.parametrize("status", [404, 401, 429])
async def test_a_refused_upgrade_leaves_every_turn_on_http(registry_url: str, status: int) -> None:
    async with served(registry_url, refuse=status) as found:
        records = await converse(found)
    assert_exact(found, records)
    assert found.seen.sockets == [CHANNEL]  # asked once; not again within the back-off
    assert found.seen.edits_over_http() == TURNS - 1
    said = [line for record in records for line in record["reports"]]
    assert len(said) == 1
    assert f"the upgrade was answered {status}" in said[0]
    if status == 429:
        assert "quota-exceeded, quota channels" in said[0]


async def test_an_answer_past_the_window_streams_as_its_reader_grants_it_back(
    registry_url: str,
) -> None:
    """The backend grants windows (1 MiB, on its 101): an answer of several MiB reaches the
    Node app whole over the channel only because the SDK grants back what its reader took
    (without credit the receiver waits, then breaks the answer off)."""
    large = "y" * (3 << 20)
    first, second = bodies()[:2]
    turn = json.loads(second)
    turn["messages"][-1]["content"] = large
    turn["stream"] = False  # one JSON answer (streamed, it would be 32 characters an event)
    big = json.dumps(turn).encode()
    async with served(registry_url) as found:
        node = await Node.start()
        await node.send(found.url + "/v1/chat/completions", first)
        record = await node.send(found.url + "/v1/chat/completions", big)
        assert await node.close() == 0
    assert found.app.state.provider.bodies() == [first, big]
    assert record["status"] == 200
    assert record["info"]["edit"]
    assert large in record["answer"]
    assert found.seen.sockets == [CHANNEL]
    assert found.seen.posts() == 1


async def test_edits_to_the_gateway_ride_its_channel(redis: Redis) -> None:
    """The gateway tells of its channel too: a Node app pointed at it sends its edits there,
    and the provider gets what the app wrote, byte for byte, nothing of toolref's."""
    provider = create_backend(None, delay=0.001)
    async with serve(provider) as provider_url:
        settings = Settings(redis_url="unused", upstreams=f"up={provider_url}")
        seen = Seen(create_app(settings, redis=redis))
        async with serve_all(seen) as [url]:
            records = await converse(Backend(url + "/llm/up", provider, seen))
    assert_exact(Backend(url, provider, seen), records)
    assert seen.sockets == [CHANNEL]
    assert seen.posts() == 1
    for arrival in provider.state.provider.requests:
        assert not any(name.lower().startswith("toolref-") for name, _ in arrival.headers)
