"""HTTP/1.1 as agents' clients speak it, at the relay: requests written on a raw socket
(what curl, undici or an SDK's HTTP stack put on the wire), through the relay and the
service's real gateway on the test engine to a provider behind it.

Found in review (the relay's HTTP edges): an `Expect: 100-continue` request whose
`Content-Length` is past `--max-body-bytes` was told `100 Continue`, so the agent uploaded
the whole body only to be refused 413; a request framed by both `Content-Length` and
`Transfer-Encoding: chunked` (RFC 9112 6.3: the chunks count) passed through with the
agent's `Content-Length` beside the chunked body, which the relay's HTTP client refused:
a bare 500 `Internal Server Error`, nothing sent on.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from redis.asyncio import Redis

from .relay_gateway import Scripted
from .test_relay import relayed

pytestmark = pytest.mark.engine

_GUARD = 30.0  # seconds: a failure guard only (a stalled read would never end)
_TURN = "/llm/anthropic/v1/messages"
_HEAD = "x-api-key: sk-agent\r\nanthropic-version: 2023-06-01\r\ncontent-type: application/json\r\n"


def _turn(text: str) -> bytes:
    messages = [{"role": "user", "content": text}]
    return json.dumps({"model": "m", "max_tokens": 8, "messages": messages}).encode()


async def _head(reader: asyncio.StreamReader) -> bytes:
    """The next answer's status line and headers."""
    return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _GUARD)


async def _answer(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """The next whole answer (framed by `content-length`): its head and its body."""
    head = await _head(reader)
    lengths = [
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    ]
    assert lengths, head  # before the fix: a chunked 500 Internal Server Error
    return head, await asyncio.wait_for(reader.readexactly(lengths[0]), _GUARD)


async def test_an_expect_100_continue_body_past_the_limit_is_refused_before_it_is_sent(
    redis: Redis,
) -> None:
    """curl sends `Expect: 100-continue` before a large body: the relay answers 413 from
    the declared length, so nothing is uploaded, and closes the connection (the body it
    never asked for will not follow); the next connection is served."""
    limit = 1000
    provider = Scripted()
    async with relayed(redis, {"anthropic": provider.app()}, max_body_bytes=limit) as stack:
        port = int(stack.relay_url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(
                (
                    f"POST {_TURN} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{_HEAD}"
                    f"Expect: 100-continue\r\nContent-Length: {limit * 50}\r\n\r\n"
                ).encode()
            )
            head = await _head(reader)  # before: "HTTP/1.1 100 Continue"
            assert head.startswith(b"HTTP/1.1 413 "), head
            assert b"connection: close" in head.lower()
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            error = json.loads(await asyncio.wait_for(reader.readexactly(length), _GUARD))
            assert error["error"]["type"] == "request_too_large"
            assert "--max-body-bytes" in error["error"]["message"]
            assert f"{limit * 50}" in error["error"]["message"]  # the length it was told
            assert await asyncio.wait_for(reader.read(), _GUARD) == b""  # closed
        finally:
            writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            body = _turn("hi")
            writer.write(
                f"POST {_TURN} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{_HEAD}"
                f"Expect: 100-continue\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            )
            assert (await _head(reader)).startswith(b"HTTP/1.1 100 ")  # within the limit
            writer.write(body)
            head, _ = await _answer(reader)
            assert head.startswith(b"HTTP/1.1 200 ")
        finally:
            writer.close()
    assert provider.received == [body]  # the refused one reached nobody
    assert len(stack.gateway.arrivals) == 1


async def test_a_request_framed_twice_passes_through_by_its_chunks(redis: Redis) -> None:
    """`Content-Length` and `Transfer-Encoding: chunked` both (a client's bug, or a proxy's):
    the chunks frame the body (RFC 9112 6.3), and a proxy drops the `Content-Length`
    before sending it on. The provider gets the body byte for byte; so does a turn."""
    provider = Scripted()
    sent = b"raw bytes \x00\xff of a pass-through " * 40
    turn = _turn("framed twice")
    async with relayed(redis, {"anthropic": provider.app()}) as stack:
        port = int(stack.relay_url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for path, body in (("/llm/anthropic/echo", sent), (_TURN, turn)):
                chunks = b"".join(
                    b"%x\r\n%s\r\n" % (len(body[i : i + 100]), body[i : i + 100])
                    for i in range(0, len(body), 100)
                )
                writer.write(
                    f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{_HEAD}"
                    "Content-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
                    + chunks
                    + b"0\r\n\r\n"
                )
                head, answer = await _answer(reader)  # before: 500 Internal Server Error
                assert head.startswith(b"HTTP/1.1 200 "), head + answer
                if path.endswith("/echo"):
                    assert answer == sent
        finally:
            writer.close()
    assert provider.received == [sent, turn]
    for arrival in stack.gateway.arrivals:
        assert "transfer-encoding" not in arrival.headers or (
            "content-length" not in arrival.headers
        )
