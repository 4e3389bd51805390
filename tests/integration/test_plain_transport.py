"""`toolref.registry.plain_transport.PlainTransport`, the asyncio registry client's HTTP/1.1
on asyncio streams and h11, over real sockets: connections kept alive and reused, a kept
connection the server closed meanwhile recovered from, answers decoded by httpx as before,
timeouts and refusals raised as httpx's errors, `https://` and proxied URLs left to httpx."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from tests.support.servers import serve
from toolref.registry.client import AsyncRegistryClient, _proxied
from toolref.registry.plain_transport import PlainTransport


async def echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers each request with its body, the client's port, gzip when asked."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    port = str(scope["client"][1]).encode()
    headers = [(b"x-port", port), (b"content-type", b"application/octet-stream")]
    if scope["path"] == "/gzip":
        body, headers = gzip.compress(body), [*headers, (b"content-encoding", b"gzip")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def test_requests_reuse_a_kept_connection_and_bodies_arrive_whole() -> None:
    async with serve(echo) as url, httpx.AsyncClient(transport=PlainTransport()) as client:
        ports = set()
        for n in range(20):
            body = b"x" * (n * 10_000)
            answer = await client.post(f"{url}/echo", content=body)
            assert answer.status_code == 200
            assert answer.content == body
            ports.add(answer.headers["x-port"])
        assert len(ports) == 1  # one connection, kept alive
        gzipped = await client.post(f"{url}/gzip", content=b"decoded by httpx")
        assert gzipped.content == b"decoded by httpx"


async def test_concurrent_requests_each_get_a_connection() -> None:
    async with serve(echo) as url, httpx.AsyncClient(transport=PlainTransport()) as client:
        answers = await asyncio.gather(
            *(client.post(f"{url}/echo", content=str(n).encode()) for n in range(8))
        )
        assert [a.content for a in answers] == [str(n).encode() for n in range(8)]


@asynccontextmanager
async def closing_server() -> AsyncIterator[str]:
    """Answers one request per connection, then closes it without saying so (as a server
    whose keep-alive timeout ran out between two requests)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


async def test_a_kept_connection_the_server_closed_is_replaced() -> None:
    async with closing_server() as url, httpx.AsyncClient(transport=PlainTransport()) as client:
        for _ in range(3):
            answer = await client.get(f"{url}/")
            assert answer.text == "ok"
            await asyncio.sleep(0.1)  # the server has closed the kept connection by now


async def test_an_answer_begun_then_cut_is_an_error_never_a_resend() -> None:
    """The server starts its second answer on a kept connection and hangs up: the request
    may have been acted on, so it is not sent again."""
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            seen.append(await reader.readexactly(length))
            if len(seen) == 1:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
                continue
            writer.write(b"HTTP/1.1 200 O")  # begun, then cut
            await writer.drain()
            writer.close()
            return

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with httpx.AsyncClient(transport=PlainTransport()) as client:
        assert (await client.post(url, content=b"first")).text == "ok"
        with pytest.raises(httpx.TransportError):
            await client.post(url, content=b"second")
    server.close()
    assert seen == [b"first", b"second"]


@pytest.mark.parametrize("late", [False, True])
async def test_what_a_server_sends_on_an_idle_connection_is_never_an_answer(late: bool) -> None:
    """A server that says `408` on a kept connection before closing it: the next request
    goes on a new connection and gets its own answer."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        if late:  # with the answer, or once the connection is idle
            await writer.drain()
            await asyncio.sleep(0.02)
        writer.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.5)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with httpx.AsyncClient(transport=PlainTransport()) as client:
        for _ in range(3):
            answer = await client.get(url)
            assert (answer.status_code, answer.text) == (200, "ok")
            await asyncio.sleep(0.05)
    server.close()


async def test_a_silent_server_is_a_read_timeout_and_a_closed_port_a_connect_error() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with httpx.AsyncClient(transport=PlainTransport(), timeout=0.2) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.get(url)
        server.close()
        await server.wait_closed()
        with pytest.raises(httpx.ConnectError):
            await client.get(url)


async def test_https_goes_to_httpx_own_transport() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(204)

    transport = PlainTransport(fallback=httpx.MockTransport(handler))
    async with httpx.AsyncClient(transport=transport) as client:
        assert (await client.get("https://registry.example/v1/capabilities")).status_code == 204
    assert seen == ["https://registry.example/v1/capabilities"]


def test_the_registry_client_uses_it_unless_a_proxy_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    client = AsyncRegistryClient("http://127.0.0.1:9")
    assert isinstance(client._http._transport, PlainTransport)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert _proxied("http://registry.example:8750")
    assert not isinstance(
        AsyncRegistryClient("http://registry.example:8750")._http._transport, PlainTransport
    )
