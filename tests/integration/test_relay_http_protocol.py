"""The relay's HTTP/1.1 protocol (`toolref_relay.http_protocol`, `--http auto`: uvicorn's
httptools protocol) gives the relay what h11 gave it: a request's head bounded (16 KiB:
past it 431 and the connection closed, however the head is cut into reads; httptools alone
keeps any head), a header's value without its trailing blanks, the target as it came (the
`#...` httptools' URL parser drops): each checked beside `--http h11`."""

from __future__ import annotations

import asyncio
import contextlib
import json
from urllib.parse import urlsplit

import httpx2
import pytest

from tests.support.fake_provider import wire
from tests.support.servers import serve
from toolref.asgi.scope import Receive, Scope, Send
from toolref_relay import Relay, RelayConfig
from toolref_relay.cli import http_protocol
from toolref_relay.http_protocol import HEAD_LIMIT, Protocol

from .relay_gateway import KEY, MODEL, OK
from .test_relay_websocket import closed_port_url

BODY = json.dumps(
    {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
).encode()
CHOICES = ["auto", "h11"]


class Provider:
    """The relay's fallback: keeps each request's target and headers as they arrived."""

    def __init__(self) -> None:
        self.seen: list[tuple[bytes, dict[bytes, bytes]]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        query = scope.get("query_string", b"")
        target = scope["raw_path"] + (b"?" + query if query else b"")
        self.seen.append((target, dict(scope["headers"])))
        while (await receive()).get("more_body"):
            pass
        body = json.dumps(wire.anthropic_message(OK, MODEL, 1)).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


async def _send(url: str, head: bytes, body: bytes = b"", piece: int = 0) -> bytes:
    """`head` and `body` on a new connection (in writes of `piece` bytes when given): what
    came back before the relay closed the connection (read meanwhile: a server that closes
    with the request unread resets the connection, and what it wrote may be lost after)."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    got = bytearray()

    async def reading() -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                got.extend(data)

    read = asyncio.create_task(reading())
    data = head + body
    step = piece or len(data)
    with contextlib.suppress(ConnectionError):  # the relay closed while the rest went
        for start in range(0, len(data), step):
            writer.write(data[start : start + step])
            await writer.drain()
            if piece:
                await asyncio.sleep(0.001)  # a trickle: mostly a read a piece
    await asyncio.wait_for(read, 20)
    writer.close()
    return bytes(got)


def _head(url: str, target: str, *lines: str) -> bytes:
    netloc = urlsplit(url).netloc
    fixed = [
        f"Host: {netloc}", "Content-Type: application/json", "x-api-key: sk-agent",
        f"Content-Length: {len(BODY)}", "Connection: close",
    ]  # fmt: skip
    text = f"POST {target} HTTP/1.1\r\n" + "".join(f"{x}\r\n" for x in [*fixed, *lines])
    return text.encode() + b"\r\n"


def test_auto_is_the_relays_protocol_and_h11_stays_h11() -> None:
    assert http_protocol("auto") is Protocol
    assert http_protocol("httptools") is Protocol
    assert http_protocol("h11") == "h11"


@pytest.mark.parametrize("http", CHOICES)
@pytest.mark.parametrize("piece", [0, 4096])
async def test_a_head_past_the_limit_is_refused_and_the_provider_sees_nothing(
    http: str, piece: int
) -> None:
    provider = Provider()
    async with serve(provider) as provider_url:
        config = RelayConfig(closed_port_url(), key=KEY, fallback=provider_url)
        async with serve(Relay(config, report=lambda line: None), http=http) as relay_url:
            big = "x-big: " + "a" * (20 * HEAD_LIMIT)  # more than any one read takes
            head = _head(relay_url, "/llm/echo/v1/messages", big)
            answer = await _send(relay_url, head, BODY, piece)
    # the relay's own refusal (431 here, h11's 400), or a reset before it was read (the
    # head unread); never the request sent on (the provider's stand-in, on h11, would
    # refuse the head too: the answer would carry the relay's `toolref-savings`)
    assert answer[:12] in ((b"HTTP/1.1 431", b"") if http == "auto" else (b"HTTP/1.1 400", b""))
    assert b"toolref-savings" not in answer.lower()
    assert provider.seen == []


@pytest.mark.parametrize("http", CHOICES)
async def test_a_head_within_the_limit_and_its_values_reach_the_provider_as_h11_gives_them(
    http: str,
) -> None:
    provider = Provider()
    async with serve(provider) as provider_url:
        config = RelayConfig(closed_port_url(), key=KEY, fallback=provider_url)
        async with serve(Relay(config, report=lambda line: None), http=http) as relay_url:
            near = "x-near: " + "n" * (HEAD_LIMIT - 1024)
            head = _head(relay_url, "/llm/echo/v1/messages?a=1#x", near, "x-trail: v  \t")
            answer = await _send(relay_url, head, BODY, piece=700)
    assert answer.startswith(b"HTTP/1.1 200 OK"), answer[:200]
    [(target, headers)] = provider.seen
    assert target == b"/v1/messages?a=1#x"
    assert headers[b"x-trail"] == b"v"
    assert headers[b"x-near"] == b"n" * (HEAD_LIMIT - 1024)


@pytest.mark.parametrize("http", CHOICES)
async def test_requests_on_one_connection_each_have_their_own_head_bound(http: str) -> None:
    """Kept alive: each request's head is counted from its own start (three heads of 10 KiB
    on one connection, each in reads of its own, all pass)."""
    provider = Provider()
    async with serve(provider) as provider_url:
        config = RelayConfig(closed_port_url(), key=KEY, fallback=provider_url)
        relay = Relay(config, report=lambda line: None)
        async with serve(relay, http=http) as relay_url, httpx2.AsyncClient() as client:
            answers = [
                await client.post(
                    relay_url + "/llm/echo/v1/messages",
                    content=BODY,
                    headers={"x-api-key": "sk-agent", "x-pad": "p" * 10_000},
                )
                for _ in range(3)
            ]
    assert [a.status_code for a in answers] == [200] * 3
    assert len(provider.seen) == 3
