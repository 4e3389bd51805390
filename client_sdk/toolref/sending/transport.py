"""`Transport` / `AsyncTransport`: edits for the official LLM SDKs, with no other change.

    client = openai.OpenAI(base_url=..., http_client=httpx2.Client(transport=Transport()))
    client = anthropic.Anthropic(base_url=..., http_client=httpx2.Client(transport=Transport()))

Each wraps an inner transport (by default the plain HTTP transport of the client's httpx:
`httpx`, or `httpx2`, its successor, which openai 3 and anthropic 2 are built on) and puts
every request to an LLM endpoint (`toolref.wire.endpoints`: OpenAI Chat Completions and
Responses, Anthropic Messages, Gemini) whose body is plain JSON through its manager
(`ToolReferenceManager.exchange`, `toolref.sending.sender`): as it is with an offer of edits
until the receiver (the gateway, a backend's `ToolRefMiddleware`) says it reads them, then
as an edit of what it holds, misses resent before the SDK sees them. The answer is the inner
transport's, unread, so a stream stays a stream; only a problem the exchange may resend on
is read whole first. Everything else passes through untouched.

A toolref problem that reaches the SDK (a gateway's refusal: an unknown `Toolref-Key` or
upstream, a body over the limit, a quota, ...) is read whole (it is small, and read within
`PROBLEM_READ_S`: one that trickles past it is handed over as it comes) and handed over
in the error shape of the request's API, its status and headers kept
(`toolref.sending.refusals`): the SDK raises its own `APIStatusError` for the status, with
the problem's detail as its message.

A receiver that does not speak toolref never answers `Toolref-Edits`, so it is never sent an
edit: it gets the SDK's request, byte for byte (and a header it ignores).

`AsyncTransport` sends an endpoint's edits over a channel where the endpoint's answer said
one is served (`Toolref-Channel: <path>` beside `Toolref-Edits`: the gateway, a
`ToolRefMiddleware` given `channel_path`; `toolref.sending.channels.Channels`), one
per origin, path and credentials, so a turn costs its edit and a few bytes of framing
instead of an HTTP head; while the channel cannot be had (refused, unreachable) the edits
go over HTTP, and it is asked for again every 30 s. The channel connects straight to the
origin (no proxy, the authorities httpx trusts), so by default (`channel=None`) only a
transport given no inner one takes it; `channel=True` with any inner transport,
`channel=False` never. `Transport` (sync) sends over HTTP.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast, overload

import httpx

from toolref.registry.bounded import aread_problem, is_read, read_problem
from toolref.registry.packages import AsyncBaseTransport2, BaseTransport2, packages_of
from toolref.sending.answers import adrive, drive, to_read
from toolref.sending.backoff import LONGEST
from toolref.sending.channels import Channels
from toolref.sending.manager import ToolReferenceManager
from toolref.sending.refusals import readable_problem, shaped
from toolref.sending.request_checks import (
    check_channel_retry_max,
    check_inner,
    check_manager,
    check_shape_problems,
)
from toolref.wire import keepalive
from toolref.wire.encoding import JSON_TYPE, media_type
from toolref.wire.endpoints import Endpoint, endpoint
from toolref.wire.headers import PROTOCOL_HEADER

if TYPE_CHECKING:
    import httpx2

log = logging.getLogger("toolref.channel")


class Transport(httpx.BaseTransport, BaseTransport2):
    """An httpx (or httpx2) transport sending LLM requests through a `ToolReferenceManager`
    (as edits, once the receiver reads them); see the module docstring.

    inner: the transport that sends (default: a new `HTTPTransport` of the client's httpx).
    manager: the manager to send with (default: a new one); `transport.manager.savings`
        tells what it saved.
    shape_problems: hand the SDK a toolref problem it does not resend on (a gateway's
        refusal) in the error shape of the request's API, status and headers kept, so that
        the SDK's error says the problem's detail (`toolref.sending.refusals`); False: as
        the backend sent it (problem+json), for a caller that reads toolref's problems.
    """

    def __init__(
        self,
        inner: httpx.BaseTransport | BaseTransport2 | None = None,
        *,
        manager: ToolReferenceManager | None = None,
        shape_problems: bool = True,
    ) -> None:
        check_inner(inner, sync=True)
        check_manager(manager, "Transport")
        self.inner = inner
        self._making = threading.Lock()  # the inner transport made once, whatever the threads
        self.manager = manager if manager is not None else ToolReferenceManager()
        self.shape_problems = check_shape_problems(shape_problems)

    @overload
    def handle_request(self, request: httpx.Request) -> httpx.Response: ...
    @overload
    def handle_request(self, request: httpx2.Request) -> httpx2.Response: ...
    def handle_request(self, request: Any) -> Any:
        with self._making:  # two threads' first requests at once: else one pool leaked
            inner = self.inner = _inner(self.inner, request, "HTTPTransport")
        found = _candidate(request)
        if found is None:
            response = inner.handle_request(request)
        else:
            request.read()

            def send(step: httpx.Request) -> httpx.Response:
                response = inner.handle_request(step)
                try:
                    if to_read(response, step):
                        read_problem(response)
                except BaseException:  # failed while a problem was read: its connection back
                    response.close()
                    raise
                return cast(httpx.Response, response)

            exchange = self.manager.exchange(request, messages_key=found.messages_key)
            response = drive(exchange, send)
        if not _refusal(self.shape_problems, request, response):
            return response
        try:
            read_problem(response)  # within its deadline, else handed on as it comes
        except BaseException:
            response.close()
            raise
        return shaped(response, request) if is_read(response) else response

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()

    # An async client calls these; without them its error is an AttributeError in httpx.
    async def handle_async_request(self, request: Any) -> Any:
        raise TypeError(
            _WRONG_KIND.format(made="Transport", other="AsyncTransport", kind="an async")
        )

    async def __aenter__(self) -> Any:
        raise TypeError(
            _WRONG_KIND.format(made="Transport", other="AsyncTransport", kind="an async")
        )


class AsyncTransport(httpx.AsyncBaseTransport, AsyncBaseTransport2):
    """`Transport` for `httpx.AsyncClient` / `httpx2.AsyncClient`; `channel`: send edits
    over a channel per origin where the receiver serves one (see the module docstring);
    `channel_retry_max`: the most seconds edits go over HTTP before a channel is tried again
    after failures in a row to have one (30 s after the first, doubled after each)."""

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport | AsyncBaseTransport2 | None = None,
        *,
        manager: ToolReferenceManager | None = None,
        shape_problems: bool = True,
        channel: bool | None = None,
        channel_retry_max: float = LONGEST,
    ) -> None:
        check_inner(inner, sync=False)
        check_manager(manager, "AsyncTransport")
        self.inner = inner
        self.manager = manager if manager is not None else ToolReferenceManager()
        self.shape_problems = check_shape_problems(shape_problems)
        if channel not in (None, True, False):
            raise TypeError(
                f"channel is None (edits over a channel where no inner transport is given), "
                f"True (with any inner transport) or False, not {channel!r}"
            )
        if channel is None:  # a given transport may carry a proxy, certificates, a socket
            channel = inner is None
        retry_max = check_channel_retry_max(channel_retry_max)
        self.channels = Channels(log.info, retry_max) if channel else None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop of its first request

    @overload
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response: ...
    @overload
    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response: ...
    async def handle_async_request(self, request: Any) -> Any:
        self._loop = _same_loop(self._loop)
        inner = self.inner = _inner(self.inner, request, "AsyncHTTPTransport")
        found = _candidate(request)
        if found is None:
            response = await inner.handle_async_request(request)
        else:
            await request.aread()

            async def send(step: httpx.Request) -> httpx.Response:
                sender = inner if self.channels is None else await self.channels.sender(inner, step)
                response = await sender.handle_async_request(step)
                try:
                    if self.channels is not None:
                        self.channels.told(step, response)
                    if to_read(response, step):
                        await aread_problem(response)
                except BaseException:  # cancelled while a problem was read: its connection back
                    await response.aclose()
                    raise
                return cast(httpx.Response, response)

            exchange = self.manager.exchange(request, messages_key=found.messages_key)
            response = await adrive(exchange, send)
        if not _refusal(self.shape_problems, request, response):
            return response
        try:
            await aread_problem(response)  # within its deadline, else handed on as it comes
        except BaseException:
            await response.aclose()
            raise
        return shaped(response, request) if is_read(response) else response

    # A sync client calls these; without them its error is an AttributeError in httpx.
    def handle_request(self, request: Any) -> Any:
        raise TypeError(_WRONG_KIND.format(made="AsyncTransport", other="Transport", kind="a sync"))

    def __enter__(self) -> Any:
        raise TypeError(_WRONG_KIND.format(made="AsyncTransport", other="Transport", kind="a sync"))

    async def aclose(self) -> None:
        if self.channels is not None:
            await self.channels.aclose()  # not the inner transport: closed here, once
        if self.inner is not None:
            await self.inner.aclose()


_WRONG_KIND = (
    "a toolref.{made} was given to {kind} client, which cannot call it; give that client a "
    "toolref.{other}() (httpx.AsyncClient / httpx2.AsyncClient take AsyncTransport, "
    "httpx.Client / httpx2.Client take Transport)"
)


def _same_loop(first: asyncio.AbstractEventLoop | None) -> asyncio.AbstractEventLoop:
    """The running loop, when it is the one the transport first sent on (its connections,
    channels and locks belong to that loop); `RuntimeError` saying the fix otherwise."""
    running = asyncio.get_running_loop()
    if first is not None and first is not running:
        raise RuntimeError(
            "this AsyncTransport (and the client holding it) sent its first request on "
            "another event loop; its connections and channels belong to that loop. Make "
            "one client per event loop: create it inside the coroutine that asyncio.run() "
            "runs, not at import, and close it there"
        )
    return running


def _refusal(shape: bool, request: Any, response: Any) -> bool:
    """A problem to read whole and hand back shaped (`shape_problems`): never to a caller
    that speaks toolref itself (its request names `Toolref-Protocol`)."""
    return (
        shape
        and response.status_code >= 400
        and readable_problem(response)
        and PROTOCOL_HEADER not in request.headers
    )


def _candidate(request: Any) -> Endpoint | None:
    """The LLM endpoint of a request to send through the manager: a POST to one, whose body
    is plain JSON, from a caller that does not speak toolref itself."""
    found = endpoint(request.method, request.url.path)
    return found if found is not None and _plain_json(request.headers) else None


def _plain_json(headers: Mapping[str, str]) -> bool:
    named = {k.lower(): v for k, v in headers.items()}
    if PROTOCOL_HEADER.lower() in named:  # the caller speaks toolref itself
        return False
    if named.get("content-encoding", "identity").strip().lower() != "identity":
        return False
    return media_type(named.get("content-type")) == JSON_TYPE


def _inner(inner: Any, request: Any, default: str) -> Any:
    """The inner transport for `request`: the one given, or a new one of its httpx, its
    idle connections kept `keepalive.DEFAULT_SECONDS` (httpx keeps them 5 s, as long as
    the gateway and uvicorn do: a request written as the receiver closes one would fail)."""
    [package] = packages_of(request) or {"httpx"}
    if inner is None:  # idle connections kept for less than receivers keep them
        module = importlib.import_module(package)
        limits = module.Limits(keepalive_expiry=keepalive.DEFAULT_SECONDS)
        return getattr(module, default)(limits=limits)
    made = packages_of(inner)
    if made and package not in made:
        other = made.pop()
        raise TypeError(
            f"the inner transport is an {other} transport ({type(inner).__name__}) but the "
            f"client is an {package} client, and each only takes its own; pass "
            f"inner={package}.{default}() (or leave inner out), or use an {other} client"
        )
    return inner
