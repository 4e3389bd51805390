"""The agent's request body: read whole (within a wire limit) and inflated (within a size
limit) when it is gzip or zstd, as Codex sends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from toolref.asgi import Receive
from toolref.compression import inflate, inflate_gzip
from toolref.errors import BodyTooLargeError

_INFLATERS: Final[dict[str, Callable[[bytes, int], bytes]]] = {
    "gzip": inflate_gzip,
    "x-gzip": inflate_gzip,
    "zstd": inflate,
}
_IDENTITY: Final = ("", "identity")


class Disconnected(Exception):
    """The agent went away before its request was in: nobody to answer."""


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body; `BodyTooLargeError` once more than `limit` bytes arrive."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError(
                f"the request body is over {limit} bytes as sent; start the relay with a "
                "larger --max-body-bytes, or shorten the conversation (/compact)",
                limit=limit,
            )
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def readable(encoding: str | None) -> bool:
    """The relay can read a body with this `Content-Encoding` (others travel as sent)."""
    return (encoding or "").strip().lower() in (*_IDENTITY, *_INFLATERS)


def inflated(body: bytes, encoding: str | None, limit: int) -> bytes:
    """`body` decoded from a `readable` encoding, at most `limit` bytes
    (`DecompressedTooLargeError` past it, `MalformedBodyError` when corrupt)."""
    name = (encoding or "").strip().lower()
    if name in _IDENTITY:
        return body
    return _INFLATERS[name](body, limit)
