"""A tiny first body goes as it came from every Python sender (docs/edits.md, "Who sends,
who applies"): once its receiver reads edits, a request with no base whose edit would put
more on the wire than it, and that no later turn could be an edit of (no message of
`RELATED_MIN` bytes), is sent as the app made it (`toolref.sending.editor.not_worth_an_edit`,
the rule the relay keeps too); the conversation's next turn, worth an edit, still goes as
one. `ToolReferenceManager`, `toolref.Transport` and `toolref.AsyncTransport`, over real
sockets to a backend behind `ToolRefMiddleware` (the registry on the test engine), and
`AsyncTransport` to the gateway: the app or the provider receives each body byte for byte,
and the tiny body's request carried no more than it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import httpx2
import pytest
from examples.llm_backend import create_backend
from redis.asyncio import Redis
from starlette.applications import Starlette

from tests.support.servers import AsyncWire, Wire, serve, serve_all
from toolref import AsyncRegistryClient, AsyncTransport, ToolReferenceManager, Transport
from toolref.edits.wire import MEDIA_TYPE
from toolref.edits.wire import VERSION as EDITS_VERSION
from toolref.wire.headers import EDITS_HEADER
from toolref_server.app import create_app
from toolref_server.settings import Settings

pytestmark = pytest.mark.engine
TIMEOUT = 30  # a net for a hang, not a timing check
PATH = "/v1/chat/completions"


def _json(value: dict[str, Any]) -> bytes:
    """What an httpx client writes for `json=value` (compact, UTF-8)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


WARM = {"model": "m", "messages": [{"role": "user", "content": "Explain the parser. " * 12}]}
TINY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
FOLLOW = {
    "model": "m",
    "messages": [
        *TINY["messages"],
        {"role": "assistant", "content": "You said: hi"},
        {"role": "user", "content": "Now walk me through the parser, step by step. " * 12},
    ],
}
# Another conversation first (the receiver says it reads edits), then the tiny body, then
# its conversation's next turn.
VALUES = [WARM, TINY, FOLLOW]
BODIES = [_json(value) for value in VALUES]


@dataclass
class Sent:
    """A request as it went over the wire: its media type, body and offer."""

    media: str
    body: bytes
    offer: str | None


def _sent(headers: Any, body: bytes) -> Sent:
    media = headers.get("content-type", "").split(";")[0].strip()
    return Sent(media, body, headers.get(EDITS_HEADER))


@dataclass
class Backend:
    url: str
    app: Starlette


@pytest.fixture
async def backend(redis: Redis) -> AsyncIterator[Backend]:
    service = create_app(Settings(redis_url="unused", edit_cache_bytes=0), redis=redis)
    async with serve(service) as registry_url:
        registry = AsyncRegistryClient(registry_url, retries=0)
        app = create_backend(registry, delay=0.001)
        async with serve(app) as url:
            yield Backend(url, app)
        await registry.aclose()


async def _through_manager(url: str) -> list[Sent]:
    manager = ToolReferenceManager()
    sent: list[Sent] = []

    def converse() -> None:
        hooks = {"request": [lambda r: sent.append(_sent(r.headers, r.read()))]}
        with httpx.Client(event_hooks=hooks, timeout=TIMEOUT) as http:
            _bare(http.headers)
            for value in VALUES:
                assert manager.post(http, url + PATH, json=value).status_code == 200

    await asyncio.to_thread(converse)
    return sent


async def _through_transport(url: str) -> list[Sent]:
    wire = Wire()

    def converse() -> None:
        with httpx2.Client(transport=Transport(wire), timeout=TIMEOUT) as http:
            _bare(http.headers)
            for body in BODIES:
                answer = http.post(url + PATH, content=body, headers=_JSON)
                assert answer.status_code == 200

    await asyncio.to_thread(converse)
    return [_sent(request.headers, request.read()) for request in wire.sent]


async def _through_async_transport(url: str) -> list[Sent]:
    wire = AsyncWire()
    async with httpx2.AsyncClient(transport=AsyncTransport(wire), timeout=TIMEOUT) as http:
        _bare(http.headers)
        for body in BODIES:
            answer = await http.post(url + PATH, content=body, headers=_JSON)
            assert answer.status_code == 200
    return [_sent(request.headers, await request.aread()) for request in wire.sent]


_JSON = {"content-type": "application/json"}


def _bare(headers: httpx.Headers | httpx2.Headers) -> None:
    """A client's default headers removed (a client that sends few, as a script's does): a
    tiny request's headers are then too short for the shipped dictionary (edits of version
    7) to make its edit cheaper than the request as it came. With httpx's defaults kind 7
    compresses them enough that the edit of this tiny body costs a byte less, and goes."""
    for name in ("accept", "accept-encoding", "user-agent"):
        headers.pop(name, None)


SENDERS = {
    "ToolReferenceManager": _through_manager,
    "Transport": _through_transport,
    "AsyncTransport": _through_async_transport,
}


def _assert_tiny_as_it_came(sent: list[Sent]) -> None:
    """The first as it is (the offer), the tiny one as it is (no more on the wire than the
    body), its next turn an edit."""
    assert [item.media for item in sent] == ["application/json", "application/json", MEDIA_TYPE]
    warm, tiny, follow = sent
    assert warm.body == BODIES[0]
    assert tiny.body == BODIES[1]  # the wire carried the body, and no more
    assert tiny.offer == str(EDITS_VERSION)  # still offering edits
    assert follow.offer is None
    assert len(follow.body) < len(BODIES[2])


@pytest.mark.parametrize("name", SENDERS)
async def test_a_tiny_first_body_goes_as_it_came_to_a_backend(backend: Backend, name: str) -> None:
    sent = await SENDERS[name](backend.url)
    _assert_tiny_as_it_came(sent)
    assert backend.app.state.provider.bodies() == BODIES  # each exactly at the app


async def test_a_tiny_first_body_goes_as_it_came_through_the_gateway(redis: Redis) -> None:
    """The gateway passes a request as it came to the provider as it is."""
    provider = create_backend(None, delay=0.001)
    async with serve(provider) as provider_url:
        settings = Settings(redis_url="unused", upstreams=f"up={provider_url}")
        async with serve_all(create_app(settings, redis=redis)) as [url]:
            sent = await _through_async_transport(url + "/llm/up")
    _assert_tiny_as_it_came(sent)
    assert provider.state.provider.bodies() == BODIES  # each exactly at the provider
