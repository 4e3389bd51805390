"""TCP_NODELAY on every connection the relay and the service accept.

Found by the gateway speed bench: an answer's head and body written apart waited ~40 ms for
the client's delayed ACK, because the relay's listening socket (and uvicorn's own, when it
runs several workers) was made without naming IPPROTO_TCP, and asyncio sets TCP_NODELAY only
on the connections of a socket that names it. Relay + gateway added 48-56 ms per small
request; 13-16 ms once set. Both tests fail without the fix."""

from __future__ import annotations

import asyncio
import socket

from toolref_relay.cli import _bind
from toolref_server.http.connection import _no_delay


def test_the_relays_socket_names_tcp_so_asyncio_sets_no_delay() -> None:
    sock = _bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()


async def test_the_service_sets_no_delay_on_a_connection_of_any_listening_socket() -> None:
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # as uvicorn binds it
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    seen: list[int] = []

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            _no_delay(transport)
            sock = transport.get_extra_info("socket")
            seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    server = await asyncio.get_running_loop().create_server(Probe, sock=listening)
    try:
        port = listening.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
    assert seen
    assert seen[0] != 0
