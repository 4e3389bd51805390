"""Registry clients: `RegistryClient` (sync) and `AsyncRegistryClient`, one shared base.

`BaseRegistryClient` holds everything but the I/O, as sans-I/O exchanges (see `exchange`):
capability negotiation (fetched once; it picks the protocol version, msgpack over JSON, and
zstd request compression above a size threshold), batching to the server's limits, retries
with jittered exponential backoff on 503 and connection errors, a circuit breaker, and the
mapping of problem+json answers to typed errors. The two halves only send and sleep.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Self

import httpx
import pydantic
import zstandard

from toolref import encoding, spans
from toolref.breaker import BreakerState, CircuitBreaker
from toolref.canonical import Ref
from toolref.errors import (
    CircuitOpenError,
    MissingHistoryError,
    ProtocolRequiredError,
    RegistryUnreachableError,
    ToolrefError,
    UnexpectedResponseError,
    error_from_problem,
)
from toolref.exchange import Exchange, Sleep, T, run_async, run_sync
from toolref.history import HISTORY_HEADER, KEEP_HISTORY, check_history_ref, is_history_ref
from toolref.models import Capabilities, Invocation, RegisteredRef
from toolref.protocol import PROTOCOL_HEADER, PROTOCOL_HIGH, PROTOCOL_REFS

_RETRYABLE = frozenset({502, 503, 504})
_PROBE_REF = "tr_" + "a" * 26  # a well-formed ref no invocation has: 404 with a good key


@dataclass(frozen=True, slots=True)
class Resolved:
    invocations: dict[str, Invocation]
    missing: list[str]


@dataclass(frozen=True, slots=True)
class MessagesResult:
    """What optimize and hydrate answer."""

    format: str
    messages: list[Any]
    tool_references: dict[str, str] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    history_ref: str | None = None  # hydrate, when asked to keep the history

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> MessagesResult:
        ref = body.get("historyRef")
        return cls(
            format=body["format"],
            messages=body["messages"],
            tool_references=dict(body.get("toolReferences") or {}),
            stats=dict(body.get("optimizationStats") or {}),
            history_ref=ref if is_history_ref(ref) else None,
        )


@dataclass(frozen=True, slots=True)
class HydratedText:
    """A hydrate answer read as text: its messages stay the JSON text the registry wrote
    (the payloads and messages exactly as their clients sent them), to be spliced."""

    text: str
    messages: tuple[int, int]  # span of the messages array in `text`
    format: str
    tool_references: dict[str, str]
    history_ref: str | None

    @property
    def messages_text(self) -> str:
        return self.text[self.messages[0] : self.messages[1]]

    @classmethod
    def of(cls, text: str) -> HydratedText:
        document = spans.document(text)
        found = document.members
        if not isinstance(document.value, dict) or "messages" not in found:
            raise ValueError("not a hydrate answer: no `messages`")
        body = document.value
        member = found["messages"]
        ref = body.get("historyRef")
        references = body.get("toolReferences")
        return cls(
            text,
            (member.start, member.end),
            str(body.get("format")),
            dict(references) if isinstance(references, dict) else {},
            ref if is_history_ref(ref) else None,
        )


InvocationLike = Invocation | Mapping[str, Any]


def _wire(invocation: InvocationLike) -> dict[str, Any]:
    if isinstance(invocation, Invocation):
        return invocation.to_wire()
    return {
        "name": invocation["name"],
        "args": invocation["args"],
        "result": invocation["result"],
        "isError": bool(invocation.get("isError", False)),
    }


def _unique_refs(refs: Iterable[str]) -> list[str]:
    """Validated refs, each once: the server dedupes within a batch, this across batches."""
    return list(dict.fromkeys(str(Ref(r)) for r in refs))


def _chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class BaseRegistryClient:
    """Configuration, negotiation and every exchange; subclasses add the I/O."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = 5.0,
        retries: int = 2,
        backoff: float = 0.05,
        max_backoff: float = 2.0,
        breaker: CircuitBreaker | None = None,
        encoding: Literal["auto", "json", "msgpack"] = "auto",
        compress_threshold: int = 16_384,
        headers: Mapping[str, str] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if retries < 0 or backoff < 0 or compress_threshold < 0:
            raise ValueError(
                f"retries, backoff and compress_threshold must be >= 0, got {retries}, "
                f"{backoff} and {compress_threshold}"
            )
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.breaker = breaker or CircuitBreaker()
        self.encoding = encoding
        self.compress_threshold = compress_threshold
        self._rng = rng or random.Random()  # noqa: S311 - backoff jitter, not secrets
        self._headers = dict(headers or {})
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._capabilities: Capabilities | None = None

    # --- negotiation ---------------------------------------------------------------

    @property
    def negotiated(self) -> Capabilities | None:
        """The server's capabilities, once fetched."""
        return self._capabilities

    @property
    def protocol(self) -> int:
        """The protocol version in use: the highest both sides speak (1 before negotiation)."""
        if self._capabilities is None:
            return 1
        return min(PROTOCOL_HIGH, self._capabilities.protocol.high)

    def _uses_msgpack(self, caps: Capabilities) -> bool:
        if self.encoding == "json":
            return False
        return encoding.MSGPACK_TYPE in caps.encodings

    def _capabilities_exchange(self) -> Exchange[Capabilities]:
        if self._capabilities is None:
            request = httpx.Request(
                "GET",
                f"{self.base_url}/v1/capabilities",
                headers={**self._headers, "Accept": encoding.JSON_TYPE},
            )
            response = yield from self._send(request)
            body = self._decode(response)
            try:
                self._capabilities = Capabilities.model_validate(body)
            except pydantic.ValidationError as exc:
                raise UnexpectedResponseError(
                    f"{self.base_url}/v1/capabilities is not a toolref capabilities document "
                    f"({exc.error_count()} problem(s), first: {exc.errors()[0]['msg']}); is "
                    "this a toolref registry?",
                    httpStatus=response.status_code,
                ) from None
        return self._capabilities

    # --- requests and responses ----------------------------------------------------

    def _request(
        self,
        caps: Capabilities,
        method: str,
        path: str,
        body: Any = None,
        extra: Mapping[str, str] | None = None,
    ) -> httpx.Request:
        msgpack = self._uses_msgpack(caps)
        headers = {
            **self._headers,
            **(extra or {}),
            PROTOCOL_HEADER: str(self.protocol),
            "Accept": f"{encoding.MSGPACK_TYPE}, {encoding.JSON_TYPE};q=0.5"
            if msgpack
            else encoding.JSON_TYPE,
        }
        content = None
        if body is not None:
            content = encoding.packb(body) if msgpack else encoding.dumps_json(body)
            headers["Content-Type"] = encoding.MSGPACK_TYPE if msgpack else encoding.JSON_TYPE
            if len(content) >= self.compress_threshold and "zstd" in caps.compressors:
                # A compressor per call: ZstdCompressor objects are not thread-safe.
                content = zstandard.ZstdCompressor(level=3).compress(content)
                headers["Content-Encoding"] = "zstd"
        return httpx.Request(method, f"{self.base_url}{path}", headers=headers, content=content)

    def _delay(self, attempt: int, response: httpx.Response | None) -> float:
        """Full-jitter exponential backoff; a Retry-After shorter than the cap is honoured."""
        ceiling = min(self.max_backoff, self.backoff * 2**attempt)  # attempt 0: `backoff`
        delay = self._rng.uniform(0, ceiling)
        after = response.headers.get("retry-after", "") if response is not None else ""
        if after.isdigit():
            delay = max(delay, min(float(after), self.max_backoff))
        return delay

    def _send(self, request: httpx.Request) -> Exchange[httpx.Response]:
        """Send with retries; the breaker counts every failed attempt."""
        attempt = 0
        while True:
            if not self.breaker.allow():
                raise CircuitOpenError(
                    f"the registry at {self.base_url} failed repeatedly; not trying again for "
                    f"{self.breaker.retry_in():.1f}s: send full payloads meanwhile",
                    retry_after=max(1, round(self.breaker.retry_in())),
                )
            response: httpx.Response | None = None
            try:
                response = yield request
            except httpx.TransportError as exc:
                failure = f"{type(exc).__name__}: {exc}"
            else:
                if response is not None and response.status_code not in _RETRYABLE:
                    # A 4xx is the registry working; a 500 is it failing (not worth a retry).
                    if response.status_code >= 500:
                        self.breaker.failure()
                    else:
                        self.breaker.success()
                    return response
                failure = f"HTTP {response.status_code if response is not None else '?'}"
            self.breaker.failure()
            if attempt >= self.retries or self.breaker.state is BreakerState.OPEN:
                raise self._unreachable(request, failure, response, attempt + 1)
            yield Sleep(self._delay(attempt, response))
            attempt += 1

    def _unreachable(
        self,
        request: httpx.Request,
        failure: str,
        response: httpx.Response | None,
        attempts: int,
    ) -> ToolrefError:
        if response is not None and _is_problem(response):
            try:
                problem = response.json()
            except ValueError:
                problem = None
            if isinstance(problem, dict):
                return error_from_problem(problem, response.status_code, response.headers)
        return RegistryUnreachableError(
            f"{request.method} {request.url.path} failed after {attempts} attempt(s) "
            f"({failure}); send full payloads, and check that the registry at "
            f"{self.base_url} is running",
        )

    def _decode(self, response: httpx.Response) -> Any:
        media = response.headers.get("content-type", "").split(";")[0].strip()
        problem: Any = None
        try:
            if _is_problem(response):
                problem = response.json()
            elif response.status_code < 400 and media == encoding.MSGPACK_TYPE:
                return encoding.unpackb(response.content)
            elif response.status_code < 400 and media == encoding.JSON_TYPE:
                return response.json()
        except ValueError:
            pass  # undecodable: reported below
        if isinstance(problem, dict):
            raise error_from_problem(problem, response.status_code, response.headers)
        raise UnexpectedResponseError(
            f"the registry answered HTTP {response.status_code} ({media or 'no content type'}) "
            f"with {response.content[:120]!r}, not a toolref answer; is {self.base_url} a "
            "toolref registry?",
            httpStatus=response.status_code,
        )

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        refs: bool = True,
        headers: Mapping[str, str] | None = None,
    ) -> Exchange[Any]:
        caps = yield from self._capabilities_exchange()
        if refs and self.protocol < PROTOCOL_REFS:
            raise ProtocolRequiredError(
                f"the registry at {self.base_url} speaks protocol {self.protocol}, which has no "
                "refs; upgrade it, or send full payloads"
            )
        response = yield from self._send(self._request(caps, method, path, body, headers))
        return self._decode(response)

    def _batches(self, items: Sequence[Any]) -> Exchange[list[Sequence[Any]]]:
        caps = yield from self._capabilities_exchange()
        return _chunks(items, caps.limits.max_batch)

    # --- operations, as exchanges ----------------------------------------------------

    def _register(self, invocations: Iterable[InvocationLike]) -> Exchange[list[RegisteredRef]]:
        items = [_wire(i) for i in invocations]
        found: list[RegisteredRef] = []
        for batch in (yield from self._batches(items)):
            body = yield from self._call("POST", "/v1/invocations", {"invocations": list(batch)})
            found.extend(RegisteredRef.model_validate(r) for r in body["refs"])
        return found

    # Refs are checked when the exchange is made, so a bad one never costs a request.

    def _find_missing(self, refs: Iterable[str]) -> Exchange[list[str]]:
        return self._find_missing_batches(_unique_refs(refs))

    def _find_missing_batches(self, wanted: list[str]) -> Exchange[list[str]]:
        missing: list[str] = []
        for batch in (yield from self._batches(wanted)):
            body = yield from self._call(
                "POST", "/v1/invocations:findMissing", {"refs": list(batch)}
            )
            missing.extend(body["missing"])
        return missing

    def _resolve(self, refs: Iterable[str]) -> Exchange[Resolved]:
        return self._resolve_batches(_unique_refs(refs))

    def _resolve_batches(self, wanted: list[str]) -> Exchange[Resolved]:
        invocations: dict[str, Invocation] = {}
        missing: list[str] = []
        for batch in (yield from self._batches(wanted)):
            body = yield from self._call("POST", "/v1/invocations:resolve", {"refs": list(batch)})
            for ref, value in body["invocations"].items():
                invocations[ref] = Invocation.model_validate(value)
            missing.extend(body["missing"])
        return Resolved(invocations, missing)

    def _get(self, ref: str) -> Exchange[Invocation]:
        return self._get_one(Ref(ref))

    def _get_one(self, ref: Ref) -> Exchange[Invocation]:
        body = yield from self._call("GET", f"/v1/invocations/{ref}", refs=False)
        return Invocation.model_validate(body)

    def _messages(
        self, action: str, messages: list[Any], **options: Any
    ) -> Exchange[MessagesResult]:
        body = {"messages": messages, **{k: v for k, v in options.items() if v is not None}}
        answer = yield from self._call("POST", f"/v1/messages:{action}", body)
        return MessagesResult.of(answer)

    def _hydrate(
        self,
        messages: list[Any],
        format: str | None,
        mode: str | None,
        history_ref: str | None,
        keep_history: bool,
    ) -> Exchange[MessagesResult]:
        body: dict[str, Any] = {"messages": messages}
        options = {"format": format, "mode": mode, "historyRef": history_ref}
        body.update((k, v) for k, v in options.items() if v is not None)
        if history_ref is not None:
            check_history_ref(history_ref)  # a bad one never costs a request
            caps = yield from self._capabilities_exchange()
            if not caps.history_refs:
                raise MissingHistoryError(
                    f"the registry at {self.base_url} keeps no histories, so it cannot "
                    f"continue {history_ref}; send the whole conversation",
                    history_ref,
                )
        headers = {HISTORY_HEADER: KEEP_HISTORY} if keep_history else None
        answer = yield from self._call("POST", "/v1/messages:hydrate", body, headers=headers)
        return MessagesResult.of(answer)

    def _hydrate_text(
        self,
        messages: str,
        format: str | None,
        history_ref: str | None,
        keep_history: bool,
    ) -> Exchange[HydratedText]:
        """`_hydrate` for messages given as JSON text (an array), answered as text: nothing
        in them is parsed and written again on the way (see `HydratedText`)."""
        caps = yield from self._capabilities_exchange()
        if self.protocol < PROTOCOL_REFS:
            raise ProtocolRequiredError(
                f"the registry at {self.base_url} speaks protocol {self.protocol}, which has no "
                "refs; upgrade it, or send full payloads"
            )
        options = ""
        if format is not None:
            options += ',"format":' + json.dumps(format)
        if history_ref is not None:
            check_history_ref(history_ref)
            if not caps.history_refs:
                raise MissingHistoryError(
                    f"the registry at {self.base_url} keeps no histories, so it cannot "
                    f"continue {history_ref}; send the whole conversation",
                    history_ref,
                )
            options += ',"historyRef":' + json.dumps(history_ref)
        content = ('{"messages":' + messages + options + "}").encode()
        headers = {
            **self._headers,
            PROTOCOL_HEADER: str(self.protocol),
            "Accept": encoding.JSON_TYPE,
            "Content-Type": encoding.JSON_TYPE,
        }
        if keep_history:
            headers[HISTORY_HEADER] = KEEP_HISTORY
        if len(content) >= self.compress_threshold and "zstd" in caps.compressors:
            content = zstandard.ZstdCompressor(level=3).compress(content)
            headers["Content-Encoding"] = "zstd"
        url = f"{self.base_url}/v1/messages:hydrate"
        response = yield from self._send(
            httpx.Request("POST", url, headers=headers, content=content)
        )
        media = response.headers.get("content-type", "").split(";")[0].strip()
        if response.status_code >= 400 or media != encoding.JSON_TYPE:
            self._decode(response)  # raises the problem (or says what came instead)
        try:
            return HydratedText.of(response.content.decode())
        except ValueError:
            raise UnexpectedResponseError(
                f"the registry at {self.base_url} answered hydrate with "
                f"{response.content[:120]!r}, not a hydrate answer; is it a toolref registry?",
                httpStatus=response.status_code,
            ) from None

    def _verify(self) -> Exchange[str | None]:
        """None when the registry accepts this client's key; else what is wrong, in words.
        Costs two requests: capabilities (no key needed) and one GET that needs the key."""
        try:
            caps = yield from self._capabilities_exchange()
            if caps.protocol.high < PROTOCOL_REFS:
                return f"the registry at {self.base_url} speaks only protocol {caps.protocol.high}"
            probe = httpx.Request(
                "GET", f"{self.base_url}/v1/invocations/{_PROBE_REF}", headers=self._headers
            )
            response = yield from self._send(probe)
        except ToolrefError as exc:
            return exc.detail
        if response.status_code in (401, 403):
            return (
                f"the registry at {self.base_url} refused this API key (HTTP "
                f"{response.status_code}); set the key a TOOLREF_API_KEYS entry hashes"
            )
        return None

    def _ready(self) -> Exchange[bool]:
        request = httpx.Request("GET", f"{self.base_url}/readyz", headers=self._headers)
        try:
            response = yield from self._send(request)
        except ToolrefError:
            return False
        return response.status_code == 200


def _is_problem(response: httpx.Response) -> bool:
    media: str = response.headers.get("content-type", "")
    return media.startswith(encoding.PROBLEM_TYPE)


class RegistryClient(BaseRegistryClient):
    """Blocking client. `transport=` injects an httpx transport (tests, custom networking)."""

    def __init__(
        self,
        base_url: str,
        *,
        transport: httpx.BaseTransport | None = None,
        **options: Any,
    ) -> None:
        super().__init__(base_url, **options)
        self._http = httpx.Client(transport=transport, timeout=self.timeout)
        self._negotiation = threading.Lock()

    def _run(self, exchange: Exchange[T]) -> T:
        # Calls racing to be first share one negotiation.
        if self._capabilities is None:
            with self._negotiation:
                if self._capabilities is None:
                    run_sync(self._capabilities_exchange(), self._http.send)
        return run_sync(exchange, self._http.send)

    def capabilities(self) -> Capabilities:
        return self._run(self._capabilities_exchange())

    def register(self, invocations: Iterable[InvocationLike]) -> list[RegisteredRef]:
        return self._run(self._register(invocations))

    def find_missing(self, refs: Iterable[str]) -> list[str]:
        return self._run(self._find_missing(refs))

    def resolve(self, refs: Iterable[str]) -> Resolved:
        return self._run(self._resolve(refs))

    def get(self, ref: str) -> Invocation:
        return self._run(self._get(ref))

    def optimize(self, messages: list[Any], format: str | None = None) -> MessagesResult:
        return self._run(self._messages("optimize", messages, format=format))

    def hydrate(
        self,
        messages: list[Any],
        format: str | None = None,
        mode: str | None = None,
        *,
        history_ref: str | None = None,
        keep_history: bool = False,
    ) -> MessagesResult:
        """Messages in full. `history_ref`: `messages` continue that confirmed history, and
        the result holds the whole conversation. `keep_history` (implied by `history_ref`):
        keep the conversation as a history; `result.history_ref` confirms it."""
        return self._run(self._hydrate(messages, format, mode, history_ref, keep_history))

    def hydrate_text(
        self,
        messages: str,
        format: str | None = None,
        *,
        history_ref: str | None = None,
        keep_history: bool = False,
    ) -> HydratedText:
        """`hydrate` for messages given as JSON text, answered as text (see `HydratedText`)."""
        return self._run(self._hydrate_text(messages, format, history_ref, keep_history))

    def verify(self) -> str | None:
        """None when the registry answers and accepts this client's key; else what is wrong."""
        return run_sync(self._verify(), self._http.send)

    def ready(self) -> bool:
        return run_sync(self._ready(), self._http.send)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncRegistryClient(BaseRegistryClient):
    """asyncio client. `transport=` injects an httpx transport (e.g. `httpx.ASGITransport`)."""

    def __init__(
        self,
        base_url: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        **options: Any,
    ) -> None:
        super().__init__(base_url, **options)
        self._http = httpx.AsyncClient(transport=transport, timeout=self.timeout)
        self._negotiation = asyncio.Lock()

    async def _run(self, exchange: Exchange[T]) -> T:
        # Calls racing to be first share one negotiation.
        if self._capabilities is None:
            async with self._negotiation:
                if self._capabilities is None:
                    await run_async(self._capabilities_exchange(), self._http.send)
        return await run_async(exchange, self._http.send)

    async def capabilities(self) -> Capabilities:
        return await self._run(self._capabilities_exchange())

    async def register(self, invocations: Iterable[InvocationLike]) -> list[RegisteredRef]:
        return await self._run(self._register(invocations))

    async def find_missing(self, refs: Iterable[str]) -> list[str]:
        return await self._run(self._find_missing(refs))

    async def resolve(self, refs: Iterable[str]) -> Resolved:
        return await self._run(self._resolve(refs))

    async def get(self, ref: str) -> Invocation:
        return await self._run(self._get(ref))

    async def optimize(self, messages: list[Any], format: str | None = None) -> MessagesResult:
        return await self._run(self._messages("optimize", messages, format=format))

    async def hydrate(
        self,
        messages: list[Any],
        format: str | None = None,
        mode: str | None = None,
        *,
        history_ref: str | None = None,
        keep_history: bool = False,
    ) -> MessagesResult:
        """Async `RegistryClient.hydrate`."""
        exchange = self._hydrate(messages, format, mode, history_ref, keep_history)
        return await self._run(exchange)

    async def hydrate_text(
        self,
        messages: str,
        format: str | None = None,
        *,
        history_ref: str | None = None,
        keep_history: bool = False,
    ) -> HydratedText:
        """`hydrate` for messages given as JSON text, answered as text (see `HydratedText`):
        what a backend uses to hand its app exactly what the client sent."""
        exchange = self._hydrate_text(messages, format, history_ref, keep_history)
        return await self._run(exchange)

    async def verify(self) -> str | None:
        """None when the registry answers and accepts this client's key; else what is wrong."""
        return await run_async(self._verify(), self._http.send)

    async def ready(self) -> bool:
        return await run_async(self._ready(), self._http.send)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
