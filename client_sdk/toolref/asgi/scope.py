"""A request as an ASGI server hands it over: its headers (by name, in any case), and its
body read whole within a limit or piece by piece as it arrives; the scope and `receive` of
the body the app is handed instead. Shared by the middleware, the gateway, the relay and the
service's HTTP layer."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, MutableMapping, Sequence
from typing import Any

from toolref.asgi.budget import Account, charge
from toolref.wire.errors import BodyTooLargeError

# The ASGI types, spelled out so the SDK does not depend on Starlette: one home for them.
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
# A WebSocket scope's extension from a server that stops gracefully
# (`toolref.asgi.paced.PacedWebSocket`): a dict where the app sets "on_stop" to a callable;
# at the stop the server calls it instead of closing the socket (1012) at once, and the app
# closes the socket itself once its work in flight has ended (the channel's turns).
STOP_EXTENSION = "toolref.websocket.stop"


def header_values(scope: Scope, name: str) -> list[str]:
    """Every value of header `name` (any case) in the request, in order, as latin-1 text."""
    wanted = name.lower().encode("latin-1")
    return [v.decode("latin-1") for k, v in scope["headers"] if k.lower() == wanted]


def header(scope: Scope, name: str) -> str | None:
    """The first value of header `name` (any case), stripped; None when absent or empty."""
    for value in header_values(scope, name):
        return value.strip() or None
    return None


def headers_of(scope: Scope) -> dict[str, str]:
    """Request headers by lowercase name (the first of a repeated one)."""
    found: dict[str, str] = {}
    for key, value in scope["headers"]:
        found.setdefault(key.decode("latin-1").lower(), value.decode("latin-1"))
    return found


def with_body(scope: Scope, length: int) -> Scope:
    """The scope for a body the app gets instead of the one sent: as written (no
    Content-Encoding), and its length."""
    headers = [
        (k, v)
        for k, v in scope["headers"]
        if k.lower() not in (b"content-encoding", b"content-length")
    ]
    headers.append((b"content-length", str(length).encode()))
    return {**scope, "headers": headers}


def with_headers(send: Send, added: Sequence[tuple[bytes, bytes]]) -> Send:
    """`send`, adding `added` to the answer's head after its own headers."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *added]}
        await send(message)

    return sending


def replay(body: bytes, receive: Receive) -> Receive:
    """The body once, then the real `receive`: a streaming app waits on it for the client's
    disconnect, as it would without the middleware. Once given, the body is not held here."""
    held: bytes | None = body
    del body

    async def replayed() -> Message:
        nonlocal held
        if held is None:
            return await receive()
        message = {"type": "http.request", "body": held, "more_body": False}
        held = None
        return message

    return replayed


class Disconnected(Exception):
    """The client went away before its body was in: nobody to answer."""


async def read_body(
    receive: Receive, limit: int, fix: str, account: Account | None = None
) -> bytes:
    """The whole body; `BodyTooLargeError` (saying `fix`) as soon as more than `limit`
    bytes have arrived, so an oversized body is never held whole. Each piece is charged to
    `account` as it arrives (`OverloadedError` past the process's budget)."""
    chunks, size = [], 0
    async for chunk in body_pieces(receive):
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError(
                f"the request body is over {limit} bytes as sent; {fix}", limit=limit
            )
        charge(account, len(chunk))
        chunks.append(chunk)
    return b"".join(chunks)


async def body_pieces(receive: Receive) -> AsyncIterator[bytes]:
    """The body piece by piece as it arrives; `Disconnected` when the client leaves before
    its end."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Disconnected
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return


async def _disconnect(receive: Receive, body_done: asyncio.Event | None) -> None:
    if body_done is not None:
        await body_done.wait()  # until then the request body's reader owns `receive`
    while (await receive())["type"] != "http.disconnect":
        pass


async def while_connected(
    work: Coroutine[Any, Any, None], receive: Receive, body_done: asyncio.Event | None = None
) -> None:
    """Run `work` until it ends or the client disconnects, whichever comes first: a
    disconnect cancels it (and with it the request upstream). `body_done`: set once the
    request body has been read, by a reader that shares `receive`."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnect(receive, body_done))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done() and not watcher.cancelled() and watcher.exception() is not None:
            await asyncio.wait({task})  # a failed watch saw no disconnect: the work goes on
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher  # a failed watch changes nothing for the work
    if not task.cancelled():
        task.result()  # raises what stopped the work
