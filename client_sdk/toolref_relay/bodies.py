"""The agent's request body: read whole (within a wire limit) and inflated (within a size
limit) when it is gzip or zstd, as Codex sends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from toolref.asgi.budget import Account
from toolref.wire.compression import inflate, inflate_gzip

_INFLATERS: Final[dict[str, Callable[[bytes, int, Account | None], bytes]]] = {
    "gzip": inflate_gzip,
    "x-gzip": inflate_gzip,
    "zstd": inflate,
}
_IDENTITY: Final = ("", "identity")
# What the relay tells an agent whose body is over its wire limit.
TOO_LARGE: Final = (
    "start the relay with a larger --max-body-bytes, or shorten the conversation (/compact)"
)


def readable(encoding: str | None) -> bool:
    """The relay can read a body with this `Content-Encoding` (others travel as sent)."""
    return (encoding or "").strip().lower() in (*_IDENTITY, *_INFLATERS)


def inflated(
    body: bytes, encoding: str | None, limit: int, account: Account | None = None
) -> bytes:
    """`body` decoded from a `readable` encoding, at most `limit` bytes
    (`DecompressedTooLargeError` past it, `MalformedBodyError` when corrupt), each chunk
    charged to `account` before it is kept (`OverloadedError` past the relay's budget)."""
    name = (encoding or "").strip().lower()
    if name in _IDENTITY:
        return body
    return _INFLATERS[name](body, limit, account)
