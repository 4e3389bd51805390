"""`Forwarder`: an ASGI app that sends its request to an upstream and streams the answer back.

Nothing is buffered in either direction: a request body still arriving is streamed on, and
the answer's bytes (as the upstream encoded them) go to the client as they come, so a
stream's time to first byte is the upstream's plus a loop turn. Cancellation crosses both
ways: the client going away closes the upstream request; the upstream failing mid-answer
aborts the client's connection (a truncated answer never looks complete).

Headers pass as they are but for hop-by-hop ones and toolref's own: provider credentials
(`x-api-key`, `Authorization`) reach the upstream untouched, and are never logged here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import httpx
from starlette.types import Message, Receive, Scope, Send

from toolref.budget import SCOPE_KEY, Account
from toolref.errors import ServiceUnavailableError, ToolrefError
from toolref.hops import decoded, encoded, end_to_end, without_toolref
from toolref.inbound import body_pieces
from toolref_server.problem import problem_response
from toolref_server.upstreams import Route

log = logging.getLogger(__name__)

ROUTE_KEY: Final = "toolref.upstream"  # the scope entry holding the request's `Route`


class UpstreamUnreachableError(ServiceUnavailableError):
    slug = "upstream-unreachable"
    status = 502
    title = "Upstream unreachable"


class UpstreamTimeoutError(ServiceUnavailableError):
    slug = "upstream-timeout"
    status = 504
    title = "Upstream timed out"


def request_headers(scope: Scope) -> list[tuple[bytes, bytes]]:
    """The client's headers for the upstream: end to end, without toolref's (for the
    gateway alone)."""
    return encoded(without_toolref(end_to_end(decoded(scope["headers"]))))


def answer_headers(headers: httpx.Headers) -> list[tuple[bytes, bytes]]:
    """The upstream's headers for the client, end to end (encoding and length included:
    the body is passed as the upstream encoded it)."""
    return encoded(end_to_end(decoded(headers.raw)))


class Forwarder:
    """See the module docstring. `client`: the pool of upstream connections (its timeouts
    bound every read and connect)."""

    def __init__(self, client: Callable[[], httpx.AsyncClient]) -> None:
        self._client = client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        upstream: Route = scope[ROUTE_KEY]
        first = await receive()
        if first["type"] == "http.disconnect":
            return
        body: bytes | AsyncIterator[bytes] = first.get("body", b"")
        account: Account | None = scope.get(SCOPE_KEY)
        if first.get("more_body", False):
            body = body_pieces(receive, first.get("body", b""))
        elif account is not None and isinstance(body, bytes):
            body = _sent_once(body, account)  # a hydrated body: given back once sent
        del first
        request = self._client().build_request(
            scope["method"],
            upstream.url(scope.get("query_string", b"")),
            headers=request_headers(scope),
            content=body,
        )
        try:
            response = await self._client().send(request, stream=True)
        except httpx.TimeoutException:
            await _refuse(scope, send, UpstreamTimeoutError(_timeout(upstream)))
            return
        except httpx.TransportError as exc:
            await _refuse(scope, send, UpstreamUnreachableError(_unreachable(upstream, exc)))
            return
        try:
            await _relay(response, receive, send)
        finally:
            await response.aclose()


async def _sent_once(body: bytes, account: Account) -> AsyncIterator[bytes]:
    """`body` for the upstream, then dropped, and the request's account on the budget of
    bodies in flight closed: the hydrated body is held by nothing once sent, so a stream
    that lasts minutes does not keep it charged (or in memory). The request carries its
    `Content-Length` (the middleware set it), so it is not sent chunked."""
    held = [body]
    del body
    yield held.pop()
    account.close()


async def _relay(response: httpx.Response, receive: Receive, send: Send) -> None:
    """The answer to the client as it arrives, while watching for the client leaving (which
    cancels the upstream read)."""
    await send(
        {
            "type": "http.response.start",
            "status": response.status_code,
            "headers": answer_headers(response.headers),
        }
    )
    streaming = asyncio.ensure_future(_pieces(response, send))
    watching = asyncio.ensure_future(_disconnect(receive))
    try:
        done, _ = await asyncio.wait({streaming, watching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (streaming, watching):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
    if streaming in done:
        streaming.result()  # the upstream failing mid-answer aborts the client's connection
    else:
        with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError, OSError):
            await streaming


async def _pieces(response: httpx.Response, send: Send) -> None:
    async for piece in response.aiter_raw():
        if piece:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _disconnect(receive: Receive) -> None:
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _refuse(scope: Scope, send: Send, error: ToolrefError) -> None:
    async def nothing() -> Message:
        return {"type": "http.disconnect"}

    await problem_response(error)(scope, nothing, send)


def _timeout(upstream: Route) -> str:
    return (
        f"upstream {upstream.name!r} ({upstream.base_url}) did not answer in time; retry, or "
        "raise TOOLREF_GATEWAY_CONNECT_TIMEOUT / TOOLREF_GATEWAY_READ_TIMEOUT"
    )


def _unreachable(upstream: Route, exc: Any) -> str:
    return (
        f"upstream {upstream.name!r} ({upstream.base_url}) cannot be reached "
        f"({type(exc).__name__}); check TOOLREF_UPSTREAMS and that the upstream is up"
    )
