"""The SDK's channel (issue 38: the chat-backend path costs what the relay's does): the
official async SDKs through `toolref.AsyncTransport` to a backend whose `ToolRefMiddleware`
serves a channel send every edit over one WebSocket, no HTTP head per turn.

Over real sockets (uvicorn): the registry app on the test engine, the LLM-shaped backend of
examples/llm_backend.py behind the middleware; only the LLM provider is scripted. Every
turn the backend receives exactly the body the SDK built and the SDK the answer streamed as
the app wrote it; a backend that tells of no channel is never asked for one, and one whose
channel is refused (a proxy without WebSockets) gets every turn over HTTP.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial

import httpx2
import pytest
from examples.llm_backend import create_backend
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.routing import Mount

from tests.integration.test_sdk_transport import (
    TASKS,
    Client,
    Run,
    anthropic_async,
    assert_received_what_the_sdk_sent,
    assert_the_model_read_every_result,
    openai_async,
)
from tests.support.servers import edit_header, serve, serve_all
from toolref import AsyncRegistryClient, ToolReferenceManager
from toolref.asgi.scope import ASGIApp, Receive, Scope, Send
from toolref.edits.wire import VERSION as EDITS_VERSION
from toolref.sending import channel_transport
from toolref.websocket import channel as frames
from toolref.websocket.client import Message
from toolref.websocket.driver import Refusal, connect
from toolref.wire.endpoints import CHANNEL
from toolref.wire.headers import CHANNEL_HEADER, EDITS_HEADER
from toolref_server.app import create_app
from toolref_server.settings import Settings

pytestmark = pytest.mark.engine
CLIENTS = {
    "openai.AsyncOpenAI": partial(openai_async, channel=True),
    "anthropic.AsyncAnthropic": partial(anthropic_async, channel=True),
}


@dataclass
class Seen:
    """The backend as served, counting WebSocket upgrades (refused when `refuse`, as a
    proxy without WebSockets would) and the HTTP requests that carried an edit."""

    app: ASGIApp
    refuse: bool = False
    sockets: list[str] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            self.sockets.append(scope["path"])
            if self.refuse:
                await receive()
                await send({"type": "websocket.close", "code": 1008})
                return
        await self.app(scope, receive, send)


@dataclass
class Backend:
    url: str
    app: Starlette  # the backend app behind the middleware
    seen: Seen


@pytest.fixture
async def registry_url(redis: Redis) -> AsyncIterator[str]:
    service = create_app(Settings(redis_url="unused"), redis=redis)
    async with serve(service) as url:
        yield url


@asynccontextmanager
async def served(
    registry_url: str, *, channel: bool, refuse: bool = False
) -> AsyncIterator[Backend]:
    """A backend behind the middleware (serving a channel when `channel`), as served."""
    registry = AsyncRegistryClient(registry_url, retries=0)
    app = create_backend(registry, delay=0.001, channel=channel)
    seen = Seen(app, refuse=refuse)
    async with serve_all(seen) as [url]:
        yield Backend(url, app, seen)
    await registry.aclose()


def over_http(run: Run) -> list[bool]:
    """Per request the SDK's transport sent over HTTP: whether it was an edit."""
    return [edit_header(request) is not None for request in run.wire]


@pytest.mark.parametrize("client", CLIENTS.values(), ids=CLIENTS.keys())
async def test_edits_ride_the_channel_a_backend_tells_of(registry_url: str, client: Client) -> None:
    async with served(registry_url, channel=True) as found:
        run = await client(found.url, Run(ToolReferenceManager()))
    assert_received_what_the_sdk_sent(run, found.app)
    assert_the_model_read_every_result(run)
    # the first request as the SDK built it (offering edits, told of the channel) over
    # HTTP; every later one an edit, over the one channel
    assert over_http(run) == [False]
    assert found.seen.sockets == [CHANNEL]
    assert run.manager.savings.edits == 2 * len(TASKS) - 1
    assert run.manager.savings.resends == 0


@pytest.mark.parametrize("client", CLIENTS.values(), ids=CLIENTS.keys())
async def test_a_backend_that_tells_of_no_channel_is_never_asked_for_one(
    registry_url: str, client: Client
) -> None:
    async with served(registry_url, channel=False) as found:
        run = await client(found.url, Run(ToolReferenceManager()))
    assert_received_what_the_sdk_sent(run, found.app)
    assert over_http(run) == [False] + [True] * (2 * len(TASKS) - 1)
    assert found.seen.sockets == []


async def test_a_refused_channel_leaves_every_edit_on_http(registry_url: str) -> None:
    async with served(registry_url, channel=True, refuse=True) as found:
        run = await openai_async(found.url, Run(ToolReferenceManager()), channel=True)
    assert_received_what_the_sdk_sent(run, found.app)
    assert_the_model_read_every_result(run)
    assert over_http(run) == [False] + [True] * (2 * len(TASKS) - 1)
    assert found.seen.sockets == [CHANNEL]  # asked once; not again within the retry time


async def test_the_backend_says_where_its_channel_is_only_when_it_serves_one(
    registry_url: str,
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "Say hi."}]}
    told = {}
    for channel in (True, False):
        async with served(registry_url, channel=channel) as found, httpx2.AsyncClient() as http:
            answer = await http.post(
                found.url + "/v1/chat/completions",
                json=body,
                headers={EDITS_HEADER: str(EDITS_VERSION)},
            )
            plain = await http.post(found.url + "/v1/chat/completions", json=body)
        assert answer.status_code == plain.status_code == 200
        assert answer.headers[EDITS_HEADER] == str(EDITS_VERSION)
        assert CHANNEL_HEADER not in plain.headers  # only to a sender offering edits
        told[channel] = answer.headers.get(CHANNEL_HEADER)
    assert told == {True: CHANNEL, False: None}


@pytest.mark.parametrize("client", CLIENTS.values(), ids=CLIENTS.keys())
async def test_edits_to_the_gateway_ride_its_channel(redis: Redis, client: Client) -> None:
    """The gateway tells of its channel too: an SDK pointed at it sends its edits there,
    and the provider gets what the SDK built, byte for byte."""
    provider = create_backend(None, delay=0.001)
    async with serve(provider) as provider_url:
        settings = Settings(redis_url="unused", upstreams=f"up={provider_url}")
        seen = Seen(create_app(settings, redis=redis))
        async with serve_all(seen) as [url]:
            run = await client(url + "/llm/up", Run(ToolReferenceManager()))
    assert_received_what_the_sdk_sent(run, provider)
    assert_the_model_read_every_result(run)
    assert over_http(run) == [False]
    assert seen.sockets == [CHANNEL]
    for arrival in provider.state.provider.requests:  # nothing of toolref's forwarded
        assert not any(name.lower().startswith("toolref-") for name, _ in arrival.headers)


async def test_the_backends_channel_carries_edits_and_nothing_else(registry_url: str) -> None:
    """A request for the app alone (not an edit) sent on the channel is refused, 403,
    before the app; an upgrade from a browser page (an `Origin`) is refused outright."""
    async with served(registry_url, channel=True) as found:
        socket = await connect(found.url + CHANNEL, [], max_message=1 << 20, connect_timeout=5)
        try:
            body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
            headers = [("content-type", "application/json")]
            await socket.send(frames.Sender().turn(0, "/v1/chat/completions", headers, body))
            message = await asyncio.wait_for(socket.receive(), 10)
            assert isinstance(message, Message)
            assert isinstance(message.data, bytes)
            status, _ = frames.answered(message.data).head()
        finally:
            await socket.close()
        with pytest.raises(Refusal) as refused:
            await connect(
                found.url + CHANNEL,
                [("origin", "https://page.example")],
                max_message=1 << 20,
                connect_timeout=5,
            )
    assert status == 403
    assert found.app.state.provider.requests == []
    assert refused.value.status == 403


async def test_a_channel_idle_past_its_time_is_opened_anew(
    registry_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A channel that sat idle `IDLE_SECONDS` (a NAT may have dropped it without a word)
    is closed before the next turn and a new one opened: here every turn waits past it."""
    monkeypatch.setattr(channel_transport, "IDLE_SECONDS", 0.0)
    async with served(registry_url, channel=True) as found:
        run = await openai_async(found.url, Run(ToolReferenceManager()), channel=True)
    assert_received_what_the_sdk_sent(run, found.app)
    assert over_http(run) == [False]
    assert found.seen.sockets == [CHANNEL] * (2 * len(TASKS) - 1)  # one per edit


async def test_a_backend_mounted_below_a_path_serves_its_channel_below_it(
    registry_url: str,
) -> None:
    """A backend app mounted at `/api` (a Starlette `Mount`) tells of `/api/v1/channel`, and
    its edits ride the channel there."""
    registry = AsyncRegistryClient(registry_url, retries=0)
    app = create_backend(registry, delay=0.001, channel=True)
    seen = Seen(Starlette(routes=[Mount("/api", app)]))
    async with serve_all(seen) as [url]:
        run = await openai_async(url + "/api", Run(ToolReferenceManager()), channel=True)
    await registry.aclose()
    assert_received_what_the_sdk_sent(run, app)
    assert over_http(run) == [False]
    assert seen.sockets == ["/api" + CHANNEL]
