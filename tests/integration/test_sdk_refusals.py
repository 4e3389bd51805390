"""Every refusal the gateway gives reaches an official SDK as its own `APIStatusError`.

Over real sockets: the service (registry and gateway) served with the HTTP layer of
`toolref-server serve` (`tests.adversarial.gateway_wire`), with one tenant whose key is
`KEY`, in front of a scripted provider (`up`), one that holds every request until told
(`held`) and a closed port (`down`). Each refusal is asked for by the openai and anthropic
SDKs on their `httpx2` clients, openai on its legacy `httpx` ones too, sync and async,
streamed and not, each through `toolref.Transport` / `toolref.AsyncTransport`; and by a
plain `httpx` client through the transport with an Anthropic Messages body (anthropic 2
takes no `httpx` client). Each must end in the status the gateway gave, with the gateway's
detail in the error's message.

Before, the transport read the answer with httpx's `ResponseNotRead` in mind only: every
refusal it does not resend on crashed an `httpx2` client (`httpx2.ResponseNotRead`, or the
SDK's "Connection error."), and openai showed a problem document as "Error code: 401"
alone, on either package.

Refusals no SDK request through the transport can meet are not here: the gateway forwards
POST whatever the path (a method it does not forward is a 400, never a 405); the transport
sends bodies as they are or as edits (never a 415 encoding); an SDK neither stalls its head
(408) nor sends what h11 cannot parse (400 malformed-request); and a tenant over its
request rate (TOOLREF_TENANT_REQUESTS_PER_SECOND) is not refused a request without refs,
which passes on unhydrated. A 422 (a body the gateway cannot hydrate: a malformed ref)
needs a marker, and the transport sends none.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.adversarial.gateway_wire import gateway
from tests.support.servers import serve_all
from toolref import AsyncTransport, ToolReferenceManager, Transport
from toolref.edits.wire import VERSION as EDITS_VERSION

from .relay_gateway import KEY, MODEL, Scripted

TIMEOUT = 30  # a net for a hang, not a timing check
DOWN = "http://127.0.0.1:9"  # nothing listens on the discard port


@dataclass
class Held:
    """A provider that answers no request until `release` is set; `arrived` is set once
    one has come."""

    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def app(self) -> Starlette:
        async def hold(request: Request) -> Response:
            self.arrived.set()
            await self.release.wait()
            return JSONResponse({"held": True})

        return Starlette(routes=[Route("/{path:path}", hold, methods=["POST"])])


@dataclass(frozen=True)
class Refusal:
    """How to be refused: the upstream asked, headers, the user's text, whether the
    caller's manager learnt first (a request answered) that the gateway reads edits, so
    that the refused request is an edit (`edit`), the service's settings, and whether one
    request to `held` stays in flight while the callers ask (`hold`)."""

    status: int
    slug: str
    said: str  # in the gateway's detail
    upstream: str = "up"
    headers: dict[str, str] = field(default_factory=lambda: {"Toolref-Key": KEY})
    text: str = "hi"
    edit: bool = False
    settings: dict[str, Any] = field(default_factory=dict)
    hold: bool = False


REFUSALS = {
    "401 unknown Toolref-Key": Refusal(
        401,
        "unauthorized",
        "key in the Toolref-Key header is not known",
        headers={"Toolref-Key": "x"},
    ),
    "401 no Toolref-Key": Refusal(401, "unauthorized", "`Toolref-Key: <key>`", headers={}),
    "404 unknown upstream": Refusal(
        404, "not-found", "a name from TOOLREF_UPSTREAMS (configured: down, held, up)", "nope"
    ),
    "400 malformed Toolref-Switched-From": Refusal(
        400,
        "bad-request",
        "Toolref-Switched-From says at=",
        headers={"Toolref-Key": KEY, "Toolref-Switched-From": "other; at=soon"},
    ),
    "413 body over the limit": Refusal(  # a request sent as it is is forwarded unread
        413,
        "body-too-large",
        "4096",
        text=base64.b64encode(random.Random(5).randbytes(4000)).decode(),  # incompressible
        edit=True,
        settings={"max_body_bytes": 4096},
    ),
    "413 body inflated over the limit": Refusal(
        413,
        "decompressed-too-large",
        "65536",
        text="x" * 200_000,  # an edit of a few hundred bytes, inline bytes over the limit
        edit=True,
        settings={"max_decompressed_bytes": 65536},
    ),
    "429 tenant's requests in flight": Refusal(
        429,
        "quota-exceeded",
        "TOOLREF_GATEWAY_TENANT_REQUESTS_IN_FLIGHT=1",
        settings={"gateway_tenant_requests_in_flight": 1},
        hold=True,
    ),
    "503 gateway's requests in flight": Refusal(
        503,
        "overloaded",
        "TOOLREF_GATEWAY_MAX_REQUESTS_IN_FLIGHT=1",
        settings={"gateway_max_requests_in_flight": 1},
        hold=True,
    ),
    "431 headers too large": Refusal(
        431,
        "headers-too-large",
        "send fewer or shorter headers",
        headers={"Toolref-Key": KEY, "X-Padding": "p" * 70_000},
    ),
    "502 upstream unreachable": Refusal(
        502, "upstream-unreachable", f"({DOWN}) cannot be reached", "down"
    ),
    "504 upstream timeout": Refusal(
        504,
        "upstream-timeout",
        "did not answer in time",
        "held",
        settings={"gateway_read_timeout": 1.0},
    ),
}


@dataclass(frozen=True)
class Caller:
    """One client of the gateway through the transport: an SDK (or plain httpx), the httpx
    package of its client, and whether it is async."""

    sdk: str  # "openai", "anthropic", or "httpx" (an Anthropic Messages body)
    package: Any  # httpx or httpx2
    asynchronous: bool

    @property
    def name(self) -> str:
        prefix = "Async" if self.asynchronous else ""
        client = {"openai": "OpenAI", "anthropic": "Anthropic", "httpx": "Client"}[self.sdk]
        return f"{self.sdk}.{prefix}{client} on {self.package.__name__}"


CALLERS = [
    *(Caller(sdk, httpx2, a) for sdk in ("openai", "anthropic") for a in (False, True)),
    *(Caller(sdk, httpx, a) for sdk in ("openai", "httpx") for a in (False, True)),
]


@dataclass(frozen=True)
class Outcome:
    """What a caller got: an SDK's `APIStatusError` (or another exception), or an answer."""

    status: int | None
    message: str
    error: str  # the exception's class, "" for an answer

    def fits(self, refusal: Refusal) -> bool:
        return (
            self.status == refusal.status
            and self.error in ("", "APIStatusError")
            and f"toolref {refusal.slug}: " in self.message
            and refusal.said in self.message
        )


def _client(caller: Caller, manager: ToolReferenceManager) -> Any:
    package = caller.package
    if caller.asynchronous:
        return package.AsyncClient(transport=AsyncTransport(manager=manager), timeout=TIMEOUT)
    return package.Client(transport=Transport(manager=manager), timeout=TIMEOUT)


def _sdk(caller: Caller, base: str, headers: dict[str, str], http: Any) -> Any:
    options: dict[str, Any] = {
        "api_key": "sk-provider",
        "max_retries": 0,
        "timeout": TIMEOUT,
        "default_headers": headers,
        "http_client": http,
    }
    if caller.sdk == "openai":
        chat = openai.AsyncOpenAI if caller.asynchronous else openai.OpenAI
        return chat(base_url=base + "/v1", **options)
    messages = anthropic.AsyncAnthropic if caller.asynchronous else anthropic.Anthropic
    return messages(base_url=base, **options)


def _ask(caller: Caller, client: Any, text: str, stream: bool) -> Any:
    """The SDK's request (a coroutine for an async client)."""
    messages = [{"role": "user", "content": text}]
    if caller.sdk == "openai":
        return client.chat.completions.create(model=MODEL, messages=messages, stream=stream)
    return client.messages.create(model=MODEL, max_tokens=16, messages=messages, stream=stream)


def _failed(exc: Exception) -> Outcome:
    if isinstance(exc, openai.APIStatusError | anthropic.APIStatusError):
        return Outcome(exc.status_code, exc.message, "APIStatusError")
    return Outcome(None, repr(exc), type(exc).__module__ + "." + type(exc).__qualname__)


def _answered(answer: httpx.Response) -> Outcome:
    """A plain client's answer: the message of the error body it got (Anthropic's shape),
    else its text."""
    try:
        error = answer.json().get("error")
    except (ValueError, AttributeError):
        error = None
    message = error.get("message") if isinstance(error, dict) else None
    return Outcome(answer.status_code, str(message if message is not None else answer.text), "")


def _messages_body(text: str, stream: bool) -> dict[str, Any]:
    """An Anthropic Messages request, for a plain client."""
    messages = [{"role": "user", "content": text}]
    return {"model": MODEL, "max_tokens": 16, "messages": messages, "stream": stream}


def _call_sync(caller: Caller, base: str, refusal: Refusal, stream: bool) -> Outcome:
    http = _client(caller, ToolReferenceManager())
    if caller.sdk == "httpx":
        url, body = base + "/v1/messages", _messages_body(refusal.text, stream)
        with http:
            if refusal.edit:
                first = http.post(url, json=_messages_body("hi", stream), headers=refusal.headers)
                assert first.headers["toolref-edits"] == str(EDITS_VERSION), first.text
            if not stream:
                return _answered(http.post(url, json=body, headers=refusal.headers))
            with http.stream("POST", url, json=body, headers=refusal.headers) as answer:
                answer.read()
                return _answered(answer)
    with _sdk(caller, base, refusal.headers, http) as client:
        if refusal.edit:
            _ask(caller, client, "hi", False)
        try:
            answer = _ask(caller, client, refusal.text, stream)
            if stream:
                list(answer)
        except Exception as exc:
            return _failed(exc)
    return Outcome(200, "answered", "")


async def _call_async(caller: Caller, base: str, refusal: Refusal, stream: bool) -> Outcome:
    http = _client(caller, ToolReferenceManager())
    if caller.sdk == "httpx":
        url, body = base + "/v1/messages", _messages_body(refusal.text, stream)
        async with http:
            if refusal.edit:
                first = await http.post(
                    url, json=_messages_body("hi", stream), headers=refusal.headers
                )
                assert first.headers["toolref-edits"] == str(EDITS_VERSION), first.text
            if not stream:
                return _answered(await http.post(url, json=body, headers=refusal.headers))
            async with http.stream("POST", url, json=body, headers=refusal.headers) as answer:
                await answer.aread()
                return _answered(answer)
    async with _sdk(caller, base, refusal.headers, http) as client:
        if refusal.edit:
            await _ask(caller, client, "hi", False)
        try:
            answer = await _ask(caller, client, refusal.text, stream)
            if stream:
                [_ async for _ in answer]
        except Exception as exc:
            return _failed(exc)
    return Outcome(200, "answered", "")


async def outcomes(base: str, refusal: Refusal) -> dict[str, Outcome]:
    """What every caller got, streamed and not, all asked at once."""
    asked: dict[str, Any] = {}
    for caller in CALLERS:
        for stream in (False, True):
            name = f"{caller.name}, {'streamed' if stream else 'whole'}"
            if caller.asynchronous:
                asked[name] = _call_async(caller, base, refusal, stream)
            else:
                asked[name] = asyncio.to_thread(_call_sync, caller, base, refusal, stream)
    return dict(zip(asked, await asyncio.gather(*asked.values()), strict=True))


@asynccontextmanager
async def service(redis: Redis, refusal: Refusal) -> AsyncIterator[tuple[str, Held]]:
    """The gateway with `up`, `held` and `down`, set as `refusal` says; its base URL."""
    held = Held()
    async with serve_all(Scripted().app(), held.app()) as [up, held_url]:
        tenant = f"t={hashlib.sha256(KEY.encode()).hexdigest()}"
        upstreams = f"up={up},held={held_url},down={DOWN}"
        async with gateway(redis, upstreams=upstreams, api_keys=tenant, **refusal.settings) as url:
            try:
                yield url, held
            finally:
                held.release.set()


@asynccontextmanager
async def holding(url: str, held: Held) -> AsyncIterator[None]:
    """One request of the tenant to `held`, in flight until the block ends."""
    async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client:
        body = _messages_body("a", stream=False)
        keyed = {"Toolref-Key": KEY}
        held_request = client.post("/llm/held/v1/messages", json=body, headers=keyed)
        answer = asyncio.create_task(held_request)
        await asyncio.wait_for(held.arrived.wait(), TIMEOUT)
        try:
            yield
        finally:
            held.release.set()
            assert (await answer).status_code == 200


@pytest.mark.parametrize("refusal", REFUSALS.values(), ids=REFUSALS.keys())
async def test_each_refusal_reaches_every_sdk_as_its_status_error(
    redis: Redis, refusal: Refusal
) -> None:
    async with (
        service(redis, refusal) as (url, held),
        holding(url, held) if refusal.hold else contextlib.nullcontext(),
    ):
        got = await outcomes(f"{url}/llm/{refusal.upstream}", refusal)
    assert len(got) == 2 * len(CALLERS)
    assert {name: o for name, o in got.items() if not o.fits(refusal)} == {}


def _unchanged(got: dict[str, Outcome]) -> dict[str, Outcome]:
    """The outcomes that are not the provider's 413 with its message as it wrote it."""
    return {
        name: o
        for name, o in got.items()
        if o.status != 413 or "big" not in o.message or "toolref" in o.message
    }


async def test_an_upstreams_own_error_reaches_the_sdk_as_the_upstream_sent_it(
    redis: Redis,
) -> None:
    """Only toolref's problems are shaped: a provider's error (here Anthropic's 413, which
    both SDKs read a message from) passes as it came."""
    refusal = Refusal(413, "", "")
    scripted = Scripted(limit=10)
    async with serve_all(scripted.app()) as [up]:
        tenant = f"t={hashlib.sha256(KEY.encode()).hexdigest()}"
        async with gateway(redis, upstreams=f"up={up}", api_keys=tenant) as url:
            got = await outcomes(f"{url}/llm/up", refusal)
    assert _unchanged(got) == {}
    assert len(scripted.received) == 2 * len(CALLERS)
