"""A chat backend's `ToolRefMiddleware` whose registry refuses an edit: what its sender does
(review: an edit of more entries than the registry allows, behind a middleware).

The parts are real: the registry app on the test engine and the app behind the middleware,
each served by uvicorn; the Python SDK's `AsyncTransport` (HTTP and channel) and
`Transport` send.

Before, the middleware turned the registry's 413 `too-many-items` (its
`TOOLREF_MAX_EDIT_ENTRIES` set below the default) into a bare 415: the sender resent the
request whole, but paused that endpoint's edits (1 s, doubled to 30 s) and learnt no limit,
so each long turn after a pause cost a refused edit, and a short conversation's turns
during it went whole. The 415 stays (the last stop's senders resend on it), and now says
what the registry said (`cause`: `urn:toolref:problem:too-many-items`, its `limit`): the
sender applies the entries rule instead (`toolref.sending.entries`: the limit learnt, the
request resent as it is, no pause). And the registry's own 503 `overloaded` reached the
app as a 503 (the middleware passed it on as if its own budget were full), though the
request as it is, which the app takes without the registry, would have been served: now
it is a 415 too, on which the sender resends it as it is.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
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

from tests.adversarial.gateway_wire import gateway, request_bytes
from tests.integration.edit_client import AGENT_HEADERS
from tests.integration.test_edits_entries_limit import LIMIT, entries_of
from tests.integration.test_edits_many_messages import body_of
from tests.support.servers import serve
from toolref import AsyncRegistryClient, AsyncTransport, ToolRefMiddleware, Transport
from toolref.edits.wire import MEDIA_TYPE
from toolref.sending.sender import Sender

pytestmark = pytest.mark.engine
PATH = "/v1/messages"
CHANNEL = "/v1/channel"
TOO_MANY = "urn:toolref:problem:too-many-items"
TIMEOUT = 30  # a net for a hang, not a timing check


@dataclass
class Wire:
    """Each attempt over HTTP: its media type, its answer's status and, for a problem, the
    problem document."""

    sent: list[tuple[str, int]] = field(default_factory=list)
    problems: list[dict[str, Any]] = field(default_factory=list)

    def note(self, request: httpx.Request, response: httpx.Response) -> None:
        self.sent.append((request.headers.get("content-type", ""), response.status_code))
        if response.headers.get("content-type", "").startswith("application/problem+json"):
            self.problems.append(json.loads(response.content))


class Recorded(httpx.AsyncHTTPTransport):
    def __init__(self, wire: Wire) -> None:
        super().__init__()
        self.wire = wire

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        if response.status_code >= 400:
            await response.aread()  # a small problem: read here to be noted
        self.wire.note(request, response)
        return response


class SyncRecorded(httpx.HTTPTransport):
    def __init__(self, wire: Wire) -> None:
        super().__init__()
        self.wire = wire

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if response.status_code >= 400:
            response.read()
        self.wire.note(request, response)
        return response


@dataclass
class Backend:
    url: str
    got: list[bytes]  # the bodies the app got, in order
    registry_url: str


@asynccontextmanager
async def backend(redis: Redis, **settings: Any) -> AsyncIterator[Backend]:
    """The app behind `ToolRefMiddleware` (a channel served), on a registry of `settings`."""
    got: list[bytes] = []

    async def messages(request: Request) -> JSONResponse:
        got.append(await request.body())
        return JSONResponse({"type": "message", "content": [{"type": "text", "text": "ok"}]})

    async with gateway(redis, **settings) as registry_url:
        registry = AsyncRegistryClient(registry_url, retries=0)
        app = Starlette(routes=[Route(PATH, messages, methods=["POST"])])
        async with serve(ToolRefMiddleware(app, registry, channel_path=CHANNEL)) as url:
            yield Backend(url, got, registry_url)
        await registry.aclose()


def frozen(sender: Sender) -> None:
    """The sender's clock stands still: a pause begun never ends within the test (no
    wall-clock in the assertions)."""
    sender.clock = lambda: 1000.0


def limit_said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "too-many-items" in r.getMessage()]


def assert_said_once(caplog: pytest.LogCaptureFixture) -> None:
    said = limit_said(caplog)
    assert len(said) == 1, said  # once per endpoint, not once a turn
    assert f"limit of {LIMIT} entries" in said[0]
    assert "TOOLREF_MAX_EDIT_ENTRIES" in said[0]


def assert_refusal_says_too_many(wire: Wire) -> None:
    """The middleware's refusal keeps the 415 older senders resend on, and says why."""
    [problem] = wire.problems
    assert problem["type"] == "urn:toolref:problem:unsupported-media-type"
    assert problem["status"] == 415
    assert problem["cause"] == TOO_MANY
    assert problem["limit"] == LIMIT


TURNS = [body_of(10), body_of(150), body_of(160), body_of(10, "a page")]
# the offer; the long turn's edit refused, then as it is; the longer one as it is at once;
# another conversation within the limit: an edit, no pause in the way
EXPECTED = [
    ("application/json", 200),
    (MEDIA_TYPE, 415),
    ("application/json", 200),
    ("application/json", 200),
    (MEDIA_TYPE, 200),
]


@pytest.mark.parametrize("channel", [False, True], ids=["http", "channel"])
async def test_a_turn_past_the_registrys_entries_limit_learns_it_and_pauses_nothing(
    redis: Redis, channel: bool, caplog: pytest.LogCaptureFixture
) -> None:
    assert entries_of(TURNS[1]) > LIMIT > entries_of(TURNS[3])
    caplog.set_level(logging.WARNING, "toolref.sending.sender")
    async with backend(redis, max_edit_entries=LIMIT) as stack:
        wire = Wire()
        sdk = AsyncTransport(Recorded(wire), channel=channel)
        frozen(sdk.manager.sender)
        async with httpx.AsyncClient(transport=sdk, base_url=stack.url, timeout=TIMEOUT) as http:
            for body in TURNS:
                answer = await http.post(PATH, content=body, headers=AGENT_HEADERS)
                assert answer.status_code == 200, answer.text[:300]  # nothing reaches the app
                assert stack.got[-1] == body
        assert stack.got == TURNS  # each once, byte for byte
        if not channel:  # over HTTP every attempt is on the recorded wire
            assert wire.sent == EXPECTED
            assert_refusal_says_too_many(wire)
        assert not sdk.manager.sender.pauses  # no 415 pause begun
        assert sdk.manager.sender.savings.edits == 1  # the last turn went as an edit
    assert_said_once(caplog)


async def test_the_blocking_transport_alike(redis: Redis, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "toolref.sending.sender")
    async with backend(redis, max_edit_entries=LIMIT) as stack:
        wire = Wire()
        sdk = Transport(SyncRecorded(wire))
        frozen(sdk.manager.sender)

        def turns() -> list[int]:
            with httpx.Client(transport=sdk, base_url=stack.url, timeout=TIMEOUT) as http:
                return [
                    http.post(PATH, content=body, headers=AGENT_HEADERS).status_code
                    for body in TURNS
                ]

        assert await asyncio.to_thread(turns) == [200] * 4
        assert stack.got == TURNS
        assert wire.sent == EXPECTED
        assert_refusal_says_too_many(wire)
    assert_said_once(caplog)


@asynccontextmanager
async def slot_held(registry_url: str) -> AsyncIterator[None]:
    """The registry's one request slot (`TOOLREF_MAX_REQUESTS_IN_FLIGHT=1`) held by a
    client that never reads its answers (`/openapi.json` pipelined, its receive window kept
    small: one request in flight, as tests/adversarial/test_probe_admission.py holds one);
    given back when the block ends."""
    host, _, port = registry_url.removeprefix("http://").partition(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    try:
        await loop.sock_connect(sock, (host, int(port)))
        await loop.sock_sendall(sock, request_bytes("GET", "/openapi.json") * 100)
        async with httpx.AsyncClient(timeout=TIMEOUT) as http:
            for _ in range(500):  # until its buffers are full and its request waits
                probe = await http.get(registry_url + "/v1/capabilities")
                if probe.status_code == 503:
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError("the registry never counted the held request")
        yield
    finally:
        sock.close()


async def test_a_busy_registry_is_no_error_of_the_apps(redis: Redis) -> None:
    """The registry's own 503 `overloaded` (its requests in flight at their limit): the
    request as it is goes to the app, which needs no registry for it."""
    async with backend(redis, max_requests_in_flight=1) as stack:
        wire = Wire()
        sdk = AsyncTransport(Recorded(wire), channel=False)
        frozen(sdk.manager.sender)
        first, second = body_of(10), body_of(12)
        async with httpx.AsyncClient(transport=sdk, base_url=stack.url, timeout=TIMEOUT) as http:
            answer = await http.post(PATH, content=first, headers=AGENT_HEADERS)
            assert answer.status_code == 200, answer.text[:300]
            async with slot_held(stack.registry_url):
                answer = await http.post(PATH, content=second, headers=AGENT_HEADERS)
            assert answer.status_code == 200, answer.text[:300]  # no 503 reaches the app
        assert stack.got == [first, second]
        assert wire.sent == [
            ("application/json", 200),  # the offer
            (MEDIA_TYPE, 415),  # the edit: the registry busy
            ("application/json", 200),  # sent again as it is
        ]
        [problem] = wire.problems
        assert problem["cause"] == "urn:toolref:problem:overloaded"
