"""The receiver's side of the channel (`toolref.websocket.channel`, issue 39): one WebSocket
at `GET /v1/channel` carrying a sender's turns (the relay's, the SDK's `AsyncTransport`'s),
each served as the HTTP request it stands for. The gateway serves it, and so does a
backend's `ToolRefMiddleware`.

Each request frame becomes an HTTP scope (the channel's client and server, the frame's
target and headers with its body's length, the upgrade's `Host` where the frame names none)
handed to the app as any request is: the same admission, key, limits, edit and answer.
Its answer goes back as frames on the same socket as it is made (its head, each piece of
its body, its end), so a streamed answer stays a stream; turns are served concurrently, at
most `MAX_STREAMS` at once per channel (a further one is answered 503 at once). The sender
going away cancels every turn still being served, as a client hanging up does; a frame
that does not read closes the channel (1002).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Final

from toolref.asgi.scope import ASGIApp, Message, Receive, Scope, Send
from toolref.websocket import channel as frames
from toolref.wire.errors import OverloadedError, ToolrefError

log = logging.getLogger("toolref.channel")
MAX_STREAMS: Final = 64  # turns served at once on one channel
_PROTOCOL_ERROR: Final = 1002


Refuse = Callable[[ToolrefError], ASGIApp]  # the receiver's own answer to a problem


async def serve_channel(
    scope: Scope, receive: Receive, send: Send, app: ASGIApp, *, refuse: Refuse
) -> None:
    """Accept the WebSocket, then serve each request frame through `app` until the sender
    closes it; a turn past `MAX_STREAMS` in flight is answered `refuse(OverloadedError)`."""
    if (await receive())["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    reader = frames.Receiver()
    writing = asyncio.Lock()
    gone = asyncio.Event()
    served: dict[int, asyncio.Task[None]] = {}

    async def out(data: bytes) -> None:
        async with writing:  # one frame at a time on the socket
            if not gone.is_set():
                await send({"type": "websocket.send", "bytes": data})

    try:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes")
            if data is None:
                continue  # text frames are not the channel's: ignored
            try:
                turn = reader.turn(data)
            except frames.FrameError as exc:
                log.info("channel closed: %s", exc)
                await send({"type": "websocket.close", "code": _PROTOCOL_ERROR})
                return
            if isinstance(turn, frames.Cancel):  # its agent left: as a client hanging up
                if (left := served.get(turn.stream)) is not None:
                    left.cancel()
                continue
            work = _served(
                scope, turn, app=app, out=out, gone=gone, busy=len(served), refuse=refuse
            )
            served[turn.stream] = task = asyncio.create_task(work)
            task.add_done_callback(partial(_forget, served, turn.stream))
    finally:
        gone.set()
        for task in list(served.values()):
            task.cancel()


def _forget(served: dict[int, asyncio.Task[None]], stream: int, _: object) -> None:
    served.pop(stream, None)


async def _served(
    channel: Scope,
    turn: frames.Turn,
    *,
    app: ASGIApp,
    out: Callable[[bytes], Awaitable[None]],
    gone: asyncio.Event,
    busy: int,
    refuse: Refuse,
) -> None:
    """One turn through `app`, its answer as frames (`out`)."""
    stream = turn.stream
    path, _, query = turn.target.partition("?")
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in turn.headers]
    if not any(name == b"host" for name, _ in headers):  # the sender drops it: the upgrade's
        headers[:0] = [(k, v) for k, v in channel.get("headers", []) if k == b"host"][:1]
    headers.append((b"content-length", str(len(turn.body)).encode()))
    scope: Scope = {
        "type": "http",
        "asgi": channel.get("asgi", {"version": "3.0"}),
        "http_version": "1.1",
        "method": "POST",
        "scheme": "https" if channel.get("scheme") == "wss" else "http",
        "path": path,
        "raw_path": path.encode("latin-1"),
        "query_string": query.encode("latin-1"),
        "root_path": channel.get("root_path", ""),
        "headers": headers,
        "client": channel.get("client"),
        "server": channel.get("server"),
        "state": dict(channel.get("state", {})),
        "app": channel.get("app"),
    }
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": turn.body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            pairs = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in message["headers"]]
            await out(frames.head(stream, message["status"], pairs))
        elif message["type"] == "http.response.body":
            if message.get("body"):
                await out(frames.piece(stream, message["body"]))
            if not message.get("more_body", False):
                await out(frames.end(stream))

    try:
        if busy >= MAX_STREAMS:
            busy_error = OverloadedError(
                f"this channel serves {MAX_STREAMS} turns at once; retry after 1s",
                retry_after=1,
                limit=MAX_STREAMS,
            )
            await refuse(busy_error)(scope, receive, send)
            return
        await app(scope, receive, send)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the answer broke off: the relay's request fails, as on HTTP
        log.warning("channel turn %d broke off: %s", stream, type(exc).__name__)
        await out(frames.broken(stream, type(exc).__name__))
