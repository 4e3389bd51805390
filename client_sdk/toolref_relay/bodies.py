"""The agent's request body: read whole (within a wire limit) and inflated (within a size
limit) when it is gzip or zstd, as Codex sends; held, and charged, until its turn's answer
began (`Held`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from toolref.asgi.budget import Account
from toolref.asgi.hops import Pairs, first
from toolref.asgi.workers import Workers
from toolref.wire.compression import inflate, inflate_gzip
from toolref.wire.numbers import whole_number

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


def declared_too_large(headers: Pairs, limit: int) -> str | None:
    """Why a body whose `Content-Length` is past `limit` is refused before any of it is
    read (None: it is not, or it is framed by its chunks): an agent that sent `Expect:
    100-continue` (curl does, before a large body) is then told before it uploads."""
    if first(headers, "transfer-encoding") is not None:  # the chunks frame it (RFC 9112 6.3)
        return None
    length = whole_number((first(headers, "content-length") or "").strip(), 30)
    if length is None or length <= limit:
        return None
    return (
        f"the request declares {length} body bytes, over the limit of {limit} as sent; {TOO_LARGE}"
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


# Any compressed body may become megabytes, however small it arrives: off the loop, always.
_WORKERS: Final = Workers(None, 0)


async def off_the_loop(raw: bytes, encoding: str | None, limit: int, account: Account) -> bytes:
    """`inflated`, in a worker thread; `raw` itself when it is not compressed."""
    if (encoding or "").strip().lower() not in _IDENTITY:
        return await _WORKERS.run(len(raw), inflated, raw, encoding, limit, account)
    return raw


class Held:
    """A turn's body as the agent sent it (`raw`) and inflated (`content`), charged to its
    `account` (the relay's budget of bodies in flight, --max-inflated-in-flight) until
    `let_go`, once the turn's answer began: a miss is resent from the body until then. Its
    answer then streams holding no body (the relay's pool and its channel let a request's
    body go once written: `pool`, `toolref.sending.channel_link`), so the budget bounds
    what turns hold, however many answers stream for minutes: at most the budget of bodies
    whose answer has not begun (and each turn's edit, made from its body, as long)."""

    __slots__ = ("account", "content", "inflated", "raw", "sent")

    def __init__(self, raw: bytes, content: bytes, account: Account) -> None:
        self.raw, self.content, self.account = raw, content, account
        self.sent, self.inflated = len(raw), len(content)

    def let_go(self) -> None:
        self.raw = self.content = b""
        self.account.close()
