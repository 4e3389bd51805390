"""The relay sending edits (issue 30) over real sockets: the relay app in front of the
service's real gateway on the test engine, a provider behind it that records the bytes it
gets (the only fake: what is outside the machine).

Every turn of every edit pattern reaches the provider byte for byte as the agent wrote it;
two gateway instances serving alternate requests (no affinity) cost no extra round trip; a
store flushed mid-conversation is recovered from with no error the agent sees; a gateway
without edits gets each turn as it came; a continuation turn's headers stay within a few
dozen bytes of the agent's credentials; `count_tokens` and Gemini ride the same path.
"""

from __future__ import annotations

import asyncio
import hashlib
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
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.servers import serve, serve_all
from tests.unit.edits.agents import HEADERS, Agent
from toolref.asgi.scope import Receive, Scope, Send
from toolref.edits.wire import MEDIA_TYPE, described
from toolref_relay import Relay, RelayConfig
from toolref_relay.as_edit import OFFLOAD_BYTES
from toolref_server.app import create_app
from toolref_server.settings import Settings

pytestmark = pytest.mark.engine

KEY = "tenant-key-of-the-edits-tests"
TIMEOUT = 30
# The agent's credential, as the relay sends it apart from segment 0.
CREDENTIAL = [(k, v) for k, v in HEADERS if k.lower() == "x-api-key"]
HOP = frozenset({"host", "content-length", "connection", "accept-encoding", "accept"})


@dataclass
class Provider:
    """Records what reaches it (path with query, headers, body) and answers as each API
    does: Messages JSON, a token count, Gemini JSON, or Gemini's event stream."""

    seen: list[tuple[str, list[tuple[str, str]], bytes]] = field(default_factory=list)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/{path:path}", self._answer, methods=["POST"])])

    async def _answer(self, request: Request) -> Response:
        body = await request.body()
        query = request.url.query
        path = request.url.path + (f"?{query}" if query else "")
        self.seen.append((path, [(k.decode(), v.decode()) for k, v in request.headers.raw], body))
        if path.endswith("/count_tokens"):
            return JSONResponse({"input_tokens": len(body) // 4})
        if ":streamGenerateContent" in path:
            return StreamingResponse(_gemini_events(), media_type="text/event-stream")
        if ":generateContent" in path:
            return JSONResponse({"candidates": [{"content": {"parts": [{"text": "ok"}]}}]})
        return JSONResponse({"type": "message", "content": [{"type": "text", "text": "ok"}]})


async def _gemini_events() -> AsyncIterator[bytes]:
    for word in ("one", "two", "three"):
        chunk = {"candidates": [{"content": {"parts": [{"text": word}], "role": "model"}}]}
        yield b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n"


GEMINI_EVENTS = b"".join(
    b"data: "
    + json.dumps({"candidates": [{"content": {"parts": [{"text": w}], "role": "model"}}]}).encode()
    + b"\r\n\r\n"
    for w in ("one", "two", "three")
)


class Alternating(httpx.AsyncBaseTransport):
    """A load balancer without affinity: request n goes to gateway n mod N (every request,
    capabilities and resends included); `requests` counts the LLM ones."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = [httpx.URL(url) for url in urls]
        self.inner = httpx.AsyncHTTPTransport()
        self.turn = 0
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        target = self.urls[self.turn % len(self.urls)]
        self.turn += 1
        request.url = request.url.copy_with(host=target.host, port=target.port)
        request.headers["host"] = f"{target.host}:{target.port}"
        if request.url.path.startswith("/llm/"):
            self.requests.append(request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class WithoutEdits:
    """The gateway as one before edits answers: capabilities without `edits`; `refuse`:
    capabilities with them, but a 415 to the edit's media type (both an old gateway could)."""

    def __init__(self, app: Any, refuse: bool = False) -> None:
        self.app, self.refuse = app, refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        media = dict(scope["headers"]).get(b"content-type", b"")
        if self.refuse and media == MEDIA_TYPE.encode():
            await Response(b"{}", 415, media_type="application/problem+json")(scope, receive, send)
            return
        if scope["path"] != "/v1/capabilities" or self.refuse:
            await self.app(scope, receive, send)
            return

        async def dropped(message: Any) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                document = json.loads(message["body"])
                document.pop("edits", None)
                message = {**message, "body": json.dumps(document).encode()}
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message["headers"] if k != b"content-length"]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, dropped)


@dataclass
class Stack:
    relay_url: str
    relay: Relay
    provider: Provider
    balancer: Alternating
    lines: list[str]


@asynccontextmanager
async def relayed(
    redis: Redis,
    gateways: int = 1,
    wrap: Any = None,
    edits: bool = True,
    relay_context: bool | None = None,
    **settings: Any,
) -> AsyncIterator[Stack]:
    """The relay before `gateways` instances of the service (one engine), alternating."""
    provider = Provider()
    async with serve_all(provider.app()) as [provider_url]:
        tenant = f"t={hashlib.sha256(KEY.encode()).hexdigest()}"
        config = Settings(
            redis_url="unused",
            upstreams=f"anthropic={provider_url},gemini={provider_url}",
            api_keys=tenant,
            **settings,
        )
        apps = [create_app(config, redis=redis) for _ in range(gateways)]
        if wrap is not None:
            apps = [wrap(app) for app in apps]
        async with serve_all(*apps) as urls:
            balancer = Alternating(urls)
            lines: list[str] = []
            options = RelayConfig(urls[0], key=KEY, edits=edits, context_editing=relay_context)
            relay = Relay(options, report=lines.append, transport=balancer)
            async with serve(relay) as relay_url:
                yield Stack(relay_url, relay, provider, balancer, lines)


async def post(
    agent: httpx.AsyncClient, stack: Stack, body: bytes, path: str = "/v1/messages"
) -> httpx.Response:
    answer = await agent.post(
        stack.relay_url + "/llm/anthropic" + path, content=body, headers=HEADERS
    )
    assert answer.status_code == 200, answer.text
    return answer


def assert_exact(stack: Stack, body: bytes, path: str = "/v1/messages") -> None:
    """The provider got the agent's body byte for byte, and its headers as it sent them
    (in its order, as edits restore them and a turn as it came keeps them)."""
    got_path, headers, got = stack.provider.seen[-1]
    assert got_path == path
    assert got == body
    found = [(k, v) for k, v in headers if k not in HOP]
    wanted = [(k.lower(), v) for k, v in HEADERS if k.lower() not in HOP]
    assert found == wanted


PATTERNS = [
    pytest.param({"marks": 1}, id="one-mark"),
    pytest.param({"marks": 2, "text_results": True}, id="two-marks-text-results"),
    pytest.param({"marks": 5, "style": "pretty", "odd": True}, id="five-marks-odd-spellings"),
    pytest.param({"marks": 2, "unanswered": True, "style": "ascii"}, id="unanswered-call"),
]


@pytest.mark.parametrize("pattern", PATTERNS)
async def test_every_turn_reaches_the_provider_exactly_through_two_gateways(
    redis: Redis, pattern: dict[str, Any]
) -> None:
    """Two conversations interleaved, edits in the middle, compaction and a regenerate,
    through two gateway instances taking alternate requests: every body byte for byte, no
    resend (each turn one request: the other instance finds the base in the store), and
    every later turn a fraction of its body."""
    agents = [Agent(seed, **pattern) for seed in (1, 2)]
    moves = ["step"] * 6 + ["edit_middle", "step", "insert_middle", "delete_middle", "step"]
    moves += ["compact", "step", "regenerate", "step"]
    async with relayed(redis, gateways=2) as stack, httpx.AsyncClient(timeout=TIMEOUT) as agent:
        for move in moves:
            for conversation in agents:
                if move != "regenerate":
                    getattr(conversation, move)()
                body = conversation.body()
                before = len(stack.balancer.requests)
                answer = await post(agent, stack, body)
                assert_exact(stack, body)
                assert len(stack.balancer.requests) == before + 1, move  # no resend
                sent = stack.balancer.requests[-1]
                assert sent.headers["content-type"] == MEDIA_TYPE
                raw, wire = (
                    int(p.split("=")[1]) for p in answer.headers["toolref-savings"].split(", ")[:2]
                )
                if move == "step" and len(conversation.messages) > 12:
                    assert wire < raw / 3, (move, raw, wire)


async def test_a_header_in_utf_8_reaches_the_provider_byte_for_byte(redis: Redis) -> None:
    """An agent's header whose value is UTF-8 (`x-title: café`, as an app names itself):
    the relay read it as bytes and sent it on as text httpx refused (500 on every turn); it
    reaches the provider as its bytes, as it came and in every edit."""
    agent_headers = [(k.encode(), v.encode()) for k, v in HEADERS]
    agent_headers.append((b"x-title", "café ☕".encode()))
    conversation = Agent(5)
    async with relayed(redis) as stack, httpx.AsyncClient(timeout=TIMEOUT) as agent:
        for _ in range(4):
            conversation.step()
            answer = await agent.post(
                stack.relay_url + "/llm/anthropic/v1/messages",
                content=conversation.body(),
                headers=agent_headers,
            )
            assert answer.status_code == 200, answer.text
            _, seen, body = stack.provider.seen[-1]
            assert body == conversation.body()
            assert ("x-title", "café ☕") in seen
        assert stack.balancer.requests[-1].headers["content-type"] == MEDIA_TYPE  # an edit


async def test_a_store_flushed_mid_conversation_is_recovered_from_by_itself(
    redis: Redis,
) -> None:
    """The store emptied (a restart, an eviction) with no cache in the gateways: the next
    turn misses its base and its pieces, the relay resends (at most three times), the agent
    gets its answer, the provider the exact body; the turn after costs what changed."""
    conversation = Agent(5, marks=2)
    async with (
        relayed(redis, gateways=2, edit_cache_bytes=0) as stack,
        httpx.AsyncClient(timeout=TIMEOUT) as agent,
    ):
        for _ in range(6):
            conversation.step()
            await post(agent, stack, conversation.body())
        await redis.flushdb()
        conversation.step()
        before = len(stack.balancer.requests)
        await post(agent, stack, conversation.body())
        assert_exact(stack, conversation.body())
        assert 2 <= len(stack.balancer.requests) - before <= 4
        conversation.step()
        before = len(stack.balancer.requests)
        answer = await post(agent, stack, conversation.body())
        assert_exact(stack, conversation.body())
        assert len(stack.balancer.requests) == before + 1
        raw, wire = (
            int(p.split("=")[1]) for p in answer.headers["toolref-savings"].split(", ")[:2]
        )
        assert wire < raw / 3


@pytest.mark.parametrize("refuse", [False, True], ids=["no-capability", "415"])
async def test_a_gateway_without_edits_gets_turns_as_they_came(redis: Redis, refuse: bool) -> None:
    """A gateway whose capabilities lack `edits` never gets one: each turn goes as the
    agent sent it (the relay's manager path, history refs, was retired); one that answers
    415 to an edit gets the turn again as it came, and no edit after it. The agent sees its
    answers either way."""
    conversation = Agent(6)
    wrap = lambda app: WithoutEdits(app, refuse)  # noqa: E731
    async with (
        relayed(redis, wrap=wrap) as stack,
        httpx.AsyncClient(timeout=TIMEOUT) as agent,
    ):
        for _ in range(4):
            conversation.step()
            await post(agent, stack, conversation.body())
            assert_exact(stack, conversation.body())
            assert stack.balancer.requests[-1].content == conversation.body()  # as it came
    media = [r.headers["content-type"] for r in stack.balancer.requests]
    if refuse:
        assert media[0] == MEDIA_TYPE
        assert MEDIA_TYPE not in media[1:]
        assert any("refused an edit (415)" in line for line in stack.lines)
    else:
        assert MEDIA_TYPE not in media
    assert len(stack.balancer.requests) == 4 + refuse
    for request in stack.balancer.requests[refuse:]:
        assert request.headers["content-type"] == "application/json"
        assert "toolref-protocol" not in request.headers
        assert "toolref-history" not in request.headers


async def test_a_continuation_turn_s_headers_are_a_few_dozen_bytes_past_the_credentials(
    redis: Redis,
) -> None:
    """Issue 30: per continuation turn, the relay's header lines other than the agent's
    credential are Host and the body's length (any request's), the media type and the
    tenant's key: at most 72 bytes past the key's line. The agent's headers (about 300
    bytes here) travel in segment 0, kept by reference."""
    conversation = Agent(7)
    agent_lines = sum(len(k) + len(v) + 4 for k, v in HEADERS)
    async with relayed(redis) as stack, httpx.AsyncClient(timeout=TIMEOUT) as agent:
        for _ in range(5):
            conversation.step()
            await post(agent, stack, conversation.body())
    key_line = len("toolref-key: \r\n") + len(KEY)
    credential = sum(len(k) + len(v) + 4 for k, v in CREDENTIAL)
    for request in stack.balancer.requests[1:]:
        lines = sum(len(k) + len(v) + 4 for k, v in request.headers.raw)
        host = len(b"host: \r\n") + len(request.headers["host"])
        assert lines - credential - host - key_line <= 72, request.headers.raw
        assert agent_lines > 300  # what a turn as it came sends as headers
        first = described(request.content)["o"][0]
        assert isinstance(first, list)
        assert first[0] == 0


async def test_count_tokens_rides_the_edit_path(redis: Redis) -> None:
    """Anthropic's token count carries the conversation /v1/messages does: an edit, against
    the recipe of the turn before, byte for byte to the provider."""
    conversation = Agent(8)
    async with relayed(redis) as stack, httpx.AsyncClient(timeout=TIMEOUT) as agent:
        for _ in range(6):
            conversation.step()
            await post(agent, stack, conversation.body())
        count = conversation.body().replace(b',"stream":true', b"")
        answer = await post(agent, stack, count, "/v1/messages/count_tokens")
        assert_exact(stack, count, "/v1/messages/count_tokens")
    sent = stack.balancer.requests[-1]
    assert sent.headers["content-type"] == MEDIA_TYPE
    assert described(sent.content)["b"] is not None
    assert len(sent.content) < len(count) / 5
    assert answer.json() == {"input_tokens": len(count) // 4}


@pytest.mark.parametrize(
    "path",
    [
        "/v1beta/models/gemini-2.5-pro:generateContent",
        "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
    ],
)
@pytest.mark.parametrize("edits", [True, False], ids=["edits", "as-they-came"])
async def test_gemini_rides_the_edit_path_and_its_stream_comes_back_untouched(
    redis: Redis, path: str, edits: bool
) -> None:
    """Gemini CLI's requests (`contents`): edits after the first turn (or, with
    `--no-edits`, as they came), the provider gets each body and the query as sent, the
    event stream comes back byte for byte. Before, these paths passed through whole (issue
    30: 1.0x)."""
    headers = [("content-type", "application/json"), ("x-goog-api-key", "AIza-gemini-key")]
    contents: list[Any] = []
    async with (
        relayed(redis, edits=edits) as stack,
        httpx.AsyncClient(timeout=TIMEOUT) as agent,
    ):
        for turn in range(4):
            contents += [
                {"role": "user", "parts": [{"text": f"question {turn} " + "q" * 200}]},
                {"role": "model", "parts": [{"text": f"answer {turn} " + "a" * 200}]},
            ]
            body = json.dumps({"contents": contents, "generationConfig": {"t": 1}}).encode()
            answer = await agent.post(
                stack.relay_url + "/llm/gemini" + path, content=body, headers=headers
            )
            assert answer.status_code == 200
            got_path, got_headers, got = stack.provider.seen[-1]
            assert got_path == path
            assert got == body
            assert ("x-goog-api-key", "AIza-gemini-key") in got_headers
            if "stream" in path:
                assert answer.content == GEMINI_EVENTS
            sent = stack.balancer.requests[-1]
            if not edits:
                assert sent.headers["content-type"] == "application/json"
                assert sent.content == body
                continue
            assert sent.headers["content-type"] == MEDIA_TYPE
            base = described(sent.content)["b"]
            assert (base is None) == (turn == 0)


async def test_large_turns_of_one_client_at_once_are_exact(redis: Redis) -> None:
    """Bodies past `OFFLOAD_BYTES` are cut in a worker thread; two turns of one client at
    once (a count and a message, as Claude Code sends) take its editor in turn."""
    conversation = Agent(9)
    for _ in range(3):
        conversation.step()
    conversation.messages.append({"role": "user", "content": "r" * (OFFLOAD_BYTES + 1000)})
    async with relayed(redis) as stack, httpx.AsyncClient(timeout=TIMEOUT) as agent:
        body = conversation.body()
        count = body.replace(b',"stream":true', b"")
        await asyncio.gather(
            post(agent, stack, body), post(agent, stack, count, "/v1/messages/count_tokens")
        )
        assert sorted(got for _, _, got in stack.provider.seen) == sorted([body, count])
        conversation.step()
        answer = await post(agent, stack, conversation.body())
        assert_exact(stack, conversation.body())
    raw, wire = (int(p.split("=")[1]) for p in answer.headers["toolref-savings"].split(", ")[:2])
    assert wire < raw / 20  # the large message kept by reference
