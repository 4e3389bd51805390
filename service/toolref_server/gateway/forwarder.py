"""`Forwarder`: an ASGI app that sends its request to an upstream and streams the answer back.

Nothing is buffered in either direction: a request body still arriving is streamed on, and
the answer's bytes (as the upstream encoded them) go to the client as they come, so a
stream's time to first byte is the upstream's plus a loop turn. Cancellation crosses both
ways: the client hanging up at any stage (while its body is sent, while the upstream
thinks before its answer's head, while the answer streams) closes the upstream request and
its connection at once; the upstream failing mid-answer (a read timeout, a reset, a close
before its end) aborts the client's connection (a truncated answer never looks complete):
one warning names the upstream, what it did and the body bytes the client got, and the
HTTP layer cuts the answer without a traceback (`AnswerCut`).

What the upstream receives: the client's method, its path and query as it encoded them
(under the upstream's base path), its end-to-end headers as they came, in order, without
toolref's own; `Host` for the upstream; `Authorization: Basic` when the upstream's base URL
carries credentials (in place of the client's); and framing that describes the bytes sent
(`Content-Length` of a body received whole, the client's own while it streams one it
framed that way, else chunked). Nothing else: no `User-Agent`, `Accept-Encoding` or cookie
the client did not send. Provider credentials (`x-api-key`, `Authorization`) pass
untouched and are never logged here.

What the client receives: the upstream's status, end-to-end headers and body bytes, but
no `Toolref-*` header (toolref's headers are the gateway's to send: an upstream cannot
forge a history or refs), nor the `Content-Length` of an answer its chunks framed; an event
stream (`text/event-stream`) gets `X-Accel-Buffering: no` unless the upstream said otherwise,
so an nginx in front (buffering by default: the first events held until the stream ends or
its buffers fill) passes each event on as it comes, and consumes the header. Problems
name an upstream by its name and URL without credentials; the request's path and query
are never logged or shown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Final

import httpcore2
from starlette.types import Message, Receive, Scope, Send

from toolref.asgi.budget import SCOPE_KEY, Account
from toolref.asgi.hops import decoded, encoded, end_to_end, without_toolref
from toolref.asgi.scope import Disconnected, header_values, while_connected
from toolref.wire.errors import OverloadedError, ServiceUnavailableError, ToolrefError
from toolref.wire.numbers import whole_number
from toolref_server.gateway.upstream_pool import UpstreamPool
from toolref_server.gateway.upstreams import Route
from toolref_server.http.problem import problem_response
from toolref_server.http.unanswered import AnswerCut

ROUTE_KEY: Final = "toolref.upstream"  # the scope entry holding the request's `Route`
# The scope entry holding what to call once a whole body was handed to the upstream's
# connection (a recipe's keeping starts then: `registry.edits.Keeping`).
SENT_KEY: Final = "toolref.sent"
_FRAMING: Final = frozenset({"content-length", "transfer-encoding"})
_CHUNKED: Final = (b"transfer-encoding", b"chunked")
_EVENT_STREAM: Final = "text/event-stream"
_UNBUFFERED: Final = ("x-accel-buffering", "no")  # nginx's, per answer: pass it on unbuffered
_CAUSES: Final = 8  # how far down an exception's causes `_broke_off` looks for the OS's word

log = logging.getLogger(__name__)


class UpstreamUnreachableError(ServiceUnavailableError):
    slug = "upstream-unreachable"
    status = 502
    title = "Upstream unreachable"


class UpstreamTimeoutError(ServiceUnavailableError):
    slug = "upstream-timeout"
    status = 504
    title = "Upstream timed out"


def request_headers(scope: Scope, upstream: Route) -> list[tuple[bytes, bytes]]:
    """The client's headers for the upstream: end to end, without toolref's (for the
    gateway alone) and without framing (set for the bytes actually sent); `Host` and the
    base URL's credentials first."""
    pairs = without_toolref(end_to_end(decoded(scope["headers"])))
    own = upstream.upstream.authorization
    replaced = _FRAMING | ({"authorization"} if own is not None else set())
    kept = [(k, v) for k, v in pairs if k.lower() not in replaced]
    first = [("host", upstream.upstream.host_header)]
    if own is not None:
        first.append(("authorization", own))
    return encoded([*first, *kept])


def answer_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The upstream's headers for the client: end to end (encoding and length included:
    the body is passed as the upstream encoded it), without any `Toolref-*`. An answer
    framed by its chunks loses its `Content-Length` too: the chunks decided its length
    (RFC 9112 6.3), so that header need not describe the bytes forwarded. An event stream
    gains `X-Accel-Buffering: no` when the upstream sent no such header (the module
    docstring)."""
    pairs = decoded(headers)
    chunked = any(k.lower() == "transfer-encoding" for k, _ in pairs)
    kept = without_toolref(end_to_end(pairs))
    if chunked:
        kept = [(k, v) for k, v in kept if k.lower() != "content-length"]
    names = {k.lower(): v for k, v in kept}
    media = names.get("content-type", "").split(";")[0].strip().lower()
    if media == _EVENT_STREAM and _UNBUFFERED[0] not in names:
        kept.append(_UNBUFFERED)
    return encoded(kept)


class Forwarder:
    """See the module docstring. `pool`: the connections to the upstream of a name, its
    own (their timeouts bound every connect, read and write), so one upstream that stalls
    holds none of another's; `retry_after`: seconds, told when they are all busy."""

    def __init__(self, pool: Callable[[str], UpstreamPool], retry_after: int) -> None:
        self._pool = pool
        self._retry_after = retry_after

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        upstream: Route = scope[ROUTE_KEY]
        first = await receive()
        if first["type"] == "http.disconnect":
            return
        inbound = _Inbound(receive)
        content, framing = inbound.content(scope, first, scope.get(SCOPE_KEY))
        del first
        url = httpcore2.URL(
            scheme=upstream.upstream.scheme,
            host=upstream.upstream.host,
            port=upstream.upstream.port,
            target=upstream.target(scope.get("query_string", b"")),
        )
        work = self._exchange(scope, send, url, content, framing=framing)
        try:
            await while_connected(work, receive, inbound.whole)
        except Disconnected:  # the client left while its body was sent
            return

    async def _exchange(
        self,
        scope: Scope,
        send: Send,
        url: httpcore2.URL,
        content: bytes | AsyncIterator[bytes],
        *,
        framing: list[tuple[bytes, bytes]],
    ) -> None:
        """The request sent and its answer streamed back; a refusal when the upstream
        cannot be had. Cancelled at any stage by the client hanging up."""
        upstream: Route = scope[ROUTE_KEY]
        try:
            response = await self._pool(upstream.name).send(
                scope["method"].encode("ascii"),
                url,
                [*request_headers(scope, upstream), *framing],
                content,
            )
        except httpcore2.PoolTimeout:
            await _refuse(scope, send, self._busy(upstream))
            return
        except httpcore2.TimeoutException:
            await _refuse(scope, send, UpstreamTimeoutError(_timeout(upstream)))
            return
        except (httpcore2.NetworkError, httpcore2.ProtocolError) as exc:
            await _refuse(scope, send, UpstreamUnreachableError(_unreachable(upstream, exc)))
            return
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status,
                    "headers": answer_headers(response.headers),
                }
            )
            # The upstream failing mid-answer is said, then cut (the module docstring).
            await _pieces(response, send, lambda sent, exc: self._cut(upstream, sent, exc))
        finally:
            await response.aclose()

    def _cut(self, upstream: Route, sent: int, exc: Exception) -> AnswerCut:
        """The upstream broke off its answer (`exc`) after `sent` body bytes went to the
        client: one warning, and the `AnswerCut` that has the HTTP layer cut the answer."""
        read = self._pool(upstream.name).timeouts.read
        log.warning(
            "upstream %r (%s) broke off its answer after %d body bytes had gone to the "
            "client: %s; the client's answer was cut (its connection closed short of the "
            "end, or its channel turn broken off), for its client to retry",
            upstream.name,
            upstream.upstream.shown,
            sent,
            _broke_off(exc, read),
        )
        return AnswerCut(f"upstream {upstream.name!r} broke off its answer")

    def _busy(self, upstream: Route) -> OverloadedError:
        limit = self._pool(upstream.name).max_connections
        return OverloadedError(
            f"every connection of this gateway process to upstream {upstream.name!r} stayed "
            f"busy for TOOLREF_GATEWAY_CONNECT_TIMEOUT (TOOLREF_GATEWAY_MAX_CONNECTIONS="
            f"{limit}, per upstream); retry after {self._retry_after}s",
            retry_after=self._retry_after,
            limit=limit,
        )


class _Inbound:
    """The client's side of one request: its body for the upstream. `receive` has one reader
    at a time: the body's pieces while they come, then (once `whole` is set) the watch for
    the client hanging up (`toolref.asgi.scope.while_connected`)."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self.whole = asyncio.Event()

    def content(
        self, scope: Scope, first: Message, account: Account | None = None
    ) -> tuple[bytes | AsyncIterator[bytes], list[tuple[bytes, bytes]]]:
        """The body (bytes when `first` holds all of it, else its pieces as they come) and
        the framing headers that describe exactly it. A whole body charged to `account`
        (hydrated) is handed over once and then let go (`_sent_once`)."""
        body: bytes = first.get("body", b"")
        framed = any(k.decode("latin-1").lower() in _FRAMING for k, _ in scope["headers"])
        if not first.get("more_body", False):
            self.whole.set()
            length = [(b"content-length", str(len(body)).encode())]
            framing = length if body or framed else []
            if account is not None and body:
                return _sent_once(body, account, scope.get(SENT_KEY)), framing
            return body, framing
        declared = _declared_length(scope)
        framing = [_CHUNKED] if declared is None else [(b"content-length", declared)]
        return self._pieces(body), framing

    async def _pieces(self, first: bytes) -> AsyncIterator[bytes]:
        if first:
            yield first
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                raise Disconnected
            piece = message.get("body", b"")
            if piece:
                yield piece
            if not message.get("more_body", False):
                self.whole.set()
                return


def _declared_length(scope: Scope) -> bytes | None:
    """The client's `Content-Length` when it alone frames the body (one value, at most 18
    digits, no `Transfer-Encoding`): the HTTP layer then delivers exactly that many bytes."""
    lengths = header_values(scope, "content-length")
    if header_values(scope, "transfer-encoding") or len(lengths) != 1:
        return None
    value = whole_number(lengths[0], 18)
    return None if value is None else str(value).encode()


async def _sent_once(
    body: bytes, account: Account, sent: Callable[[], None] | None = None
) -> AsyncIterator[bytes]:
    """`body` for the upstream, then dropped, and the request's account on the budget of
    bodies in flight closed: the hydrated body is held by nothing once sent, so a stream
    that lasts minutes does not keep it charged (or in memory); then `sent` told. The
    request carries its `Content-Length` (the middleware set it), so it is not sent
    chunked."""
    held = [body]
    del body
    yield held.pop()
    account.close()
    if sent is not None:
        sent()


async def _pieces(
    response: httpcore2.Response, send: Send, cut: Callable[[int, Exception], AnswerCut]
) -> None:
    """The answer's body to the client as it comes; the upstream failing while it is read
    (never the client's side failing: `send` is outside the guard) raises `cut(bytes sent
    so far, what failed)`."""
    stream, sent = aiter(response.aiter_stream()), 0
    while True:
        try:
            piece = await anext(stream)
        except StopAsyncIteration:
            break
        except (httpcore2.TimeoutException, httpcore2.NetworkError, httpcore2.ProtocolError) as exc:
            raise cut(sent, exc) from None
        if piece:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
            sent += len(piece)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _refuse(scope: Scope, send: Send, error: ToolrefError) -> None:
    async def nothing() -> Message:
        return {"type": "http.disconnect"}

    await problem_response(error, for_llm_sdks=True)(scope, nothing, send)


def _timeout(upstream: Route) -> str:
    return (
        f"upstream {upstream.name!r} ({upstream.upstream.shown}) did not answer in time; "
        "retry, or raise TOOLREF_GATEWAY_CONNECT_TIMEOUT / TOOLREF_GATEWAY_READ_TIMEOUT"
    )


def _unreachable(upstream: Route, exc: Exception) -> str:
    """What failed before the answer's head, and the fix: no connection, or one that
    answered what is not HTTP/1.1 (a scheme or port that does not match), or one cut."""
    named = f"upstream {upstream.name!r} ({upstream.upstream.shown})"
    if isinstance(exc, httpcore2.RemoteProtocolError):
        return (
            f"{named} sent what is not an HTTP/1.1 answer, or closed the connection "
            "without one; check the scheme and port in TOOLREF_UPSTREAMS (an upstream that "
            "speaks TLS needs https://)"
        )
    if isinstance(exc, httpcore2.LocalProtocolError):
        return f"{named} could not be sent this request as HTTP/1.1 ({exc})"
    if isinstance(exc, httpcore2.ConnectError):
        return (
            f"{named} cannot be reached ({type(exc).__name__}: {_reason(exc)}); check "
            "TOOLREF_UPSTREAMS and that the upstream is up"
        )
    return (
        f"{named} cut the connection before answering ({type(exc).__name__}); retry, and "
        "check that the upstream is up"
    )


def _broke_off(exc: Exception, read_timeout: float) -> str:
    """What the upstream did mid-answer, in words: no bytes for the read timeout, its
    connection failed (a reset: the OS's own words), or it closed before its end (h11's)."""
    if isinstance(exc, httpcore2.TimeoutException):
        return (
            f"no answer bytes for {read_timeout:g}s, its read timeout "
            "(TOOLREF_GATEWAY_READ_TIMEOUT)"
        )
    if isinstance(exc, httpcore2.ProtocolError):
        text = _reason(exc)
        if "without sending complete message body" in text:
            return f"it closed the connection before its end ({text})"
        return f"it sent what is not HTTP/1.1 ({text})"
    cause: BaseException | None = exc
    for _ in range(_CAUSES):  # ReadError <- anyio's BrokenResourceError <- the OSError
        if cause is None or isinstance(cause, OSError):
            break
        cause = cause.__cause__ or cause.__context__
    said = str(cause) if isinstance(cause, OSError) else type(exc).__name__
    return f"its connection failed ({said})"


def _reason(exc: Exception) -> str:
    """The first line of what the network said (a refused connection, a name not found, a
    certificate refused), at most 200 characters."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else "no reason given"
    return text[:200]
