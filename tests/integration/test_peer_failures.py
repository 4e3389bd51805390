"""Failures users of peer LLM gateways and proxies (LiteLLM, Portkey, OpenRouter-like
relays, caching proxies) reported, checked on toolref's gateway and relay over real
sockets: the service's gateway (on the test engine) with a small provider behind it, the
relay in front of it, the official SDKs or plain httpx as the agents.

Each test names the peer failure it guards against; the others of that list are tested
where the module that could have them is (streams held, encodings, 413s, hop-by-hop
headers, hang-ups, mid-stream breaks: test_relay.py, test_gateway.py and their siblings).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import openai
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.servers import serve
from toolref.wire.redaction import printable
from toolref_relay import Relay, RelayConfig

from .relay_gateway import KEY, gateway

TIMEOUT = 30
PROVIDER_ID = "req_0123456789abcdef"  # an id the provider's support asks for
COOKIES = ["__cf_bm=one; path=/", "_cfuvid=two; path=/"]
COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "ok"},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


def recording(
    seen: list[list[tuple[bytes, bytes]]], bodies: list[bytes] | None = None
) -> Starlette:
    """A provider answering Anthropic Messages, keeping each request's header lines as
    they came (repeated names included, in order)."""

    async def answer(request: Request) -> Response:
        body = await request.body()
        seen.append(list(request.scope["headers"]))
        if bodies is not None:
            bodies.append(body)
        return JSONResponse({"type": "message", "content": [{"type": "text", "text": "ok"}]})

    return Starlette(routes=[Route("/v1/messages", answer, methods=["POST"])])


def identified() -> Starlette:
    """A provider that names each answer, as OpenAI (`x-request-id`) and Anthropic
    (`request-id`) do."""

    async def answer(request: Request) -> Response:
        await request.body()
        ids = {"x-request-id": PROVIDER_ID, "request-id": PROVIDER_ID}
        answer = JSONResponse(COMPLETION, headers=ids)
        for cookie in COOKIES:  # a header named twice (a CDN's cookies in front of APIs)
            answer.raw_headers.append((b"set-cookie", cookie.encode()))
        return answer

    return Starlette(routes=[Route("/v1/chat/completions", answer, methods=["POST"])])


@asynccontextmanager
async def through(redis: Redis, via: str) -> AsyncIterator[tuple[str, dict[str, str]]]:
    """The base URL an agent is given (the gateway's, or the relay's in front of it, its
    turns over HTTP or its channel) and the headers it must send to it."""
    async with gateway(redis, {"openai": identified()}) as recorded:
        if via == "gateway":
            yield recorded.url + "/llm/openai/v1", {"toolref-key": KEY}
            return
        config = RelayConfig(recorded.url, key=KEY, channel=via == "relay-channel")
        relay = Relay(config, report=lambda _: None)
        async with serve(relay) as relay_url:
            yield relay_url + "/llm/openai/v1", {}


@pytest.mark.parametrize("via", ["gateway", "relay-http", "relay-channel"])
async def test_the_providers_request_id_reaches_the_sdk(
    redis: Redis, via: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Peers lost the provider's request id (the one its support asks for): the gateway's
    own `X-Request-Id` must not replace OpenAI's; its access line names both."""
    caplog.set_level(logging.INFO, logger="toolref_server.access")
    async with (
        through(redis, via) as (base_url, headers),
        openai.AsyncOpenAI(
            base_url=base_url, api_key="sk-provider", default_headers=headers, timeout=TIMEOUT
        ) as sdk,
    ):
        raw = await sdk.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
    assert raw.headers.get_list("x-request-id") == [PROVIDER_ID]
    assert raw.request_id == PROVIDER_ID
    assert raw.headers["request-id"] == PROVIDER_ID  # Anthropic's name: never touched
    assert raw.headers.get_list("set-cookie") == COOKIES  # each line, in order
    if via == "relay-channel":  # its turns ride one WebSocket: no access line of their own
        return
    [line] = [vars(r) for r in caplog.records if getattr(r, "upstreamRequestId", None)]
    assert line["upstreamRequestId"] == PROVIDER_ID
    assert line["request_id"] != PROVIDER_ID  # the gateway's own, in its other lines too


async def test_an_answer_without_an_id_still_gets_the_gateways(redis: Redis) -> None:
    """The gateway's own answers (and an upstream's without one) carry its request id, as
    every answer of the service does (docs/operations.md, Logs)."""
    keyed = {"toolref-key": KEY}
    async with (
        gateway(redis, {"openai": identified()}) as recorded,
        httpx.AsyncClient(base_url=recorded.url, timeout=TIMEOUT) as client,
    ):
        url = "/llm/nowhere/v1/chat/completions"
        refused = await client.post(url, content=b"{}", headers=keyed)
        mine = await client.post(
            url,
            content=b"{}",
            headers={**keyed, "x-request-id": "my-own-id"},
        )
    assert refused.status_code == 404
    assert len(refused.headers.get_list("x-request-id")) == 1
    assert mine.headers.get_list("x-request-id") == ["my-own-id"]


# An upstream's id that is no plain token: a space, a slash, a byte past ASCII, a quote,
# and far past 128 characters (a proxy's trace header, say).
ODD_ID = 'trace 0123/\xe9;"' + "x" * 300


def naming(value: str) -> Starlette:
    """A provider that names each answer `value` in `X-Request-Id`, as it sends it."""

    async def answer(request: Request) -> Response:
        await request.body()
        answer = JSONResponse(COMPLETION)
        answer.raw_headers.append((b"x-request-id", value.encode("latin-1")))
        return answer

    return Starlette(routes=[Route("/v1/chat/completions", answer, methods=["POST"])])


async def test_an_upstreams_id_that_is_no_plain_token_is_logged_escaped_and_cut(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Found in review (request ids): an upstream's `X-Request-Id` that was no plain token
    was handed to the client, and ours was not sent, but the access line named only ours:
    nothing tied the id the client holds to our logs. Now the client gets the upstream's
    header untouched, and the access line logs it as `printable` shows a peer's text
    (escaped, at most 128 characters, the rest counted) next to ours."""
    caplog.set_level(logging.INFO, logger="toolref_server.access")
    async with (
        gateway(redis, {"openai": naming(ODD_ID)}) as recorded,
        httpx.AsyncClient(base_url=recorded.url, timeout=TIMEOUT) as client,
    ):
        answer = await client.post(
            "/llm/openai/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            headers={"toolref-key": KEY, "authorization": "Bearer sk-provider"},
        )
    assert answer.status_code == 200, answer.text
    assert answer.headers.raw.count((b"x-request-id", ODD_ID.encode("latin-1"))) == 1
    assert len(answer.headers.get_list("x-request-id")) == 1  # the upstream's, untouched
    [line] = [vars(r) for r in caplog.records if r.name == "toolref_server.access"]
    assert line["upstreamRequestId"] == printable(ODD_ID, 128)
    assert line["upstreamRequestId"].endswith("... (186 more characters)")
    assert re.fullmatch(r"[0-9a-f]{32}", line["request_id"])  # ours, in every line


async def test_an_upstreams_empty_id_is_replaced_by_ours(redis: Redis) -> None:
    """An empty `X-Request-Id` names nothing: the answer carries ours instead."""
    async with (
        gateway(redis, {"openai": naming("")}) as recorded,
        httpx.AsyncClient(base_url=recorded.url, timeout=TIMEOUT) as client,
    ):
        answer = await client.post(
            "/llm/openai/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            headers={"toolref-key": KEY, "x-request-id": "my-own-id"},
        )
    assert answer.status_code == 200, answer.text
    assert answer.headers.get_list("x-request-id") == ["my-own-id"]


@pytest.mark.parametrize("channel", [False, True], ids=["http", "channel"])
async def test_beta_headers_reach_the_provider_every_turn_as_the_agent_sent_them(
    redis: Redis, channel: bool
) -> None:
    """Peers stripped or merged `anthropic-beta` (features silently off). Through the
    relay's edits, each turn's header lines reach the provider as that turn sent them: a
    beta added on a later turn, a name repeated on two lines, a session header changed."""
    seen: list[list[tuple[bytes, bytes]]] = []
    result = "line of a file the agent read\n" * 400
    messages: list[dict[str, object]] = [{"role": "user", "content": "read it"}]
    turns = [
        [("anthropic-beta", "prompt-caching-2024-07-31"), ("x-claude-code-session-id", "s1")],
        [
            ("anthropic-beta", "prompt-caching-2024-07-31"),
            ("anthropic-beta", "context-management-2025-06-27"),
            ("x-claude-code-session-id", "s1"),
        ],
        [("anthropic-beta", "files-api-2025-04-14"), ("x-claude-code-session-id", "s2")],
    ]
    async with gateway(redis, {"anthropic": recording(seen)}) as recorded:
        relay = Relay(RelayConfig(recorded.url, key=KEY, channel=channel), report=lambda _: None)
        async with serve(relay) as relay_url, httpx.AsyncClient(timeout=TIMEOUT) as agent:
            for n, betas in enumerate(turns):
                messages += [
                    {"role": "assistant", "content": [_use(n)]},
                    {"role": "user", "content": [_result(n, result + str(n))]},
                ]
                body = {"model": "m", "max_tokens": 5, "messages": messages}
                answer = await agent.post(
                    relay_url + "/llm/anthropic/v1/messages",
                    json=body,
                    headers=[("x-api-key", "sk-ant"), ("anthropic-version", "2023-06-01"), *betas],
                )
                assert answer.status_code == 200, answer.text
        edits = [a for a in recorded.arrivals if a.headers["content-type"].endswith("edit")]
    assert len(edits) == (0 if channel else len(turns))  # as edits (the channel's: unseen)
    for betas, got in zip(turns, seen, strict=True):
        named = {name for name, _ in betas}
        lines = [(k.decode(), v.decode()) for k, v in got if k.decode() in named]
        assert lines == betas


def _use(n: int) -> dict[str, object]:
    return {"type": "tool_use", "id": f"toolu_{n:02d}", "name": "Read", "input": {"n": n}}


def _result(n: int, text: str) -> dict[str, object]:
    return {"type": "tool_result", "tool_use_id": f"toolu_{n:02d}", "content": text}


@pytest.mark.parametrize("shape", ["items", "depth"])
async def test_a_large_valid_json_turn_reaches_the_provider_exactly(
    redis: Redis, shape: str
) -> None:
    """Peers refused bodies a provider takes. A turn holding more JSON items, or deeper
    nesting, than the registry's parse limits reaches the provider byte for byte through
    the relay's edits, twice (the second an edit of the first)."""
    seen: list[list[tuple[bytes, bytes]]] = []
    bodies: list[bytes] = []
    if shape == "items":
        value: object = list(range(150_000))
    else:
        value = "leaf"
        for _ in range(300):
            value = {"k": [value]}
    messages: list[dict[str, object]] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [_use(0)]},
        {"role": "user", "content": [_result(0, json.dumps(value))]},
    ]
    async with gateway(redis, {"anthropic": recording(seen, bodies)}) as recorded:
        relay = Relay(RelayConfig(recorded.url, key=KEY, channel=False), report=lambda _: None)
        async with serve(relay) as relay_url, httpx.AsyncClient(timeout=TIMEOUT) as agent:
            sent = []
            for n in range(2):
                messages.append({"role": "user", "content": f"turn {n}", "extra": value})
                body = json.dumps({"model": "m", "max_tokens": 5, "messages": messages}).encode()
                sent.append(body)
                answer = await agent.post(
                    relay_url + "/llm/anthropic/v1/messages",
                    content=body,
                    headers={"content-type": "application/json", "x-api-key": "sk"},
                )
                assert answer.status_code == 200, answer.text
        kinds = [a.headers["content-type"] for a in recorded.arrivals]
    assert bodies == sent
    assert kinds == ["application/vnd.toolref.edit"] * 2


async def test_cache_marks_that_move_each_turn_reach_the_provider_exactly(
    redis: Redis,
) -> None:
    """Peers lost `cache_control` marks (the provider's prompt cache missed every turn).
    Claude Code marks the system prompt and the newest block on every request, so the mark
    leaves the block it was on: each turn, sent as an edit of the last, reaches the
    provider byte for byte, its marks where the agent put them."""
    seen: list[list[tuple[bytes, bytes]]] = []
    bodies: list[bytes] = []
    mark = {"type": "ephemeral"}
    system = [{"type": "text", "text": "You are an agent. " * 200, "cache_control": mark}]
    history: list[dict[str, object]] = [{"role": "user", "content": "read the files"}]
    sent = []
    async with gateway(redis, {"anthropic": recording(seen, bodies)}) as recorded:
        relay = Relay(RelayConfig(recorded.url, key=KEY, channel=False), report=lambda _: None)
        async with serve(relay) as relay_url, httpx.AsyncClient(timeout=TIMEOUT) as agent:
            for n in range(4):
                history += [
                    {"role": "assistant", "content": [_use(n)]},
                    {"role": "user", "content": [_result(n, f"file {n}\n" * 500)]},
                ]
                marked = [*history[:-1], _marked(history[-1], mark)]
                body = {"model": "m", "max_tokens": 5, "system": system, "messages": marked}
                sent.append(json.dumps(body, separators=(",", ":")).encode())
                answer = await agent.post(
                    relay_url + "/llm/anthropic/v1/messages",
                    content=sent[-1],
                    headers={"content-type": "application/json", "x-api-key": "sk"},
                )
                assert answer.status_code == 200, answer.text
        kinds = [a.headers["content-type"] for a in recorded.arrivals]
    assert bodies == sent
    assert kinds == ["application/vnd.toolref.edit"] * len(sent)
    for got in bodies:  # the system's mark and the newest block's; no other
        assert got.count(b'"cache_control"') == 2


def _marked(message: dict[str, object], mark: dict[str, str]) -> dict[str, object]:
    """`message` with a cache mark on its last block, as Claude Code puts it."""
    blocks = message["content"]
    assert isinstance(blocks, list)
    return {**message, "content": [*blocks[:-1], {**blocks[-1], "cache_control": mark}]}
