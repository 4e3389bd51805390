"""ASGI apps over real sockets, in-process: uvicorn on 127.0.0.1, on a port the OS picks;
and what travels over them.

The server runs as a task on the test's own event loop, so an app can share the loop's
objects (the `redis` fixture's client, an `asyncio.Event` the test sets). Blocking clients
(httpx.Client, the sync openai and anthropic SDKs) must then run off the loop:
`await asyncio.to_thread(...)`, as a separate client process would.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import uvicorn
import zstandard

from toolref.edits import wire
from toolref.edits.wire import MEDIA_TYPE


@asynccontextmanager
async def serve(app: Any) -> AsyncIterator[str]:
    """Serve `app` (lifespan included) until the block ends; yields its base URL."""
    async with serve_all(app) as [url]:
        yield url


@asynccontextmanager
async def serve_all(*apps: Any) -> AsyncIterator[list[str]]:
    """`serve` for several apps at once, stopped together (each stop takes a few ticks)."""
    servers = [uvicorn.Server(_config(app)) for app in apps]
    tasks = [asyncio.create_task(server.serve()) for server in servers]
    try:
        while not all(server.started for server in servers):
            for task in tasks:
                if task.done():
                    task.result()  # raises what stopped it
                    raise AssertionError("uvicorn stopped before it started")
            await asyncio.sleep(0.01)
        yield [f"http://127.0.0.1:{_port(server)}" for server in servers]
    finally:
        for server in servers:
            server.should_exit = True
        await asyncio.gather(*tasks)


def _config(app: Any) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_config=None,  # leave the test run's logging alone
        access_log=False,
        lifespan="auto",
        ws="toolref.asgi.paced:PacedWebSocket",  # as the relay serves them (the service: its own)
        ws_per_message_deflate=False,
        timeout_graceful_shutdown=5,  # a stream a failed test left open ends the server anyway
    )


def _port(server: uvicorn.Server) -> int:
    port: int = server.servers[0].sockets[0].getsockname()[1]
    return port


class Wire(httpx2.BaseTransport):
    """The real HTTP transport, keeping every request that went over the wire (what an
    SDK's transport sent, after toolref rewrote it)."""

    def __init__(self) -> None:
        self.inner, self.sent = httpx2.HTTPTransport(), list[httpx2.Request]()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append(request)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


class AsyncWire(httpx2.AsyncBaseTransport):
    """`Wire` for async clients."""

    def __init__(self) -> None:
        self.inner, self.sent = httpx2.AsyncHTTPTransport(), list[httpx2.Request]()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append(request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def markers(value: Any) -> int:
    """`toolRef` members in a JSON value (not the word in a payload's text)."""
    if isinstance(value, dict):
        return ("toolRef" in value) + sum(markers(v) for v in value.values())
    if isinstance(value, list):
        return sum(markers(v) for v in value)
    return 0


def edit_header(request: httpx2.Request) -> dict[str, Any] | None:
    """The header of a request sent as an edit as a JSON header line says it (`{"v":2,
    "b":<base>|null,"o":[...],"n":<inline bytes>}`, `toolref.edits.wire.described`), or
    None for one sent as it is."""
    if request.headers.get("content-type", "").split(";")[0].strip() != MEDIA_TYPE:
        return None
    return wire.described(request.read())


def wire_body(request: httpx2.Request) -> Any:
    """The JSON a request sent as it is carried (plain, or compressed alone)."""
    assert edit_header(request) is None, "an edit"
    content = request.read()
    if request.headers.get("content-encoding") == "zstd":
        content = zstandard.ZstdDecompressor().decompress(content)
    return json.loads(content)
