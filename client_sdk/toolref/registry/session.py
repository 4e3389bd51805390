"""`Session`: what every registry operation is made of, as sans-I/O exchanges (see
`exchange`): the client's options, capability negotiation (fetched once; it picks the
protocol version, msgpack over JSON, and zstd request compression above a size threshold),
requests in the negotiated encoding, retries with jittered exponential backoff on 502, 503,
504 and connection errors, a circuit breaker, batching to the server's limits, and answers
read through their models, problem+json answers mapped to typed errors."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, Generic

import httpx
import zstandard
from typing_extensions import TypeVar

from toolref.kit.breaker import BreakerState, CircuitBreaker
from toolref.registry.answers import Answer, read
from toolref.registry.exchange import Exchange, Sleep
from toolref.registry.options import (
    NUMBERS,
    WireEncoding,
    check_api_key,
    check_base_url,
    check_encoding,
    check_number,
)
from toolref.wire import encoding, endpoints
from toolref.wire.errors import (
    CircuitOpenError,
    ProtocolRequiredError,
    RegistryUnreachableError,
    ToolrefError,
    UnexpectedResponseError,
    error_from_problem,
)
from toolref.wire.headers import PROTOCOL_HEADER
from toolref.wire.models import Capabilities
from toolref.wire.numbers import whole_number
from toolref.wire.protocol import PROTOCOL_HIGH, PROTOCOL_REFS

_RETRYABLE = frozenset({502, 503, 504})

# The transport a client sends through; the sans-I/O base takes either kind (and uses none).
AnyTransport = httpx.BaseTransport | httpx.AsyncBaseTransport
TransportT_co = TypeVar("TransportT_co", bound=AnyTransport, default=AnyTransport, covariant=True)


class Session(Generic[TransportT_co]):
    """Configuration, negotiation and the exchanges of every operation (the options are
    `BaseRegistryClient`'s); subclasses add the operations, and then the I/O."""

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
        for name, value in zip(NUMBERS, numbers, strict=True):
            check_number(name, value)
        check_encoding(encoding)
        api_key = check_api_key(api_key)
        self.base_url = check_base_url(base_url)
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

    def _capabilities_exchange(self, fresh: bool = False) -> Exchange[Capabilities]:
        """The server's capabilities: the answer kept, else asked (`fresh`: asked again,
        the new answer kept: a registry rolled back or forward since)."""
        if self._capabilities is None or fresh:
            request = httpx.Request(
                "GET",
                self._url(endpoints.CAPABILITIES),
                headers={**self._headers, "Accept": encoding.JSON_TYPE},
            )
            response = yield from self._send(request)
            self._capabilities = self._read(Capabilities, request, response)
        return self._capabilities

    def _require_refs(self) -> None:
        if self.protocol < PROTOCOL_REFS:
            raise ProtocolRequiredError(
                f"the registry at {self.base_url} speaks protocol {self.protocol}, which has no "
                "refs; upgrade it, or send full payloads"
            )

    # --- requests and responses ----------------------------------------------------

    def _url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def _request(
        self, caps: Capabilities, method: str, path: str, body: Any = None
    ) -> httpx.Request:
        msgpack = self._uses_msgpack(caps)
        headers = {
            **self._headers,
            PROTOCOL_HEADER: str(self.protocol),
            "Accept": f"{encoding.MSGPACK_TYPE}, {encoding.JSON_TYPE};q=0.5"
            if msgpack
            else encoding.JSON_TYPE,
        }
        content = None
        if body is not None:
            try:
                content = encoding.packb(body) if msgpack else encoding.dumps_json(body)
            except UnicodeEncodeError:  # a lone surrogate, which msgpack (UTF-8) cannot carry
                msgpack, content = False, encoding.dumps_json(body)  # JSON: its escape
            headers["Content-Type"] = encoding.MSGPACK_TYPE if msgpack else encoding.JSON_TYPE
            content = self._compressed(caps, content, headers)
        return httpx.Request(method, self._url(path), headers=headers, content=content)

    def _compressed(self, caps: Capabilities, content: bytes, headers: dict[str, str]) -> bytes:
        """zstd from the threshold on, when the registry takes it (`Content-Encoding` set)."""
        if len(content) < self.compress_threshold or "zstd" not in caps.compressors:
            return content
        headers["Content-Encoding"] = "zstd"
        # A compressor per call: ZstdCompressor objects are not thread-safe.
        return zstandard.ZstdCompressor(level=3).compress(content)

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
        if response is not None and is_problem(response):
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
        media = encoding.media_type(response.headers.get("content-type"))
        problem: Any = None
        try:
            if is_problem(response):
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

    def _read(
        self, model: type[Answer], request: httpx.Request, response: httpx.Response
    ) -> Answer:
        """The answer decoded, as `model` (a problem raised as its error)."""
        where = f"{request.method} {request.url}"
        return read(model, self._decode(response), where, response.status_code)

    def _call(
        self,
        method: str,
        path: str,
        answer: type[Answer],
        body: Any = None,
        *,
        refs: bool = True,
    ) -> Exchange[Answer]:
        """One request of an operation (`refs`: one only protocol 2 has), its answer read
        as `answer`."""
        caps = yield from self._capabilities_exchange()
        if refs:
            self._require_refs()
        request = self._request(caps, method, path, body)
        response = yield from self._send(request)
        return self._read(answer, request, response)

    def _batches(self, items: Sequence[Any]) -> Exchange[list[Sequence[Any]]]:
        caps = yield from self._capabilities_exchange()
        limit = caps.limits.max_batch
        return [items[i : i + limit] for i in range(0, len(items), limit)]


def is_problem(response: httpx.Response) -> bool:
    media: str = response.headers.get("content-type", "")
    return media.startswith(encoding.PROBLEM_TYPE)
