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
import math
import random
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, Self, get_args
from urllib.parse import urlsplit

import httpx
import pydantic
import zstandard
from typing_extensions import TypeVar

from toolref import formats, spans
from toolref.breaker import BreakerState, CircuitBreaker
from toolref.history import check_history_ref, is_history_ref
from toolref.registry.exchange import Exchange, Sleep, T, run_async, run_sync
from toolref.wire import encoding
from toolref.wire.canonical import Ref, invocation_members
from toolref.wire.errors import (
    CircuitOpenError,
    MissingHistoryError,
    ProtocolRequiredError,
    RegistryUnreachableError,
    ToolrefError,
    UnexpectedResponseError,
    ValidationError,
    error_from_problem,
)
from toolref.wire.headers import HISTORY_HEADER, KEEP_HISTORY, PROTOCOL_HEADER
from toolref.wire.models import (
    Capabilities,
    FormatName,
    HydrateMode,
    Invocation,
    RegisteredRef,
    ReturnMessages,
)
from toolref.wire.numbers import whole_number
from toolref.wire.protocol import PROTOCOL_HIGH, PROTOCOL_REFS

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
    returned: ReturnMessages = "all"  # "new": only the messages asked about, hydrated
    checkpoint: tuple[str, int] | None = None  # (ref, length) of the prefix kept too

    @property
    def messages_text(self) -> str:
        return self.text[self.messages[0] : self.messages[1]]

    @classmethod
    def of(cls, text: str, returned: ReturnMessages = "all") -> HydratedText:
        document = spans.document(text)
        found = document.members
        if not isinstance(document.value, dict) or "messages" not in found:
            raise ValueError("not a hydrate answer: no `messages`")
        body = document.value
        member = found["messages"]
        ref = body.get("historyRef")
        references = body.get("toolReferences")
        checkpoint, length = body.get("checkpointRef"), body.get("checkpointLength")
        kept = None
        if is_history_ref(checkpoint) and type(length) is int and length > 0:
            kept = (str(checkpoint), length)
        return cls(
            text,
            (member.start, member.end),
            str(body.get("format")),
            dict(references) if isinstance(references, dict) else {},
            ref if is_history_ref(ref) else None,
            returned,
            kept,
        )


InvocationLike = Invocation | Mapping[str, Any]
WireEncoding = Literal["auto", "json", "msgpack"]
_ENCODINGS: tuple[str, ...] = get_args(WireEncoding)
_MODES: tuple[str, ...] = get_args(HydrateMode)


def _wires(invocations: Iterable[InvocationLike]) -> list[dict[str, Any]]:
    """The wire form of each invocation; a mapping with a wrong key is a `ValidationError`."""
    if isinstance(invocations, (Mapping, str, bytes, Invocation)):
        raise ValidationError(
            f"register takes a list of invocations, not one {type(invocations).__name__}; "
            "wrap it in a list: register([invocation])"
        )
    return [
        i.to_wire() if isinstance(i, Invocation) else invocation_members(i, f"invocation {n}")
        for n, i in enumerate(invocations)
    ]


def _unique_refs(refs: Iterable[str]) -> list[str]:
    """Validated refs, each once: the server dedupes within a batch, this across batches."""
    if isinstance(refs, (str, bytes)):
        raise ValidationError(
            f"refs is one string ({refs!r}), not a list of refs; wrap it in a list: [ref]"
        )
    return list(dict.fromkeys(str(Ref(r)) for r in refs))


def _check_messages_options(
    messages: Any, format: FormatName | None, mode: HydrateMode | None = None
) -> None:
    """optimize and hydrate arguments, checked before any request (they would be a 422)."""
    formats.check_messages(messages)
    if format is not None:
        formats.check_format(format)
    if mode is not None and mode not in _MODES:
        raise ValidationError(
            f"unknown mode {mode!r}; use one of {', '.join(_MODES)} (None means full)",
            modes=list(_MODES),
        )


def _check_base_url(base_url: object) -> str:
    example = "'http://127.0.0.1:8750'"
    if not isinstance(base_url, str):
        raise TypeError(f"base_url is a str such as {example}, not {base_url!r}")
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https"):
        rest = base_url.split("://", 1)[-1].lstrip("/")
        raise ValueError(
            f"base_url {base_url!r} does not start with http:// or https://; use "
            + (repr(f"http://{rest}") if rest else example)
        )
    if not parts.hostname:
        raise ValueError(
            f"base_url {base_url!r} has no host; use the registry's, such as {example}"
        )
    if parts.query or parts.fragment:
        raise ValueError(
            f"base_url {base_url!r} has a query or fragment; give the registry's root URL only"
        )
    return base_url.rstrip("/")


def _check_api_key(api_key: object) -> str | None:
    if api_key is None:
        return None
    if not isinstance(api_key, str):
        raise TypeError(f"api_key is a str or None, not a {type(api_key).__name__}")
    if not api_key:
        raise ValueError("api_key is empty; pass api_key=None to send no key")
    if api_key.lower().startswith("bearer "):
        raise ValueError(
            f"api_key starts with {api_key[:7]!r}; pass the key alone (the client adds 'Bearer ')"
        )
    if any(c.isspace() for c in api_key):
        where = next(i for i, c in enumerate(api_key) if c.isspace())
        raise ValueError(
            f"api_key has whitespace ({api_key[where]!r} at index {where} of {len(api_key)}); "
            "keys have none: strip it (a key read from a file often ends with a newline)"
        )
    return api_key


# Numeric option -> (the values that work, what it is): a wrong value's error names both.
_NUMBERS: Final = {
    "timeout": ("> 0", "seconds per request"),
    "retries": (">= 0", "retries after a failed attempt; 0 for none"),
    "backoff": (">= 0", "seconds before the first retry; 0 for none"),
    "max_backoff": (">= 0", "the longest wait between retries, in seconds"),
    "compress_threshold": (">= 0", "bytes from which request bodies are compressed; 0 for all"),
}


def _check_number(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} is a number, not a {type(value).__name__} ({value!r})")
    works, meaning = _NUMBERS[name]
    if math.isnan(value) or value < 0 or (works == "> 0" and value == 0):
        raise ValueError(f"{name} must be {works}, got {value!r}: it is {meaning}")


def _chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


# The transport a client sends through; the sans-I/O base takes either kind (and uses none).
AnyTransport = httpx.BaseTransport | httpx.AsyncBaseTransport
TransportT_co = TypeVar("TransportT_co", bound=AnyTransport, default=AnyTransport, covariant=True)


class BaseRegistryClient(Generic[TransportT_co]):
    """Configuration, negotiation and every exchange; subclasses add the I/O.

    Every option is a keyword argument, checked here, so a misspelt one is a TypeError and a
    value that cannot work a ValueError when the client is made, not at its first request:

    transport: the httpx transport to send through (`RegistryClient`: a sync one such as
        `httpx.HTTPTransport` or `httpx.MockTransport`; `AsyncRegistryClient`: an async one
        such as `httpx.ASGITransport`). None: the network.
    api_key: sent as `Authorization: Bearer <api_key>`; None sends no key.
    timeout: seconds per request. retries, backoff, max_backoff: see the module docstring.
    breaker: the circuit breaker (a fresh `CircuitBreaker()` when None).
    encoding: `auto` (msgpack when the server offers it), `json` or `msgpack`.
    compress_threshold: zstd request bodies from this many bytes on.
    headers: extra headers on every request. rng: the backoff jitter's random source.
    """

    def __init__(
        self,
        base_url: str,
        *,
        transport: TransportT_co | None = None,
        api_key: str | None = None,
        timeout: float = 5.0,
        retries: int = 2,
        backoff: float = 0.05,
        max_backoff: float = 2.0,
        breaker: CircuitBreaker | None = None,
        encoding: WireEncoding = "auto",
        compress_threshold: int = 16_384,
        headers: Mapping[str, str] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        numbers = (timeout, retries, backoff, max_backoff, compress_threshold)
        for name, value in zip(_NUMBERS, numbers, strict=True):
            _check_number(name, value)
        if encoding not in _ENCODINGS:
            raise ValueError(f"unknown encoding {encoding!r}; use one of {', '.join(_ENCODINGS)}")
        api_key = _check_api_key(api_key)
        self.base_url = _check_base_url(base_url)
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
        self._open(transport)

    def _open(self, transport: AnyTransport | None) -> None:
        """Subclasses make their HTTP client here; the sans-I/O base sends nothing."""

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
        header = response.headers.get("retry-after", "") if response is not None else ""
        after = whole_number(header, 9)
        if after is not None:
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

    # Arguments are checked when the exchange is made, so a bad one never costs a request.

    def _register(self, invocations: Iterable[InvocationLike]) -> Exchange[list[RegisteredRef]]:
        return self._register_batches(_wires(invocations))

    def _register_batches(self, items: list[dict[str, Any]]) -> Exchange[list[RegisteredRef]]:
        found: list[RegisteredRef] = []
        for batch in (yield from self._batches(items)):
            body = yield from self._call("POST", "/v1/invocations", {"invocations": list(batch)})
            found.extend(RegisteredRef.model_validate(r) for r in body["refs"])
        return found

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

    def _optimize(self, messages: list[Any], format: FormatName | None) -> Exchange[MessagesResult]:
        _check_messages_options(messages, format)
        return self._messages("optimize", messages, format=format)

    def _messages(
        self, action: str, messages: list[Any], **options: Any
    ) -> Exchange[MessagesResult]:
        body = {"messages": messages, **{k: v for k, v in options.items() if v is not None}}
        answer = yield from self._call("POST", f"/v1/messages:{action}", body)
        return MessagesResult.of(answer)

    def _hydrate(
        self,
        messages: list[Any],
        format: FormatName | None,
        mode: HydrateMode | None,
        history_ref: str | None,
        keep_history: bool,
    ) -> Exchange[MessagesResult]:
        _check_messages_options(messages, format, mode)
        if history_ref is not None:
            check_history_ref(history_ref)
        return self._hydrate_checked(messages, format, mode, history_ref, keep_history)

    def _hydrate_checked(
        self,
        messages: list[Any],
        format: FormatName | None,
        mode: HydrateMode | None,
        history_ref: str | None,
        keep_history: bool,
    ) -> Exchange[MessagesResult]:
        body: dict[str, Any] = {"messages": messages}
        options = {"format": format, "mode": mode, "historyRef": history_ref}
        body.update((k, v) for k, v in options.items() if v is not None)
        if history_ref is not None:
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
        format: FormatName | None,
        history_ref: str | None,
        keep_history: bool,
        return_messages: ReturnMessages = "all",
        *,
        checkpoint: bool = False,
    ) -> Exchange[HydratedText]:
        """`_hydrate` for messages given as JSON text (an array), answered as text: nothing
        in them is parsed and written again on the way (see `HydratedText`). `"new"` is
        asked only of a registry that lists it (`HydratedText.returned` says what came)."""
        if format is not None:
            formats.check_format(format)
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
        returned: ReturnMessages = "all"
        if return_messages == "new" and history_ref is not None and "new" in caps.return_messages:
            options += ',"returnMessages":"new"'
            returned = "new"
        if checkpoint and keep_history and caps.checkpoints:
            options += ',"checkpoint":true'
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
            return HydratedText.of(response.content.decode(), returned)
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


class RegistryClient(BaseRegistryClient[httpx.BaseTransport]):
    """Blocking client. `transport=` injects an httpx transport (tests, custom networking);
    the options are `BaseRegistryClient`'s."""

    _http: httpx.Client
    _negotiation: threading.Lock

    def _open(self, transport: AnyTransport | None) -> None:
        if transport is not None and not isinstance(transport, httpx.BaseTransport):
            raise TypeError(
                f"RegistryClient sends blocking requests, and {type(transport).__name__} is an "
                "async transport: use AsyncRegistryClient with it, or a sync transport "
                "(httpx.HTTPTransport, httpx.MockTransport, httpx.WSGITransport)"
            )
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

    def optimize(self, messages: list[Any], format: FormatName | None = None) -> MessagesResult:
        return self._run(self._optimize(messages, format))

    def hydrate(
        self,
        messages: list[Any],
        format: FormatName | None = None,
        mode: HydrateMode | None = None,
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
        format: FormatName | None = None,
        *,
        history_ref: str | None = None,
        keep_history: bool = False,
        return_messages: ReturnMessages = "all",
        checkpoint: bool = False,
    ) -> HydratedText:
        """`hydrate` for messages given as JSON text, answered as text (see `HydratedText`).
        `return_messages="new"`: only `messages` come back (the caller holds the history).
        `checkpoint`: keep the conversation's checkpoint too, where the registry can."""
        exchange = self._hydrate_text(
            messages, format, history_ref, keep_history, return_messages, checkpoint=checkpoint
        )
        return self._run(exchange)

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


class AsyncRegistryClient(BaseRegistryClient[httpx.AsyncBaseTransport]):
    """asyncio client. `transport=` injects an httpx transport (e.g. `httpx.ASGITransport`);
    the options are `BaseRegistryClient`'s."""

    _http: httpx.AsyncClient
    _negotiation: asyncio.Lock

    def _open(self, transport: AnyTransport | None) -> None:
        if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
            raise TypeError(
                f"AsyncRegistryClient sends asyncio requests, and {type(transport).__name__} "
                "is a sync transport: use RegistryClient with it, or an async transport "
                "(httpx.AsyncHTTPTransport, httpx.ASGITransport, httpx.MockTransport)"
            )
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

    async def optimize(
        self, messages: list[Any], format: FormatName | None = None
    ) -> MessagesResult:
        return await self._run(self._optimize(messages, format))

    async def hydrate(
        self,
        messages: list[Any],
        format: FormatName | None = None,
        mode: HydrateMode | None = None,
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
        format: FormatName | None = None,
        *,
        history_ref: str | None = None,
        keep_history: bool = False,
        return_messages: ReturnMessages = "all",
        checkpoint: bool = False,
    ) -> HydratedText:
        """`hydrate` for messages given as JSON text, answered as text (see `HydratedText`):
        what a backend uses to hand its app exactly what the client sent.
        `return_messages="new"`: only `messages` come back (the caller holds the history).
        `checkpoint`: keep the conversation's checkpoint too, where the registry can."""
        exchange = self._hydrate_text(
            messages, format, history_ref, keep_history, return_messages, checkpoint=checkpoint
        )
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
