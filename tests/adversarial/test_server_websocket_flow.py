"""A WebSocket client that reads nothing, over real sockets, against the WebSocket protocol
the service and the relay serve with (`toolref.asgi.paced.PacedWebSocket`; the service's
`toolref_server.http.websocket.WebSocket` behind its HTTP layer, `Connection`).

Found in review: uvicorn's wsproto protocol wrote each pong straight to the transport and
never stopped reading for pings, so a client sending pings (each frame needing an answer)
and reading nothing grew the server's write buffer by what it sent, until the idle limit
(900 s); and a connection it closed with bytes still buffered (its close waits for them to
drain) stayed open for as long as the client kept its window at zero. Now reading stops
while the write buffer is over its high-water mark, the connection is dropped after
`send_timeout` seconds in which the client took nothing, and a closed one still holding
bytes `send_timeout` seconds after its close.

Each runs twice: the service (the gateway's `/llm/...` upgraded, its upstream talking) and
the shared protocol alone (an app that talks itself), as the relay serves it."""

from __future__ import annotations

import asyncio
import hashlib
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Final

import pytest
import uvicorn
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect
from uvicorn.protocols.websockets.wsproto_impl import WSProtocol

from tests.adversarial.gateway_wire import StrictUpstream, gateway
from tests.integration.relay_gateway import KEY
from tests.integration.test_gateway_websocket import masked_text, raw_upgrade
from tests.support.servers import serve_all
from toolref.asgi.paced import PacedWebSocket
from toolref_server.app import create_app
from toolref_server.settings import Settings

pytestmark = [pytest.mark.engine]

KiB: Final = 1024
SEND_TIMEOUT: Final = 0.5
PATIENCE: Final = 10.0
BOUND: Final = 1024 * KiB  # high-water mark (64 KiB) + one pong + one message, and margin
PINGS: Final = 16 * 1024 * KiB  # bytes of pings sent, if the server reads them all
SPOKEN: Final = 12  # messages of 4 KiB the talker sends once told to: under the mark
SERVICE_WS: Final = "toolref_server.http.websocket:WebSocket"


class Quick(PacedWebSocket):
    """The shared protocol with the test's send timeout (the relay's is 30 s)."""

    send_timeout = SEND_TIMEOUT


async def _talk(websocket: WebSocket) -> None:
    """Accept; on a first message send SPOKEN messages of 4 KiB; then read till the end."""
    await websocket.accept()
    try:
        await websocket.receive_text()
        for _ in range(SPOKEN):
            await websocket.send_bytes(b"x" * 4 * KiB)
        while True:
            await websocket.receive_text()
    except (WebSocketDisconnect, RuntimeError, OSError):
        return


TALKER: Final = Starlette(routes=[WebSocketRoute("/v1/talk", _talk)])


async def _started(server: uvicorn.Server, task: asyncio.Task[None]) -> None:
    while not server.started:
        if task.done():
            task.result()
            raise AssertionError("uvicorn stopped before it started")
        await asyncio.sleep(0.01)


@asynccontextmanager
async def _served(config: uvicorn.Config) -> AsyncIterator[uvicorn.Server]:
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        await _started(server, task)
        yield server
    finally:
        server.should_exit = True
        for connection in list(server.server_state.connections):
            connection.transport.abort()
        await task


@asynccontextmanager
async def service(redis: Redis) -> AsyncIterator[tuple[uvicorn.Server, str]]:
    """The service as `toolref-server serve` runs it (its HTTP layer and WebSocket
    protocol), its upstream `up` the talker; yields the server and the path to upgrade."""
    async with serve_all(TALKER) as [upstream]:
        settings = Settings(
            redis_url="unused",
            upstreams=f"up={upstream}",
            api_keys=f"t={hashlib.sha256(KEY.encode()).hexdigest()}",
            send_timeout=SEND_TIMEOUT,
            gateway_ws_idle_timeout=3600,
        )
        config = uvicorn.Config(
            create_app(settings, redis=redis),
            host="127.0.0.1",
            port=0,
            http="toolref_server.http.connection:Connection",
            ws=SERVICE_WS,
            ws_per_message_deflate=False,
            log_config=None,
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=5,
        )
        async with _served(config) as server:
            yield server, "/llm/up/v1/talk"


@asynccontextmanager
async def shared(redis: Redis) -> AsyncIterator[tuple[uvicorn.Server, str]]:
    """The talker itself under the shared protocol, as the relay serves its app."""
    config = uvicorn.Config(
        TALKER,
        host="127.0.0.1",
        port=0,
        ws=Quick,
        ws_per_message_deflate=False,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    async with _served(config) as server:
        yield server, "/v1/talk"


SERVERS: Final = {"service": service, "shared": shared}


def url_of(server: uvicorn.Server) -> str:
    return f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"


async def eventually(holds: Callable[[], bool]) -> bool:
    deadline = asyncio.get_running_loop().time() + PATIENCE
    while not holds():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def the_socket(server: uvicorn.Server) -> Any:
    """The server's side of the one WebSocket, its send buffer cut to 4 KiB (the kernel
    then holds little: what the client leaves unread stays in the transport's buffer)."""
    assert await eventually(lambda: len(server.server_state.connections) == 1)
    (connection,) = server.server_state.connections
    assert isinstance(connection, WSProtocol)
    raw = connection.transport.get_extra_info("socket")
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * KiB)
    return connection


def ping(payload: bytes) -> bytes:
    """One ping frame as a client sends it (masked with a key of zeros)."""
    assert len(payload) < 126
    return bytes([0x89, 0x80 | len(payload)]) + b"\0\0\0\0" + payload


@pytest.mark.parametrize("kind", list(SERVERS))
async def test_pings_from_a_client_that_reads_nothing_are_bounded_then_dropped(
    redis: Redis, kind: str
) -> None:
    """The client sends 16 MiB of pings and reads none of their pongs: the server's write
    buffer stays within BOUND (it stops reading), and the connection is dropped once the
    client took nothing for the send timeout (idle limit an hour off)."""
    async with SERVERS[kind](redis) as (server, path):
        loop = asyncio.get_running_loop()
        client = await raw_upgrade(url_of(server), path, receive_buffer=4 * KiB)
        try:
            connection = await the_socket(server)
            reasons: list[str] = []
            counted = connection.dropped  # the service's counts it on /metrics

            def dropped(reason: str) -> None:
                reasons.append(reason)
                counted(reason)

            connection.dropped = dropped
            chunk = ping(b"p" * 125) * 500  # 65,500 bytes
            peak = 0
            for _ in range(PINGS // len(chunk)):
                try:
                    await asyncio.wait_for(loop.sock_sendall(client, chunk), 2)
                except (TimeoutError, OSError):
                    break  # the server stopped reading (or dropped the connection)
                await asyncio.sleep(0)
                peak = max(peak, connection.transport.get_write_buffer_size())
            peak = max(peak, connection.transport.get_write_buffer_size())
            assert peak < BOUND, f"{peak} bytes of pongs buffered for a client reading none"
            assert await eventually(lambda: connection not in server.server_state.connections)
            assert reasons == ["send-timeout"]
        finally:
            client.close()


@pytest.mark.parametrize("kind", list(SERVERS))
async def test_a_closed_connection_whose_bytes_are_not_taken_is_dropped(
    redis: Redis, kind: str
) -> None:
    """The client makes the server send 48 KiB (under the high-water mark: no send
    pause), reads none of it, and closes: the server answers the close and closes its
    transport, bytes still buffered; the connection is dropped a send timeout later (it
    stayed open for as long as the client kept its window at zero)."""
    async with SERVERS[kind](redis) as (server, path):
        loop = asyncio.get_running_loop()
        client = await raw_upgrade(url_of(server), path, receive_buffer=4 * KiB)
        try:
            connection = await the_socket(server)
            await loop.sock_sendall(client, masked_text("go"))
            assert await eventually(lambda: connection.transport.get_write_buffer_size() > 0)
            assert not connection.transport.is_closing()
            await loop.sock_sendall(client, b"\x88\x82\0\0\0\0\x03\xe8")  # close, 1000
            assert await eventually(connection.transport.is_closing)
            assert await eventually(lambda: connection not in server.server_state.connections)
        finally:
            client.close()


def test_the_service_and_the_relay_serve_websockets_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`toolref-server serve` and `toolref relay` name these protocols to uvicorn (each
    served uvicorn's own before)."""
    import logging

    from toolref_relay.cli import server_config
    from toolref_server import cli
    from toolref_server.http.websocket import WebSocket as ServiceWebSocket

    given: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: given.update(kwargs))
    cli._serving(Settings(redis_url="redis://127.0.0.1:1"), {})
    assert uvicorn.importer.import_from_string(given["ws"]) is ServiceWebSocket
    assert issubclass(ServiceWebSocket, PacedWebSocket)

    async def app(scope: object, receive: object, send: object) -> None:
        return None

    # uvicorn.Config sets its loggers' levels: put them back for the tests after this one
    loggers = [logging.getLogger(name) for name in ("uvicorn", "uvicorn.error", "uvicorn.access")]
    levels = [logger.level for logger in loggers]
    try:
        config = server_config(app, "asyncio", "warning", 1024)
        config.load()
        assert issubclass(config.ws_protocol_class, PacedWebSocket)
        assert config.ws_protocol_class.send_timeout == 30.0
        # review (relay and start-up edges): `--send-timeout`, a constant 30 s before
        config = server_config(app, "asyncio", "warning", 1024, send_timeout=2.5)
        config.load()
        assert issubclass(config.ws_protocol_class, PacedWebSocket)
        assert config.ws_protocol_class.send_timeout == 2.5
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


async def test_a_post_asking_for_a_websocket_is_served_as_the_request_it_is(redis: Redis) -> None:
    """A POST with `Upgrade: websocket` and `Connection: Upgrade` (the gateway fuzz found
    one): a WebSocket handshake is a GET, so it is served as HTTP; before, the WebSocket
    protocol took it and answered an empty 400 (no problem+json)."""
    async with (
        StrictUpstream() as upstream,
        gateway(redis, upstreams=f"up={upstream.url}/api") as url,
    ):
        port = int(url.rsplit(":", 1)[1])
        body = b'{"model": "m", "max_tokens": 8, "messages": []}'
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /llm/up/v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        writer.close()
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"x-fake-upstream: 1" in head.lower()
