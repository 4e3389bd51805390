"""Registry clients: `RegistryClient` (sync) and `AsyncRegistryClient`, on one shared base.

`BaseRegistryClient` (`base`) holds everything but the I/O, as sans-I/O exchanges (see
`exchange`), made of a `Session`'s (`session`: negotiation, retries, the circuit breaker,
problems as typed errors); the answers are `answers`' and the option checks `options`'. The
two clients here only send and sleep.
"""

from __future__ import annotations

import asyncio
import threading
import urllib.request
from collections.abc import Iterable
from typing import Any, Self

import httpx

from toolref.registry.answers import (
    AppliedEdit,
    HeldRequest,
    HydratedText,
    MessagesResult,
    Reserve,
    Resolved,
)
from toolref.registry.base import BaseRegistryClient
from toolref.registry.bounded import aread_within, read_within
from toolref.registry.exchange import Exchange, T, run_async, run_sync
from toolref.registry.options import InvocationLike, WireEncoding
from toolref.registry.plain_transport import MAX_ANSWER_BYTES, PlainTransport
from toolref.registry.session import AnyTransport
from toolref.wire import keepalive
from toolref.wire.models import (
    Capabilities,
    FormatName,
    HydrateMode,
    Invocation,
    RegisteredRef,
)

__all__ = [
    "AsyncRegistryClient",
    "BaseRegistryClient",
    "HydratedText",
    "InvocationLike",
    "MessagesResult",
    "RegistryClient",
    "Resolved",
    "WireEncoding",
]


# httpx's own pools (the sync client's, a proxy's, TLS): idle connections kept for less than
# the registry keeps them (httpx's 5 s is the gateway's and uvicorn's own keep-alive).
_LIMITS = httpx.Limits(keepalive_expiry=keepalive.DEFAULT_SECONDS)


def _check_transport(transport: object, made: str, example: str) -> None:
    """`transport=` that is neither kind of httpx transport (a client, a URL): say so."""
    if not isinstance(transport, (httpx.BaseTransport, httpx.AsyncBaseTransport)):
        raise TypeError(
            f"transport is an httpx transport ({example}, httpx.MockTransport(...)), not a "
            f"{type(transport).__name__} ({transport!r:.60}); a client's options are keywords: "
            f"{made}(url, api_key=..., timeout=...)"
        )


class RegistryClient(BaseRegistryClient[httpx.BaseTransport]):
    """Blocking client. `transport=` injects an httpx transport (tests, custom networking);
    the options are `BaseRegistryClient`'s."""

    _http: httpx.Client
    _negotiation: threading.Lock

    def _open(self, transport: AnyTransport | None) -> None:
        if transport is not None and not isinstance(transport, httpx.BaseTransport):
            _check_transport(transport, "RegistryClient", "httpx.HTTPTransport()")
            raise TypeError(
                f"RegistryClient sends blocking requests, and {type(transport).__name__} is an "
                "async transport: use AsyncRegistryClient with it, or a sync transport "
                "(httpx.HTTPTransport, httpx.MockTransport, httpx.WSGITransport)"
            )
        self._http = httpx.Client(transport=transport, timeout=self.timeout, limits=_LIMITS)
        self._negotiation = threading.Lock()

    def _run(self, exchange: Exchange[T]) -> T:
        # Calls racing to be first share one negotiation.
        if self._capabilities is None:
            with self._negotiation:
                if self._capabilities is None:
                    run_sync(self._capabilities_exchange(), self._sent)
        return run_sync(exchange, self._sent)

    def _sent(self, request: httpx.Request) -> httpx.Response:
        """`request`'s answer, read whole within `timeout` seconds (and one read timeout)
        and `MAX_ANSWER_BYTES`; else an httpx `ReadError` (retried as any), its connection
        closed: a registry that trickles or floods costs neither a hang nor memory."""
        response = self._http.send(request, stream=True)
        if read_within(response, self.timeout, MAX_ANSWER_BYTES) is None:
            raise _unended(request, self.timeout)
        return response

    def capabilities(self, *, fresh: bool = False) -> Capabilities:
        """The registry's capabilities, asked once and kept; `fresh`: asked again now (it
        may have been rolled back or forward since), the new answer kept."""
        if fresh:
            return run_sync(self._capabilities_exchange(fresh=True), self._sent)
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
    ) -> MessagesResult:
        """Messages in full (`mode` "summary": older results summarized)."""
        return self._run(self._hydrate(messages, format, mode))

    def hydrate_text(self, messages: str, format: FormatName | None = None) -> HydratedText:
        """`hydrate` for messages given as JSON text, answered as text (see `HydratedText`)."""
        return self._run(self._hydrate_text(messages, format))

    def verify(self) -> str | None:
        """None when the registry answers and accepts this client's key; else what is wrong."""
        return run_sync(self._verify(), self._sent)

    def ready(self) -> bool:
        return run_sync(self._ready(), self._sent)

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
            _check_transport(transport, "AsyncRegistryClient", "httpx.AsyncHTTPTransport()")
            raise TypeError(
                f"AsyncRegistryClient sends asyncio requests, and {type(transport).__name__} "
                "is a sync transport: use RegistryClient with it, or an async transport "
                "(httpx.AsyncHTTPTransport, httpx.ASGITransport, httpx.MockTransport)"
            )
        if transport is None and not _proxied(self.base_url):
            transport = PlainTransport()  # http:// on asyncio streams (TLS: httpx's own)
        self._http = httpx.AsyncClient(transport=transport, timeout=self.timeout, limits=_LIMITS)
        self._negotiation = asyncio.Lock()

    async def _run(self, exchange: Exchange[T]) -> T:
        # Calls racing to be first share one negotiation.
        if self._capabilities is None:
            async with self._negotiation:
                if self._capabilities is None:
                    await run_async(self._capabilities_exchange(), self._sent)
        return await run_async(exchange, self._sent)

    async def _sent(self, request: httpx.Request) -> httpx.Response:
        """Async `RegistryClient._sent` (the deadline exact)."""
        response = await self._http.send(request, stream=True)
        if await aread_within(response, self.timeout, MAX_ANSWER_BYTES) is None:
            raise _unended(request, self.timeout)
        return response

    async def capabilities(self, *, fresh: bool = False) -> Capabilities:
        """Async `RegistryClient.capabilities`."""
        if fresh:
            return await run_async(self._capabilities_exchange(fresh=True), self._sent)
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
    ) -> MessagesResult:
        """Async `RegistryClient.hydrate`."""
        return await self._run(self._hydrate(messages, format, mode))

    async def hydrate_text(self, messages: str, format: FormatName | None = None) -> HydratedText:
        """`hydrate` for messages given as JSON text, answered as text (see `HydratedText`):
        what a backend uses to hand its app exactly what the client sent."""
        return await self._run(self._hydrate_text(messages, format))

    async def apply_edit(
        self,
        data: bytes,
        *,
        segments: bool = False,
        held: HeldRequest | None = None,
        reserve: Reserve | None = None,
    ) -> AppliedEdit:
        """The request the edit `data` stands for (`POST /v1/edits:apply`: segment 0 with
        credentials name-only, the body byte for byte), its recipe kept by the registry.
        `segments`: its segments too, the answer sent as an edit of `held` when that is the
        edit's base (what changed crosses, not the conversation). `reserve`: told the
        body's bytes before it is built; what it raises, raised (the recipe is kept)."""
        return await self._run(self._apply_edit(data, segments, held, reserve))

    async def keep_answer(self, ref: str, answer: bytes) -> None:
        """Keep the answer recipe `ref`'s request streamed (`PUT /v1/answers/{recipe}`): the
        dictionary of the next edit of it (`toolref.edits.answer`)."""
        await self._run(self._keep_answer(ref, answer))

    async def verify(self) -> str | None:
        """None when the registry answers and accepts this client's key; else what is wrong."""
        return await run_async(self._verify(), self._sent)

    async def ready(self) -> bool:
        return await run_async(self._ready(), self._sent)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _unended(request: httpx.Request, within: float) -> httpx.ReadError:
    return httpx.ReadError(
        f"the answer to {request.method} {request.url.path} did not end within {within:g} s "
        f"and {MAX_ANSWER_BYTES} bytes (the client's timeout; a registry's answers are far "
        "smaller): a proxy or server that trickles or floods?",
        request=request,
    )


def _proxied(url: str) -> bool:
    """Whether the environment names a proxy httpx would send `url`'s requests through
    (`PlainTransport` knows none: those keep httpx's transport)."""
    proxies = urllib.request.getproxies()
    if not (proxies.get("http") or proxies.get("all")):
        return False
    host = httpx.URL(url).host
    return not urllib.request.proxy_bypass(host)
