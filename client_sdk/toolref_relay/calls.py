"""One request from the agent as the relay routes it (`Call`), the pool that counts what it
sends (`Meter`), and the log line and 502 every route of it shares."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

import httpx

from .headers import Pairs, first
from .shapes import ErrorReply, Provider, error_reply

log = logging.getLogger("toolref.relay")

UNREACHABLE: Final = (httpx.ConnectError, httpx.ConnectTimeout)


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


class Meter(httpx.AsyncBaseTransport):
    """The shared connection pool, counting the request bytes sent through it: bodies, and
    header lines too with `headers` (`name: value` and its line end, each)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, *, headers: bool = False) -> None:
        self.inner, self.sent, self.headers = inner, 0, headers

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        size = len(request.content)
        if self.headers:
            size += header_bytes(request)
        self.sent += size
        try:
            return await self.inner.handle_async_request(request)
        except UNREACHABLE:
            self.sent -= size  # never connected: nothing went out
            raise


def header_bytes(request: httpx.Request) -> int:
    """The bytes of `request`'s header lines on the wire (HTTP/1.1)."""
    return sum(len(name) + len(value) + 4 for name, value in request.headers.raw)


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
