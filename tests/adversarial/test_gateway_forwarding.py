"""The gateway's forwarding to its upstreams, over real sockets: what the client receives of
an answer whose framing is odd, bytes an upstream sends past its answer (where they wait
is not always the socket), and a path that a URL parser upstream would read as a host.

Each test failed before the gateway-forwarding review's fixes (its docstring says how).
The pool's tests talk to `UpstreamPool` directly (plain TCP, and TLS with an anonymous
cipher: no certificate needed); the others run the service in process
(`gateway_wire`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpcore2
import pytest
from redis.asyncio import Redis

from toolref_server.gateway.upstream_pool import Timeouts, UpstreamPool

from .gateway_wire import (
    Link,
    RawUpstream,
    Received,
    echo,
    exchange,
    gateway,
    opened,
    request_bytes,
)

AS_A = [("Toolref-Key", "k")]
_ANONYMOUS = "aNULL:@SECLEVEL=0"  # TLS 1.2 without certificates, for loopback tests only


def _answer(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


PLANTED = _answer(b'{"planted":true}')


def _contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) contexts for anonymous TLS 1.2."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    for context in (server, client):
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers(_ANONYMOUS)
    return server, client


Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def _upstream(
    serve: Serve, context: ssl.SSLContext | None, accepted: list[int]
) -> AsyncIterator[int]:
    """A raw server running `serve` per connection (counted in `accepted`); yields its
    port."""
    tasks: set[asyncio.Task[None]] = set()

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        accepted.append(1)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await serve(reader, writer)
        writer.close()

    server = await asyncio.start_server(run, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _exchange(
    pool: UpstreamPool,
    scheme: bytes,
    port: int,
    target: bytes,
    content: bytes | AsyncIterator[bytes] = b"",
) -> bytes:
    url = httpcore2.URL(scheme=scheme, host=b"127.0.0.1", port=port, target=target)
    framing = [(b"transfer-encoding", b"chunked")] if not isinstance(content, bytes) else []
    answer = await pool.send(b"POST", url, [(b"host", b"upstream"), *framing], content)
    try:
        return b"".join([piece async for piece in answer.aiter_stream()])
    finally:
        await answer.aclose()


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    """One request (chunked or without a body); its target."""
    head = await reader.readuntil(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    return head.split(b" ", 2)[1]


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_bytes_held_above_the_socket_never_answer_the_next_request(scheme: str) -> None:
    """The answer to `/plant` comes with a whole second answer right behind it, in a
    second write (so over TLS a record of its own). The gateway's read off the socket takes
    both, but hands httpcore2 the first answer only: the second waits in anyio's read queue
    (plain TCP: a read of more than 64 KiB is split) or undecrypted in the TLS layer. The
    socket is then drained, so `poll` says the idle connection is quiet. Before: the
    connection was reused and the next request (whoever sent it) read the planted answer.
    To make the timing certain, the upstream answers as soon as the request's head arrives
    and the request's body is held until both answers are in the gateway's socket buffer.
    A connection whose answer ended clean is still reused."""
    server_context, client_context = _contexts()
    context = server_context if scheme == "https" else None
    # Plain TCP: an answer exactly 64 KiB long, so the planted bytes are the split's rest.
    size = 65536 - len(_answer(b"x" * 60000)) + 60000 if scheme == "http" else 20
    answered = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if b"/plant" in head:
                writer.write(_answer(b"a" * size))
                writer.write(PLANTED)
                await writer.drain()
                answered.set()
                while (await reader.readuntil(b"\r\n"))[:-2] != b"0":
                    pass
                await reader.readuntil(b"\r\n")
            else:
                target = head.split(b" ", 2)[1]
                writer.write(_answer(b'{"target":"%s"}' % target))
                await writer.drain()

    async def held_body() -> AsyncIterator[bytes]:
        await answered.wait()
        await asyncio.sleep(0.05)  # the answers cross loopback into the socket's buffer
        yield b"{}"

    pool = UpstreamPool(max_connections=1, timeouts=Timeouts(5, 5), ssl_context=client_context)
    got: list[bytes] = []
    accepted: list[int] = []
    async with _upstream(serve, context, accepted) as port:
        for _ in range(3):
            answered.clear()
            first = await _exchange(pool, scheme.encode(), port, b"/v1/plant", held_body())
            assert first == b"a" * size
            got.append(await _exchange(pool, scheme.encode(), port, b"/v1/models"))
        got.append(await _exchange(pool, scheme.encode(), port, b"/v1/models"))
        await pool.aclose()
    assert got == [b'{"target":"/v1/models"}'] * 4
    # Each planted answer's connection was dropped; the clean ones were reused (the plant
    # went on the last clean one, the final request too): 4 connections for 7 requests.
    assert len(accepted) == 4


# --- answers whose framing is odd --------------------------------------------------------


async def framed_twice(link: Link, request: Received) -> bool:
    """An answer with both `Transfer-Encoding: chunked` and a `Content-Length` that does
    not describe its body (the chunks win: RFC 9112 6.3)."""
    if not request.target.endswith("/twice"):
        return await echo(link, request)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n"
    chunks = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    await link.write(head + b"Transfer-Encoding: chunked\r\n\r\n" + chunks)
    return True


@pytest.mark.engine
async def test_an_answer_framed_by_its_chunks_reaches_the_client_whole(redis: Redis) -> None:
    """Before: the upstream's `Content-Length: 5` was forwarded with the 11 bytes its chunks
    held; the HTTP layer sent `hello`, refused the rest and closed: the client read a
    5-byte answer that looked complete."""
    async with (
        RawUpstream(framed_twice) as upstream,
        gateway(redis, upstreams=f"up={upstream.url}") as url,
    ):
        reply = await exchange(url, request_bytes("GET", "/llm/up/v1/twice", AS_A, length=False))
    assert reply.status == 200
    assert reply.body == b"hello world"
    assert reply.header("content-length") in (None, "11")


# --- paths -------------------------------------------------------------------------------


@pytest.mark.engine
async def test_a_path_that_would_start_with_two_slashes_upstream_is_refused(
    redis: Redis,
) -> None:
    """Under a base URL without a path, `/llm/up//evil.example/v1/models` was forwarded as
    the target `//evil.example/v1/models`, which a URL parser upstream (`urljoin`, a
    framework building its request URL, a proxy) reads as a host. Now 400, nothing sent;
    under a base path (`/api//x`) and inside the path (`/v1//x`) `//` still travels."""
    async with (
        RawUpstream() as upstream,
        gateway(redis, upstreams=f"up={upstream.url},api={upstream.url}/api") as url,
    ):
        refused = await exchange(url, request_bytes("GET", "/llm/up//evil.example/v1", AS_A))
        inside = await exchange(url, request_bytes("GET", "/llm/up/v1//models", AS_A))
        based = await exchange(url, request_bytes("GET", "/llm/api//v1/models", AS_A))
    assert refused.status == 400, refused.body
    assert "//" in refused.json()["detail"]
    assert inside.status == based.status == 200
    assert [r.target for r in upstream.requests] == ["/v1//models", "/api//v1/models"]


# --- one upstream's stall, and upstream failures ------------------------------------------


async def stalls(link: Link, request: Received) -> bool:
    """No answer until the gateway hangs up."""
    await link.until_closed()
    return False


@pytest.mark.engine
async def test_a_stalled_upstream_never_holds_another_upstreams_connections(
    redis: Redis,
) -> None:
    """Upstream `slow` holds every request it gets (an outage that accepts and never
    answers, for up to the read timeout); upstream `fast` answers at once. Before: one
    pool of TOOLREF_GATEWAY_MAX_CONNECTIONS served every upstream, so `slow`'s requests
    took all of it and a request to `fast` waited TOOLREF_GATEWAY_CONNECT_TIMEOUT for a
    connection and was refused 503 `overloaded`. Now each upstream has its own pool of
    that size: `fast` is served, while `slow`'s own next request is still told it is
    busy."""
    async with (
        RawUpstream(stalls) as slow,
        RawUpstream() as fast,
        gateway(
            redis,
            upstreams=f"slow={slow.url},fast={fast.url}",
            gateway_max_connections=1,
            gateway_connect_timeout=0.5,
        ) as url,
    ):
        _, writer = await opened(url)
        writer.write(request_bytes("GET", "/llm/slow/v1/models", AS_A, length=False))
        await slow.wait_for_requests(1)
        served = await exchange(url, request_bytes("GET", "/llm/fast/v1/models", AS_A))
        busy = await exchange(url, request_bytes("GET", "/llm/slow/v1/models", AS_A))
        writer.close()
    assert served.status == 200, served.body
    assert [r.target for r in fast.requests] == ["/v1/models"]
    assert busy.status == 503, busy.body
    assert "TOOLREF_GATEWAY_MAX_CONNECTIONS=1" in busy.json()["detail"]
    assert len(slow.requests) == 1


@pytest.mark.engine
async def test_an_upstream_that_does_not_speak_http_is_named_with_the_fix(redis: Redis) -> None:
    """TOOLREF_UPSTREAMS names `http://` for an upstream that speaks TLS on that port (the
    easy slip: the provider's port 443 without the `s`). Before: 502 saying the upstream
    `cannot be reached (RemoteProtocolError)`, to check that it is up: it was reached, and
    up. Now the 502 says it answered what is not HTTP/1.1 and to check the scheme and
    port. An upstream that cannot be reached at all is still told as such."""
    server_context, _ = _contexts()
    accepted: list[int] = []

    async def handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)

    async with (
        _upstream(handshake, server_context, accepted) as port,
        gateway(redis, upstreams=f"tls=http://127.0.0.1:{port}") as url,
    ):
        reply = await exchange(url, request_bytes("GET", "/llm/tls/v1/models", AS_A))
    assert reply.status == 502, reply.body
    detail = reply.json()["detail"]
    assert "cannot be reached" not in detail
    assert "not an HTTP/1.1 answer" in detail
    assert "https://" in detail


# --- an upstream that breaks off its answer after the head ---------------------------------

_FIRST = b"hello"  # the answer's first body bytes, read by the client before the upstream fails


def _breaks_off(how: str, forwarded: asyncio.Event) -> Callable[[Link, Received], Awaitable[bool]]:
    """An answer's head and first 5 body bytes (chunked, or of a `Content-Length` of 100),
    then, once the client has read them (`forwarded`), `how`: a close, a reset, or nothing
    more (the gateway's read timeout runs out)."""

    async def serve(link: Link, request: Received) -> bool:
        if how == "short":
            await link.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + _FIRST)
        else:
            head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            await link.write(head + b"5\r\n" + _FIRST + b"\r\n")
        await forwarded.wait()
        if how == "stall":
            await link.until_closed()
        elif how == "reset":
            link.writer.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            link.writer.transport.abort()
        return False  # "closed", "short": the connection closes here

    return serve


@pytest.mark.engine
@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("closed", "closed the connection before its end"),
        ("short", "closed the connection before its end"),
        ("reset", "reset"),
        ("stall", "no answer bytes for 1s"),
    ],
)
async def test_an_upstream_breaking_off_its_answer_is_one_warning_and_a_cut(
    redis: Redis, caplog: pytest.LogCaptureFixture, how: str, said: str
) -> None:
    """The upstream sends an answer's head and 5 body bytes, then closes (chunked, or short
    of its `Content-Length`), resets, or stalls past TOOLREF_GATEWAY_READ_TIMEOUT. The
    client's answer is cut as before (no last chunk; short of its length; the connection
    closed). Before: two ERROR tracebacks (Starlette's `unhandled error on GET /llm/...`,
    uvicorn's `Exception in ASGI application`) naming neither the upstream nor what it did.
    Now one WARNING naming the upstream, what happened and the bytes the client got."""
    caplog.set_level(logging.INFO)
    forwarded = asyncio.Event()
    async with (
        RawUpstream(_breaks_off(how, forwarded)) as upstream,
        gateway(redis, upstreams=f"up={upstream.url}", gateway_read_timeout=1) as url,
    ):
        reader, writer = await opened(url)
        writer.write(request_bytes("GET", "/llm/up/v1/answer", AS_A))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        body = await asyncio.wait_for(reader.readuntil(_FIRST), 10)
        forwarded.set()
        rest = await asyncio.wait_for(reader.read(), 10)  # b"" once the gateway closes
        writer.close()
    assert head.startswith(b"HTTP/1.1 200 ")
    if how == "short":
        assert b"content-length: 100\r\n" in head.lower()
        assert body + rest == _FIRST  # 5 of 100 bytes, then the close
    else:
        assert b"transfer-encoding: chunked\r\n" in head.lower()
        assert body + rest == b"5\r\n" + _FIRST + b"\r\n"  # no last chunk: a cut, not an end
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    cut = [m for m in warned if f"upstream 'up' ({upstream.url})" in m]
    assert len(cut) == 1, warned
    assert said in cut[0]
    assert "after 5 body bytes" in cut[0]
    assert all("shutdown" not in m and "stopped" not in m for m in warned)
