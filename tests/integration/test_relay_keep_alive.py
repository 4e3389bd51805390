"""Idle connections to the gateway, over real sockets: the relay (and the SDK's transports)
must drop an idle connection before the gateway does.

The gateway closes a connection idle for its keep-alive (`TOOLREF_KEEP_ALIVE_TIMEOUT`,
announced as `limits.keep_alive_seconds`). A sender keeping it as long (httpx's 5 s, the
gateway's default too) writes its next request into the close on its way, and that request
fails: before, such a turn was answered 502 (`RemoteProtocolError`), and the relay's POST
cannot be sent twice. `Closing` makes that race certain: a request that comes on a
connection idle for its keep-alive or longer is dropped unanswered, as the close it crossed
would. The sleeps are longer than that keep-alive; nothing here asserts on time.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
import uvicorn

from toolref.sending.transport import AsyncTransport, Transport
from toolref.wire import keepalive
from toolref_relay import Relay, RelayConfig
from toolref_relay.preflight import Preflight
from toolref_server.settings import Settings

KEEP_ALIVE = 1  # the stand-in's, in whole seconds as the gateway announces it
IDLE = KEEP_ALIVE + 0.3  # a wait past it, so the stand-in's close would race the next request
TIMEOUT = 30  # a net for a hang, not a timing check
TURN = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


class Closing:
    """A gateway stand-in on a raw socket: HTTP/1.1 kept alive, capabilities announcing
    `keep` seconds, every other request answered 200 JSON; a request arriving on a
    connection idle `keep` seconds or more is dropped unanswered (`dropped`)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.dropped = 0
        self.connections = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        idle_since: float | None = None
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if idle_since is not None and time.monotonic() - idle_since >= self.keep:
                    self.dropped += 1  # the keep-alive's close crossed this request
                    return
                lines = head.decode("latin-1").split("\r\n")
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                await reader.readexactly(length)
                target = lines[0].split(" ")[1]
                if target == "/v1/capabilities":
                    body = json.dumps({"limits": {"keep_alive_seconds": self.keep}}).encode()
                else:
                    body = b'{"answered":true}'
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
                idle_since = time.monotonic()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


@asynccontextmanager
async def closing(keep: int = KEEP_ALIVE) -> AsyncIterator[tuple[Closing, str]]:
    stand_in = Closing(keep)
    server = await asyncio.start_server(stand_in.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield stand_in, f"http://127.0.0.1:{port}"
    finally:
        server.close()


async def _turn(client: httpx.AsyncClient) -> httpx.Response:
    return await client.post("/llm/anthropic/v1/messages", json=TURN)


@pytest.mark.parametrize("channel", [False, True])
async def test_a_turn_after_the_gateway_s_keep_alive_is_answered(channel: bool) -> None:
    """The relay learns the gateway's keep-alive from the capabilities a turn asks (no
    check at start): the turns after it go on connections it keeps for less, so a turn
    after an idle wait past it goes on a new connection, and so does a pass-through.
    Before, the relay kept its connection 5 s and the turn was answered 502. With a
    channel allowed, the stand-in refuses it (no WebSocket) and turns go over HTTP."""
    async with closing() as (stand_in, url):
        relay = Relay(RelayConfig(url, channel=channel), report=lambda line: None)
        transport = httpx.ASGITransport(app=relay)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://relay", timeout=TIMEOUT
        ) as client:
            first = await _turn(client)
            assert first.status_code == 200, first.text
            await asyncio.sleep(IDLE)
            again = await _turn(client)
            assert again.status_code == 200, again.text
            await asyncio.sleep(IDLE)
            models = await client.get("/llm/anthropic/v1/models")
            assert models.status_code == 200, models.text
        await relay.shutdown()
    assert stand_in.dropped == 0
    assert relay.link.http is not None
    assert relay.link.http.keep < KEEP_ALIVE


async def test_the_start_s_check_sets_the_keep_alive_from_the_first_turn() -> None:
    """`toolref relay` checks the gateway before serving: its keep-alive holds from the
    first request on, with edits off (no capabilities asked at a turn)."""
    async with closing() as (stand_in, url):
        found = Preflight(url, True, True, keep_alive=KEEP_ALIVE)
        config = RelayConfig(url, channel=False, edits=False)
        relay = Relay(config, report=lambda line: None, preflight=found)
        transport = httpx.ASGITransport(app=relay)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://relay", timeout=TIMEOUT
        ) as client:
            assert (await _turn(client)).status_code == 200
            await asyncio.sleep(IDLE)
            again = await _turn(client)
            assert again.status_code == 200, again.text
        await relay.shutdown()
    assert stand_in.dropped == 0
    assert stand_in.connections == 2


def test_the_default_is_below_every_receiver_s_default() -> None:
    """Before the gateway said: below the gateway's default keep-alive and uvicorn's (a
    backend's `ToolRefMiddleware`), which httpx's 5 s is not."""
    gateway = Settings.model_fields["keep_alive_timeout"].default
    served = uvicorn.Config(app="unused:app").timeout_keep_alive
    assert min(gateway, served) > keepalive.DEFAULT_SECONDS
    assert keepalive.expiry(None) == keepalive.DEFAULT_SECONDS
    assert keepalive.expiry(1) < 1
    assert keepalive.expiry(2) < 2


async def test_the_sdk_s_transports_drop_idle_connections_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SDK's transports, given no inner one, keep idle connections
    `keepalive.DEFAULT_SECONDS` (here below the stand-in's keep-alive): a request after an
    idle wait goes on a new connection. Before, httpx's default of 5 s reused the one the
    receiver closed, and the request failed."""
    monkeypatch.setattr(keepalive, "DEFAULT_SECONDS", KEEP_ALIVE / 2)
    async with closing() as (stand_in, url):
        async with httpx.AsyncClient(
            transport=AsyncTransport(channel=False), base_url=url, timeout=TIMEOUT
        ) as client:
            assert (await client.get("/v1/models")).status_code == 200
            await asyncio.sleep(IDLE)
            assert (await client.get("/v1/models")).status_code == 200

        def sync_client() -> int:
            with httpx.Client(transport=Transport(), base_url=url, timeout=TIMEOUT) as client:
                client.get("/v1/models")
                time.sleep(IDLE)
                return client.get("/v1/models").status_code

        assert await asyncio.to_thread(sync_client) == 200
    assert stand_in.dropped == 0
    assert stand_in.connections == 4
