"""Answering the agent over ASGI: the relay's own answers, answers streamed as they
arrive, and work that stops when the agent goes away."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import httpx

from toolref.asgi.hops import decoded, encoded
from toolref.asgi.scope import Send
from toolref.registry.bounded import is_read
from toolref.wire.shapes import ErrorReply

from .cuts import UpstreamBroken
from .headers import to_agent


async def reply(send: Send, status: int, body: bytes, media_type: str, extra: Any = ()) -> None:
    """A whole answer the relay makes itself."""
    headers = encoded([("content-type", media_type), ("content-length", str(len(body))), *extra])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def reply_json(send: Send, status: int, value: Any) -> None:
    await reply(send, status, json.dumps(value).encode(), "application/json")


async def reply_error(send: Send, error: ErrorReply, extra: Sequence[tuple[str, str]] = ()) -> None:
    await reply(send, error.status, error.body, error.media_type, [*error.headers, *extra])


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
    sent = 0
    try:  # the answer closed however this ends: its head's send cancelled included
        await send(
            {"type": "http.response.start", "status": response.status_code, "headers": headers}
        )
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
