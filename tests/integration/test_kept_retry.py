"""A request an idle connection's close crossed, over real sockets: the relay's pool sends it
once more on a new connection; never a request the receiver took.

The receiver is uvicorn with a 1 s keep-alive. The race is driven, not waited for: the
client's trace hook, called as the second request is about to be written on its kept
connection (httpcore checked it was still open just before), waits until uvicorn has
closed that idle connection by its keep-alive; the request then goes out on a connection
closed under it, as it would when the close crossed it on the wire. Before, the relay's
pool raised (`ReadError`: the agent's turn answered 502).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import uvicorn

from toolref_relay.pool import Pool

TIMEOUT = 30  # a net for a hang, not a timing check


class Recorder:
    """An ASGI app answering 200 `ok`, keeping every body it took (`took`)."""

    def __init__(self) -> None:
        self.took: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.took.append(body)
        headers = [(b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})


@asynccontextmanager
async def keeping(app: Any, seconds: int = 1) -> AsyncIterator[tuple[uvicorn.Server, str]]:
    """uvicorn serving `app`, idle connections closed after `seconds`."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_config=None, access_log=False,
        lifespan="off", timeout_keep_alive=seconds,
    )  # fmt: skip
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "uvicorn stopped before it started"
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield server, f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


def closing_first(server: uvicorn.Server) -> Callable[[str, Any], Awaitable[None]]:
    """A trace hook: as the first request it sees is written, wait until the server closed
    every connection (its keep-alive ran out on the idle one)."""
    armed = [True]

    async def hook(name: str, info: Any) -> None:
        if name == "http11.send_request_headers.started" and armed[0]:
            armed[0] = False
            # Closed by uvicorn's own timer, which signals nothing: polled.
            while server.server_state.connections:  # noqa: ASYNC110
                await asyncio.sleep(0.01)

    return hook


async def _post(pool: Pool, url: str, body: bytes, trace: Any = None) -> httpx.Response:
    extensions: dict[str, Any] = {
        "timeout": dict.fromkeys(("connect", "read", "write", "pool"), TIMEOUT)
    }
    if trace is not None:
        extensions["trace"] = trace
    request = httpx.Request("POST", url, content=body, extensions=extensions)
    response = await pool.handle_async_request(request)
    await response.aread()
    await response.aclose()
    return response


async def test_a_post_the_keep_alive_close_crossed_goes_once_more_on_a_new_connection() -> None:
    app = Recorder()
    async with keeping(app) as (server, url):
        pool = Pool()
        try:
            assert (await _post(pool, url, b"one")).status_code == 200
            again = await _post(pool, url, b"two", closing_first(server))
            assert again.status_code == 200
        finally:
            await pool.aclose()
    assert app.took == [b"one", b"two"]  # each taken once


async def test_a_new_connection_closed_unanswered_is_raised_not_resent() -> None:
    """A connection opened for the request, closed with no answer: the receiver may have
    taken it (as this one did), so it is never sent twice."""
    took: list[bytes] = []

    async def taking(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        took.append(await reader.readexactly(length))
        writer.close()

    server = await asyncio.start_server(taking, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = Pool()
    try:
        with pytest.raises(httpx.RemoteProtocolError):
            await _post(pool, f"http://127.0.0.1:{port}", b"once")
    finally:
        await pool.aclose()
        server.close()
    assert took == [b"once"]
