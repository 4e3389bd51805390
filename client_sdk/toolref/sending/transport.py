"""`Transport` / `AsyncTransport`: refs for the official LLM SDKs, with no other change.

    client = openai.OpenAI(base_url=..., http_client=httpx2.Client(transport=Transport()))
    client = anthropic.Anthropic(base_url=..., http_client=httpx2.Client(transport=Transport()))

Each wraps an inner transport (by default the plain HTTP transport of the client's httpx:
`httpx`, or `httpx2`, its successor, which openai 3 and anthropic 2 are built on) and puts
every LLM request it recognises (`recognise`: OpenAI Chat Completions, OpenAI Responses,
Anthropic Messages) through a `ToolReferenceManager`, with that API's format and messages
key: confirmed payloads travel as refs, the conversation after a confirmed history as its
new messages only, and a 409 missing-refs / missing-history or 400 dictionary-mismatch is
resent before the SDK sees it. The answer is the inner transport's, unread, so a stream
stays a stream; only a problem the manager may resend on is read whole first. Everything
else (other methods and paths, bodies that are not plain JSON, JSON holding values the
manager cannot write back: a lone surrogate escape, a number no double holds) passes
through untouched.

A toolref problem that reaches the SDK (a gateway's refusal: an unknown `Toolref-Key` or
upstream, a body over the limit, a quota, ...) on any of these paths is read whole (it is
small) and handed over in the error shape of the request's API, its status and headers
kept (`toolref.sending.refusals`): the SDK raises its own `APIStatusError` for the status,
with the problem's detail as its message.

A backend that does not speak toolref never answers `Toolref-Protocol: 2`, so it is never
sent a ref or a compressed body: it gets the SDK's request, JSON-equal.
"""

from __future__ import annotations

import importlib
import json
import math
import re
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast, overload

import httpx

from toolref.registry.exchange import Exchange, run_async, run_sync
from toolref.sending.answers import may_resend
from toolref.sending.checks import check_shape_problems
from toolref.sending.manager import ToolReferenceManager
from toolref.sending.packages import (
    AsyncBaseTransport2,
    AsyncByteStream2,
    BaseTransport2,
    SyncByteStream2,
    packages_of,
)
from toolref.sending.refusals import readable_problem, shaped
from toolref.wire.encoding import JSON_TYPE
from toolref.wire.endpoints import endpoint
from toolref.wire.headers import (
    CHECKPOINT_HEADER,
    DICTIONARY_HEADER,
    HISTORY_HEADER,
    PROTOCOL_HEADER,
)
from toolref.wire.models import FormatName
from toolref.wire.protocol import PROTOCOL_REFS

if TYPE_CHECKING:
    import httpx2


# Headers the manager sets for the body it sends; the SDK's others travel as they are.
_REPLACED: Final = frozenset(
    {
        "content-length",
        "content-type",
        "content-encoding",
        "transfer-encoding",
        PROTOCOL_HEADER.lower(),
        HISTORY_HEADER.lower(),
        DICTIONARY_HEADER.lower(),
        CHECKPOINT_HEADER.lower(),
    }
)
_TEE_LIMIT: Final = 8 * 2**20  # a JSON answer larger than this is not read for refs


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """A request the transports rewrite: its API's format, where its messages sit, its body."""

    format: FormatName
    messages_key: str
    body: dict[str, Any]


def recognise(
    method: str, path: str, headers: Mapping[str, str], content: bytes
) -> LLMRequest | None:
    """Pure: the LLM request `content` is, or None when it is to pass through untouched (not
    an LLM endpoint, not plain JSON, already speaking toolref, no list of messages: an OpenAI
    Responses `input` string, say)."""
    found = endpoint(method, path)
    if found is None or not _plain_json(headers):
        return None
    fmt, key = found.format, found.messages_key
    try:
        body = json.loads(content, parse_constant=_not_json, parse_float=_finite)
    except ValueError:  # not JSON, or an integer past Python's digit limit
        return None
    if not isinstance(body, dict) or not isinstance(body.get(key), list):
        return None
    if _SURROGATE_ESCAPE.search(content) is not None and not _encodable(body):
        return None
    return LLMRequest(fmt, key, body)


# `\ud800`-`\udfff`: a surrogate escape, lone if `json.loads` did not pair it. Valid JSON
# (what `JSON.stringify` writes for a string cut inside an emoji) that UTF-8 cannot carry.
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _finite(text: str) -> float:
    """A JSON number as a double, refusing one no double holds (`1e400` reads as inf, which
    JSON cannot write back): such a body passes through as it came."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} does not fit a double")
    return value


def _encodable(body: object) -> bool:
    """Whether every string of `body` is UTF-8 (no lone surrogate); O(size of `body`), run only
    when the text holds a surrogate escape."""
    try:
        json.dumps(body, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return False
    return True


def _plain_json(headers: Mapping[str, str]) -> bool:
    named = {k.lower(): v for k, v in headers.items()}
    if PROTOCOL_HEADER.lower() in named:  # the caller speaks toolref itself
        return False
    if named.get("content-encoding", "identity").strip().lower() != "identity":
        return False
    return named.get("content-type", "").split(";")[0].strip().lower() == JSON_TYPE


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


class Transport(httpx.BaseTransport, BaseTransport2):
    """An httpx (or httpx2) transport sending LLM requests through a `ToolReferenceManager`;
    see the module docstring.

    inner: the transport that sends (default: a new `HTTPTransport` of the client's httpx).
    manager: the manager to rewrite with (default: a new one); `transport.manager.savings`
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
        self.inner = inner
        self.manager = manager if manager is not None else ToolReferenceManager()
        self.shape_problems = check_shape_problems(shape_problems)

    @overload
    def handle_request(self, request: httpx.Request) -> httpx.Response: ...
    @overload
    def handle_request(self, request: httpx2.Request) -> httpx2.Response: ...
    def handle_request(self, request: Any) -> Any:
        inner = self.inner = _inner(self.inner, request, "HTTPTransport")
        found = _recognised(request, request.read()) if _candidate(request) else None
        if found is None:
            response = inner.handle_request(request)
        else:

            def send(step: httpx.Request) -> httpx.Response:
                response = inner.handle_request(step)
                if may_resend(response):
                    response.read()
                return cast(httpx.Response, response)

            response = run_sync(_exchange(self.manager, request, found), send)
            response = _teed(response, self.manager, _SyncTee)
        if not _refusal(self.shape_problems, request, response):
            return response
        response.read()
        return shaped(response, request)

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()


class AsyncTransport(httpx.AsyncBaseTransport, AsyncBaseTransport2):
    """`Transport` for `httpx.AsyncClient` / `httpx2.AsyncClient`."""

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport | AsyncBaseTransport2 | None = None,
        *,
        manager: ToolReferenceManager | None = None,
        shape_problems: bool = True,
    ) -> None:
        self.inner = inner
        self.manager = manager if manager is not None else ToolReferenceManager()
        self.shape_problems = check_shape_problems(shape_problems)

    @overload
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response: ...
    @overload
    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response: ...
    async def handle_async_request(self, request: Any) -> Any:
        inner = self.inner = _inner(self.inner, request, "AsyncHTTPTransport")
        found = _recognised(request, await request.aread()) if _candidate(request) else None
        if found is None:
            response = await inner.handle_async_request(request)
        else:

            async def send(step: httpx.Request) -> httpx.Response:
                response = await inner.handle_async_request(step)
                if may_resend(response):
                    await response.aread()
                return cast(httpx.Response, response)

            response = await run_async(_exchange(self.manager, request, found), send)
            response = _teed(response, self.manager, _AsyncTee)
        if not _refusal(self.shape_problems, request, response):
            return response
        await response.aread()
        return shaped(response, request)

    async def aclose(self) -> None:
        if self.inner is not None:
            await self.inner.aclose()


def _refusal(shape: bool, request: Any, response: Any) -> bool:
    """A problem to read whole and hand back shaped (`shape_problems`): never to a caller
    that speaks toolref itself (its request names `Toolref-Protocol`)."""
    return (
        shape
        and response.status_code >= 400
        and readable_problem(response)
        and PROTOCOL_HEADER not in request.headers
    )


def _candidate(request: Any) -> bool:
    """Worth reading the body of (the body is read only for these)."""
    return endpoint(request.method, request.url.path) is not None and _plain_json(request.headers)


def _recognised(request: Any, content: bytes) -> LLMRequest | None:
    return recognise(request.method, request.url.path, request.headers, content)


def _exchange(
    manager: ToolReferenceManager, request: Any, found: LLMRequest
) -> Exchange[httpx.Response]:
    return manager.exchange(
        _rebuilder(request),
        found.body,
        format=found.format,
        messages_key=found.messages_key,
        streamed=True,
    )


def _inner(inner: Any, request: Any, default: str) -> Any:
    """The inner transport for `request`: the one given, or a new one of its httpx."""
    [package] = packages_of(request) or {"httpx"}
    if inner is None:
        return getattr(importlib.import_module(package), default)()
    made = packages_of(inner)
    if made and package not in made:
        other = made.pop()
        raise TypeError(
            f"the inner transport is an {other} transport ({type(inner).__name__}) but the "
            f"client is an {package} client, and each only takes its own; pass "
            f"inner={package}.{default}() (or leave inner out), or use an {other} client"
        )
    return inner


def _rebuilder(request: Any) -> Callable[[bytes, dict[str, str]], httpx.Request]:
    """The SDK's request again (same class, URL, headers, extensions) with the manager's
    body and headers."""
    kept = [(k, v) for k, v in request.headers.multi_items() if k.lower() not in _REPLACED]

    def build(content: bytes, headers: dict[str, str]) -> httpx.Request:
        made = type(request)(
            request.method,
            request.url,
            headers=[*kept, *headers.items()],
            content=content,
            extensions=request.extensions,
        )
        return cast(httpx.Request, made)

    return build


def _teed(response: httpx.Response, manager: ToolReferenceManager, tee: type[Any]) -> Any:
    """A successful protocol-2 JSON answer with its bytes copied as the SDK reads them, so
    that its `toolReferences` are learned once it has been read whole; any other answer (an
    event stream, say) as it is."""
    headers = response.headers
    if (
        headers.get(PROTOCOL_HEADER) != str(PROTOCOL_REFS)
        or response.status_code >= 400
        or not headers.get("content-type", "").startswith(JSON_TYPE)
        or headers.get("content-encoding", "identity").strip().lower() != "identity"
    ):
        return response
    status = response.status_code

    def learn(content: bytes) -> None:
        manager.learn_answer(status, headers, content)

    response.stream = tee(response.stream, learn)
    return response


class _Copy:
    """The bytes seen, up to `_TEE_LIMIT`; handed to `done` once, at the end."""

    def __init__(self, done: Callable[[bytes], None]) -> None:
        self.done: Callable[[bytes], None] | None = done
        self.parts: list[bytes] = []
        self.size = 0

    def keep(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > _TEE_LIMIT:
            self.done = None
        elif self.done is not None:
            self.parts.append(chunk)

    def end(self) -> None:
        done, self.done = self.done, None
        if done is not None:
            done(b"".join(self.parts))


class _SyncTee(httpx.SyncByteStream, SyncByteStream2):
    def __init__(self, stream: Any, done: Callable[[bytes], None]) -> None:
        self._stream, self._copy = stream, _Copy(done)

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._stream:
            self._copy.keep(chunk)
            yield chunk
        self._copy.end()

    def close(self) -> None:
        self._stream.close()


class _AsyncTee(httpx.AsyncByteStream, AsyncByteStream2):
    def __init__(self, stream: Any, done: Callable[[bytes], None]) -> None:
        self._stream, self._copy = stream, _Copy(done)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            self._copy.keep(chunk)
            yield chunk
        self._copy.end()

    async def aclose(self) -> None:
        await self._stream.aclose()
