"""The HTTP layer closing connections, served in process (uvicorn with
`toolref_server.http.connection.Connection`, as `toolref-server serve` runs it) so a test can
see the server's side of a socket: a connection closed with an answer still unsent, and a
request framed by both `Content-Length` and `Transfer-Encoding`."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from functools import partial

import pytest
import uvicorn
from redis.asyncio import Redis

from toolref_server.http.connection import Connection

from .gateway_wire import serving

pytestmark = [pytest.mark.engine]

PATIENCE = 10.0


def port_of(server: uvicorn.Server) -> int:
    return int(server.servers[0].sockets[0].getsockname()[1])


async def eventually(holds: Callable[[], bool]) -> bool:
    deadline = asyncio.get_running_loop().time() + PATIENCE
    while not holds():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def more_answered(server: uvicorn.Server, than: int) -> bool:
    return server.server_state.total_requests > than


async def client(server: uvicorn.Server, receive_buffer: int | None = None) -> socket.socket:
    sock = socket.socket()
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port_of(server)))
    return sock


async def test_a_connection_closed_with_its_answer_unsent_is_dropped(redis: Redis) -> None:
    """Found: a connection closed (here at the keep-alive deadline) while part of an answer
    still waited in the server's buffer, under the send pause's high-water mark, stayed open
    for as long as its client read nothing: asyncio's `close()` waits for the buffer to
    drain, and the send timeout fires only on a paused send. Such connections counted
    against TOOLREF_MAX_CONNECTIONS for ever. Now dropped a send timeout after the close."""
    async with serving(redis, keep_alive_timeout=1, send_timeout=0.5) as server:
        loop = asyncio.get_running_loop()
        sock = await client(server, receive_buffer=4096)
        try:
            assert await eventually(lambda: len(server.server_state.connections) == 1)
            (connection,) = server.server_state.connections
            assert isinstance(connection, Connection)
            transport = connection.transport
            transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            request = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"
            for _ in range(2000):  # answers the client never reads, until one is held back
                answered = server.server_state.total_requests
                await loop.sock_sendall(sock, request)
                assert await eventually(partial(more_answered, server, answered))
                if transport.get_write_buffer_size():
                    break
            assert transport.get_write_buffer_size() > 0
            assert not connection.flow.write_paused  # under the high-water mark
            assert await eventually(lambda: connection not in server.server_state.connections)
        finally:
            sock.close()


async def test_content_length_beside_transfer_encoding_closes_after_the_answer(
    redis: Redis,
) -> None:
    """Found: a request with both `Content-Length` and `Transfer-Encoding: chunked` was
    read by its chunks and the connection kept open, so a proxy in front that frames by
    `Content-Length` and this server disagreed where the next request starts (request
    smuggling). RFC 9112 section 6.3: the server MUST close the connection after
    answering such a request. Here the bytes after the chunks (a request of their own)
    are never answered."""
    body = b'{"refs": []}'
    first = (
        b"POST /v1/invocations:findMissing HTTP/1.1\r\nHost: localhost\r\nToolref-Protocol: 2\r\n"
        b"Content-Type: application/json\r\nContent-Length: 3\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    )
    smuggled = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"
    async with serving(redis, keep_alive_timeout=5) as server:
        loop = asyncio.get_running_loop()
        sock = await client(server)
        try:
            await loop.sock_sendall(sock, first + smuggled)
            received = b""
            async with asyncio.timeout(PATIENCE):
                while piece := await loop.sock_recv(sock, 65536):
                    received += piece
        finally:
            sock.close()
    assert received.startswith(b"HTTP/1.1 200 "), received[:300]
    assert received.count(b"HTTP/1.1 ") == 1, received
    assert b"\r\nconnection: close\r\n" in received.lower()
