"""Answering the agent over ASGI: the relay's own answers, answers streamed as they
arrive, and work that stops when the agent goes away."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Coroutine, Sequence
from typing import Any

import httpx

from toolref.receiving.hops import decoded, encoded
from toolref.receiving.middleware import Receive, Send
from toolref.sending.answers import is_read

from .headers import to_agent
from .shapes import ErrorReply


class UpstreamBroken(Exception):
    """The answer broke off mid-stream. Raised out of the app after the answer started,
    so that the server aborts the agent's connection: a cut answer must not look whole."""


async def reply(send: Send, status: int, body: bytes, media_type: str, extra: Any = ()) -> None:
    """A whole answer the relay makes itself."""
    headers = encoded([("content-type", media_type), ("content-length", str(len(body))), *extra])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def reply_json(send: Send, status: int, value: Any) -> None:
    await reply(send, status, json.dumps(value).encode(), "application/json")


async def reply_error(send: Send, error: ErrorReply, extra: Sequence[tuple[str, str]] = ()) -> None:
    await reply(send, error.status, error.body, error.media_type, extra)


async def relay_answer(
    send: Send, response: httpx.Response, extra: Sequence[tuple[str, str]] = ()
) -> int:
    """Send `response` on to the agent: its status and end-to-end headers, its body as
    raw bytes (still encoded as the server encoded it), each piece as it arrives. The
    bytes sent; `UpstreamBroken` when the answer breaks off."""
    pairs = decoded(response.headers.raw)
    if is_read(response):  # read (and decoded) whole by the transport: send it as read
        body = response.content
        headers = to_agent(
            pairs, body_changed=True, extra=[*extra, ("content-length", str(len(body)))]
        )
        await send(
            {"type": "http.response.start", "status": response.status_code, "headers": headers}
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})
        return len(body)
    headers = to_agent(pairs, extra=extra)
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    sent = 0
    try:
        async for chunk in response.aiter_raw():
            if chunk:
                sent += len(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except httpx.HTTPError as exc:
        raise UpstreamBroken(
            f"the answer broke off after {sent} bytes ({type(exc).__name__}); "
            "the agent's connection is aborted so that it retries"
        ) from exc
    finally:
        await response.aclose()
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    return sent


async def _disconnect(receive: Receive, body_done: asyncio.Event | None) -> None:
    if body_done is not None:
        await body_done.wait()  # until then the request body's reader owns `receive`
    while (await receive())["type"] != "http.disconnect":
        pass


async def while_connected(
    work: Coroutine[Any, Any, None], receive: Receive, body_done: asyncio.Event | None = None
) -> None:
    """Run `work` until it ends or the agent disconnects, whichever comes first: a
    disconnect cancels it (and with it the request upstream). `body_done`: set once the
    request body has been read, by a reader that shares `receive`."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnect(receive, body_done))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
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
