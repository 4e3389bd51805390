"""The agent's request target through the relay's HTTP path, exactly: a `#` is no fragment
on the wire (the server takes it), and the gateway, and the relay's WebSocket mode, forward
it as it came. The relay's HTTP path built its request with httpx, which took a `#` as a
fragment: `?a=1#x` went out as `?a=1`, `/v1/messages#b?c=1` as `/v1/messages#b`, and
escaped what it holds unsafe (`"` as `%22`): every test here failed."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import urlsplit

import pytest
from redis.asyncio import Redis

from tests.support.fake_provider import wire
from tests.support.servers import serve
from toolref.asgi.scope import Receive, Scope, Send
from toolref_relay import Relay, RelayConfig

from .relay_gateway import KEY, MODEL, OK, gateway
from .test_relay_websocket import closed_port_url

BODY = json.dumps(
    {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
).encode()
# Turns' targets (an LLM endpoint's path: sent as an edit), and targets that are not one
# (the path holds the `#`, or a `{`: sent as they came); httpx escaped `"` and `{`.
TAILS = [
    "/v1/messages?a=1#x",
    "/v1/messages#b?c=1",
    "/v1/messages?b#c?d",
    '/v1/messages?q="a"',
    "/v1/{a}?b",
]


class Targets:
    """A provider keeping the target of every request as it came on its wire (raw path and
    query), answering each as Anthropic Messages."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        query = scope.get("query_string", b"")
        self.seen.append((scope["method"], scope["raw_path"] + (b"?" + query if query else b"")))
        while (await receive()).get("more_body"):
            pass
        body = json.dumps(wire.anthropic_message(OK, MODEL, 1)).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def agent_request(url: str, method: str, target: str, body: bytes = b"") -> bytes:
    """`method target` as an agent's client would send it, the target as it is (no client
    library sends a `#` on): the answer's status line."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    writer.write(
        f"{method} {target} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        "Content-Type: application/json\r\nx-api-key: sk-agent\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    answer = await asyncio.wait_for(reader.read(), 20)
    writer.close()
    return answer.split(b"\r\n", 1)[0]


@pytest.mark.parametrize("channel", [True, False])
async def test_a_hash_in_the_agents_target_reaches_the_provider_over_http(
    redis: Redis, channel: bool
) -> None:
    """A turn (sent as an edit; over the channel when it is on), a request that is not one
    (streamed through), and a GET: each reaches the gateway, and the provider, as sent."""
    targets = Targets()
    async with gateway(redis, {"echo": targets}) as service:
        config = RelayConfig(service.url, key=KEY, channel=channel)
        async with serve(Relay(config, report=lambda line: None)) as relay_url:
            for tail in TAILS:
                status = await agent_request(relay_url, "POST", f"/llm/echo{tail}", BODY)
                assert status == b"HTTP/1.1 200 OK", tail
            status = await agent_request(relay_url, "GET", "/llm/echo/v1/models?a=1#x")
            assert status == b"HTTP/1.1 200 OK"
    arrived = [a.path for a in service.arrivals]
    assert arrived == [f"/llm/echo{t}" for t in [*TAILS, "/v1/models?a=1#x"]]
    assert targets.seen == [
        *[("POST", tail.encode()) for tail in TAILS],
        ("GET", b"/v1/models?a=1#x"),
    ]


async def test_a_hash_in_the_agents_target_reaches_the_fallback() -> None:
    """The gateway down: the turn and the request that is not one go to `--fallback` as the
    agent sent them too."""
    targets = Targets()
    async with serve(targets) as provider_url:
        config = RelayConfig(closed_port_url(), key=KEY, fallback=provider_url)
        async with serve(Relay(config, report=lambda line: None)) as relay_url:
            for tail in TAILS:
                status = await agent_request(relay_url, "POST", f"/llm/echo{tail}", BODY)
                assert status == b"HTTP/1.1 200 OK", tail
    assert targets.seen == [("POST", tail.encode()) for tail in TAILS]
