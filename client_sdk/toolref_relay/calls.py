"""One request from the agent as the relay routes it (`Call`), the pool that counts what it
sends (`Meter`), and the log line and 502 every route of it shares."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

import httpx

from toolref.sending.channel_link import CARRIED, FRAMED
from toolref.wire.shapes import ErrorReply, Provider, error_reply

from .headers import Pairs, first
from .ledger import header_bytes

log = logging.getLogger("toolref.relay")

UNREACHABLE: Final = (httpx.ConnectError, httpx.ConnectTimeout)


# A path and query httpx sends as they are: RFC 3986's unreserved and sub-delims, `:@/?`.
_PLAIN: Final = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/?]*")


@dataclass(frozen=True, slots=True)
class Call:
    """One request from the agent, as the relay routes it."""

    method: str
    name: str  # the upstream the agent addressed
    path: str  # the provider path after /llm/{name}
    query: str
    headers: Pairs
    provider: Provider

    def suffix(self) -> str:
        return self.path + (f"?{self.query}" if self.query else "")

    def exact(self, url: str) -> dict[str, bytes]:
        """The request extension sending `url` (a base URL, then `suffix()`) with the path
        and query as the agent sent them, where httpx would not: it takes a `#` for a
        fragment, never sent (`?a=1#x` went out as `?a=1`), and escapes what it holds unsafe
        (`"` as `%22`). httpcore sends a `target` extension in the URL's stead, as the
        gateway and the relay's WebSocket mode send a target. Empty where httpx's is it."""
        suffix = self.suffix()
        if _PLAIN.fullmatch(suffix) and "/." not in suffix:  # nothing httpx drops, escapes
            return {}  # or resolves (a dot segment): every usual turn, with no URL parsed
        base = url[: len(url) - len(suffix)]
        prefix = httpx.URL(base).raw_path if urlsplit(base).path else b""
        target = prefix + suffix.encode("latin-1")  # the agent's bytes (read as latin-1)
        return {} if target == httpx.URL(url).raw_path else {"target": target}


class Meter(httpx.AsyncBaseTransport):
    """The shared connection pool, counting the requests sent through it as they go on the
    wire: over HTTP, header lines (`name: value` and its line end, each) and body; over the
    channel, the turn's frame (a WebSocket message: its bytes), as its answer tells
    (`FRAMED`), and both when the channel's busy answer, or its receiver's drained close
    before reading the frame, sent it over HTTP after all."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner, self.sent = inner, 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        size = wire_size(request)
        self.sent += size
        try:
            response = await self.inner.handle_async_request(request)
        except UNREACHABLE:
            self.sent -= size  # never connected: nothing went out
            raise
        framed = response.extensions.get(FRAMED)
        if isinstance(framed, int):  # a channel's frame went for it: no HTTP head, if it
            self.sent += framed - (size if response.extensions.get(CARRIED) else 0)  # answered
        return response


def wire_size(request: httpx.Request) -> int:
    """The bytes `request` puts on the wire: its header lines (HTTP/1.1) and its body."""
    return header_bytes(request.headers.raw) + len(request.content)


def encoding_of(headers: Pairs) -> str:
    return (first(headers, "content-encoding") or "identity").strip().lower()


def failed(call: Call, where: str, error: httpx.HTTPError, more: str = "") -> ErrorReply:
    message = (
        f"toolref relay: the request to {where} failed ({type(error).__name__}){more}; "
        "try again, and check that it runs"
    )
    return error_reply(call.provider, 502, message, "toolref_gateway_failed")


def log_call(call: Call, upstream: str, status: int, sent: int | None, wire: int | None) -> None:
    """Method, path (never the query: some providers take keys there), status, sizes."""
    sizes = f" agent sent {sent} bytes, relay sent {wire}" if sent is not None else ""
    log.info("%s /llm/%s%s -> %s %d%s", call.method, call.name, call.path, upstream, status, sizes)
