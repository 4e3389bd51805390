"""A request body as an ASGI server hands it over: read whole within a limit, or piece by
piece as it arrives. Shared by the middleware, the gateway and the relay."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

from toolref.receiving.budget import Account, charge
from toolref.wire.errors import BodyTooLargeError

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]


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


async def body_pieces(receive: Receive, first: bytes | None = None) -> AsyncIterator[bytes]:
    """The body piece by piece as it arrives (after `first`, a piece already received);
    `Disconnected` when the client leaves before its end."""
    if first is not None:
        yield first
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Disconnected
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return
