"""RegistryClient and AsyncRegistryClient against a scripted registry (httpx.MockTransport).

One behavioural suite for both halves: every test taking `make_api` runs once per half,
through `Api`, whose async methods call the sync client directly (MockTransport is
in-process) or await the async one. The exchange module's sleeps are replaced by a recorder
(`sleeps`), so backoff and Retry-After are asserted on, never waited for. The jitter bounds
are also checked by driving the sans-I/O exchange directly.

The tests under "regressions" pin bugs these tests first found (all fixed).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import httpx
import msgpack
import pytest
import zstandard

import toolref.registry.exchange
from toolref.kit.breaker import BreakerState, CircuitBreaker
from toolref.registry.client import (
    AsyncRegistryClient,
    BaseRegistryClient,
    MessagesResult,
    RegistryClient,
    Resolved,
)
from toolref.registry.exchange import Sleep
from toolref.wire import encoding
from toolref.wire.canonical import Ref, digest_of
from toolref.wire.errors import (
    PROBLEM_BASE,
    AuthenticationError,
    BatchTooLargeError,
    CircuitOpenError,
    InvalidRefError,
    MissingRefsError,
    NotFoundError,
    ProtocolRequiredError,
    RegistryUnreachableError,
    ServiceUnavailableError,
    StoreUnavailableError,
    ToolrefError,
    UnexpectedResponseError,
    ValidationError,
)
from toolref.wire.headers import PROTOCOL_HEADER
from toolref.wire.models import Capabilities, FormatName, HydrateMode, Invocation, RegisteredRef
from toolref.wire.protocol import negotiate

BASE = "http://registry.test"
JSON = encoding.JSON_TYPE
MSGPACK = encoding.MSGPACK_TYPE
CAPS = "/v1/capabilities"
REGISTER = "/v1/invocations"
FIND_MISSING = "/v1/invocations:findMissing"
RESOLVE = "/v1/invocations:resolve"

# --- the scripted registry ----------------------------------------------------------------


def capabilities(
    *,
    high: int = 2,
    encodings: Sequence[str] = (JSON, MSGPACK),
    compressors: Sequence[str] = ("gzip", "zstd"),
    max_batch: int = 1000,
) -> dict[str, Any]:
    return {
        "protocol": {"low": 1, "high": high},
        "refScheme": {
            "prefix": "tr_",
            "length": 29,
            "digest": "sha256",
            "digestBytes": 16,
            "encoding": "base32-lower-nopad",
            "canonicalization": "rfc8785+exact-integers",
        },
        "encodings": list(encodings),
        "compressors": list(compressors),
        "limits": {
            "maxBodyBytes": 1 << 20,
            "maxDecompressedBytes": 8 << 20,
            "maxDepth": 64,
            "maxBatch": max_batch,
            "maxMessages": 5000,
        },
        "ttlSeconds": 86400,
        "formats": ["openai-chat", "anthropic"],
        "summarizers": [],
    }


def problem(
    status: int,
    slug: str,
    detail: str = "it went wrong",
    headers: Mapping[str, str] = {},
    **extra: Any,
) -> httpx.Response:
    document = {
        "type": PROBLEM_BASE + slug,
        "title": slug,
        "status": status,
        "detail": detail,
        **extra,
    }
    return httpx.Response(
        status,
        content=json.dumps(document).encode(),
        headers={"content-type": encoding.PROBLEM_TYPE, **headers},
    )


def refused() -> httpx.ConnectError:
    return httpx.ConnectError("[Errno 111] Connection refused")


Outcome = httpx.Response | Exception


@dataclass(frozen=True)
class Seen:
    """A request as it reached the transport."""

    method: str
    path: str
    headers: httpx.Headers
    raw: bytes  # as sent
    data: bytes  # once inflated
    body: Any  # once decoded


class FakeRegistry:
    """An in-memory registry that records every request; `script` overrides answers by path."""

    def __init__(self, **caps: Any) -> None:
        self.caps = capabilities(**caps)
        self.store: dict[str, dict[str, Any]] = {}
        self.seen: list[Seen] = []
        self.scripts: dict[str, list[Outcome]] = {}
        self.down = False
        self.caps_delay = 0.0  # seconds the capabilities answer takes

    def script(self, path: str, *outcomes: Outcome) -> None:
        self.scripts.setdefault(path, []).extend(outcomes)

    def paths(self) -> list[str]:
        return [seen.path for seen in self.seen]

    def count(self, path: str) -> int:
        return self.paths().count(path)

    def to(self, path: str) -> list[Seen]:
        return [seen for seen in self.seen if seen.path == path]

    def handle(self, request: httpx.Request) -> httpx.Response:
        raw = request.content
        data = raw
        if request.headers.get("content-encoding") == "zstd":
            data = zstandard.ZstdDecompressor().decompress(raw)
        body: Any = None
        if data:
            if request.headers.get("content-type") == MSGPACK:
                body = encoding.unpackb(data)
            else:
                body = json.loads(data)
        self.seen.append(Seen(request.method, request.url.path, request.headers, raw, data, body))
        if self.down:
            raise refused()
        queue = self.scripts.get(request.url.path)
        if queue:
            outcome = queue.pop(0)
            if isinstance(outcome, Exception):
                raise outcome
            return outcome
        return self.route(request, body)

    def route(self, request: httpx.Request, body: Any) -> httpx.Response:
        path = request.url.path
        if path == CAPS:
            return self.answer(request, self.caps)
        if path == "/readyz":
            return self.answer(request, {"status": "ok"})
        if request.method == "POST" and path == REGISTER:
            refs = []
            for item in body["invocations"]:
                digest = digest_of(item)
                ref = str(digest.ref)
                refs.append({"ref": ref, "size": digest.size, "new": ref not in self.store})
                self.store.setdefault(ref, item)
            return self.answer(request, {"refs": refs})
        if request.method == "POST" and path == FIND_MISSING:
            return self.answer(
                request, {"missing": [r for r in body["refs"] if r not in self.store]}
            )
        if request.method == "POST" and path == RESOLVE:
            held = {r: self.store[r] for r in body["refs"] if r in self.store}
            missing = [r for r in body["refs"] if r not in self.store]
            return self.answer(request, {"invocations": held, "missing": missing})
        if request.method == "GET" and path.startswith("/v1/invocations/"):
            ref = path.rsplit("/", 1)[1]
            if ref in self.store:
                return self.answer(request, self.store[ref])
            return problem(404, "not-found", f"no invocation {ref}")
        if request.method == "POST" and path.startswith("/v1/messages:"):
            stats = {
                "originalBytes": 10,
                "optimizedBytes": 5,
                "refsUsed": 1,
                "newRefs": 0,
                "cacheHits": 1,
            }
            return self.answer(
                request,
                {
                    "format": body.get("format") or "openai-chat",
                    "messages": body["messages"],
                    "toolReferences": {"call_1": ref_number(1)},
                    "optimizationStats": stats,
                },
            )
        return problem(404, "not-found", f"no route {request.method} {path}")

    def answer(self, request: httpx.Request, body: Any) -> httpx.Response:
        used = negotiate(request.headers.get(PROTOCOL_HEADER), self.caps["protocol"]["high"])
        headers = {PROTOCOL_HEADER: str(used)}
        if request.headers.get("accept", "").startswith(MSGPACK):
            headers["content-type"] = MSGPACK
            return httpx.Response(200, content=encoding.packb(body), headers=headers)
        headers["content-type"] = JSON
        return httpx.Response(200, content=encoding.dumps_json(body), headers=headers)


def sync_transport(server: FakeRegistry) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        if server.caps_delay and request.url.path == CAPS:
            time.sleep(server.caps_delay)
        return server.handle(request)

    return httpx.MockTransport(handler)


def async_transport(server: FakeRegistry) -> httpx.MockTransport:
    async def handler(request: httpx.Request) -> httpx.Response:
        if server.caps_delay and request.url.path == CAPS:
            await asyncio.sleep(server.caps_delay)
        return server.handle(request)

    return httpx.MockTransport(handler)


# --- both halves behind one interface -----------------------------------------------------


class Api:
    """The sync or the async client, called the same way."""

    def __init__(self, client: RegistryClient | AsyncRegistryClient) -> None:
        self.client = client

    @property
    def base(self) -> BaseRegistryClient:
        return self.client

    async def capabilities(self) -> Capabilities:
        if isinstance(self.client, AsyncRegistryClient):
            return await self.client.capabilities()
        return self.client.capabilities()

    async def register(self, invocations: Iterable[Mapping[str, Any]]) -> list[RegisteredRef]:
        if isinstance(self.client, AsyncRegistryClient):
            return await self.client.register(invocations)
        return self.client.register(invocations)

    async def find_missing(self, refs: Iterable[str]) -> list[str]:
        if isinstance(self.client, AsyncRegistryClient):
            return await self.client.find_missing(refs)
        return self.client.find_missing(refs)

    async def resolve(self, refs: Iterable[str]) -> Resolved:
        if isinstance(self.client, AsyncRegistryClient):
            return await self.client.resolve(refs)
        return self.client.resolve(refs)

    async def get(self, ref: str) -> Invocation:
        if isinstance(self.client, AsyncRegistryClient):
            return await self.client.get(ref)
        return self.client.get(ref)

    async def optimize(
        self, messages: list[Any], format: FormatName | None = None
    ) -> MessagesResult:
        if isinstance(self.client, AsyncRegistryClient):
            return await self.client.optimize(messages, format=format)
        return self.client.optimize(messages, format=format)

    async def hydrate(
        self,
        messages: list[Any],
        format: FormatName | None = None,
        mode: HydrateMode | None = None,
    ) -> MessagesResult:
        if isinstance(self.client, AsyncRegistryClient):
            return await self.client.hydrate(messages, format=format, mode=mode)
        return self.client.hydrate(messages, format=format, mode=mode)

    async def ready(self) -> bool:
        if isinstance(self.client, AsyncRegistryClient):
            return await self.client.ready()
        return self.client.ready()

    async def find_missing_concurrently(self, batches: list[list[str]]) -> list[list[str]]:
        """Several calls at once: tasks for the async client, threads for the sync one."""
        client = self.client
        if isinstance(client, AsyncRegistryClient):
            return list(await asyncio.gather(*(client.find_missing(b) for b in batches)))
        return list(
            await asyncio.gather(*(asyncio.to_thread(client.find_missing, b) for b in batches))
        )

    async def close(self) -> None:
        if isinstance(self.client, AsyncRegistryClient):
            await self.client.aclose()
        else:
            self.client.close()


MakeApi = Callable[..., Api]


@pytest.fixture(params=["sync", "async"])
async def make_api(request: pytest.FixtureRequest) -> AsyncIterator[MakeApi]:
    """`make_api(server, **client_options)`: a client of the requested half for `server`."""
    made: list[Api] = []

    def make(server: FakeRegistry, **options: Any) -> Api:
        options.setdefault("rng", random.Random(0))
        client: RegistryClient | AsyncRegistryClient
        if request.param == "sync":
            client = RegistryClient(BASE, transport=sync_transport(server), **options)
        else:
            client = AsyncRegistryClient(BASE, transport=async_transport(server), **options)
        made.append(Api(client))
        return made[-1]

    yield make
    for api in made:
        await api.close()


@pytest.fixture(autouse=True)
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """What the drivers were asked to sleep; nothing in here really sleeps."""
    slept: list[float] = []

    async def async_sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(toolref.registry.exchange, "time", SimpleNamespace(sleep=slept.append))
    monkeypatch.setattr(toolref.registry.exchange, "asyncio", SimpleNamespace(sleep=async_sleep))
    return slept


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def state(breaker: CircuitBreaker) -> BreakerState:
    """The breaker's state now (a call, so mypy does not narrow it across calls)."""
    return breaker.state


def ref_number(i: int) -> str:
    return str(Ref.from_digest(hashlib.sha256(str(i).encode()).digest()))


def invocation(i: int) -> dict[str, Any]:
    return {"name": "read_file", "args": {"path": f"f{i}.py"}, "result": f"x = {i}\n"}


MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]


# --- negotiation ----------------------------------------------------------------------------


async def test_capabilities_are_fetched_once_across_many_calls(make_api: MakeApi) -> None:
    server = FakeRegistry(max_batch=1000)
    api = make_api(server, api_key="trk_secret")
    assert api.base.negotiated is None
    assert api.base.protocol == 1  # before negotiation
    caps = await api.capabilities()
    assert caps.limits.max_batch == 1000
    [registered] = await api.register([invocation(1)])
    assert await api.find_missing([registered.ref, ref_number(2)]) == [ref_number(2)]
    assert (await api.resolve([registered.ref])).missing == []
    assert (await api.get(registered.ref)).result == "x = 1\n"
    await api.optimize(MESSAGES)
    await api.hydrate(MESSAGES)
    await api.find_missing([ref_number(i) for i in range(2500)])  # three batches
    assert await api.capabilities() is caps
    assert api.base.negotiated is caps
    assert server.count(CAPS) == 1
    assert len(server.seen) == 1 + 6 + 3  # negotiation, six single calls, three batches
    [fetch] = server.to(CAPS)
    assert fetch.method == "GET"
    assert fetch.headers["accept"] == JSON
    # The API key goes with every request, the negotiation included.
    assert {seen.headers["authorization"] for seen in server.seen} == {"Bearer trk_secret"}


async def test_a_failed_negotiation_is_not_remembered(make_api: MakeApi) -> None:
    server = FakeRegistry()
    server.script(CAPS, refused())
    api = make_api(server, retries=0)
    with pytest.raises(RegistryUnreachableError):
        await api.find_missing([ref_number(1)])
    assert api.base.negotiated is None
    assert await api.find_missing([ref_number(1)]) == [ref_number(1)]
    assert server.paths() == [CAPS, CAPS, FIND_MISSING]


@pytest.mark.parametrize("high", [2, 3, 9])
async def test_the_protocol_sent_is_the_highest_both_speak(make_api: MakeApi, high: int) -> None:
    server = FakeRegistry(high=high)
    api = make_api(server)
    [registered] = await api.register([invocation(1)])
    await api.find_missing([registered.ref])
    await api.resolve([registered.ref])
    await api.get(registered.ref)
    await api.optimize(MESSAGES)
    await api.hydrate(MESSAGES, mode="full")
    assert api.base.protocol == 2
    calls = [seen for seen in server.seen if seen.path != CAPS]
    assert len(calls) == 6
    assert {seen.headers[PROTOCOL_HEADER] for seen in calls} == {"2"}


async def test_a_protocol_1_server_gets_no_ref_calls(make_api: MakeApi) -> None:
    server = FakeRegistry(high=1)
    api = make_api(server)
    for call in (
        api.register([invocation(1)]),
        api.find_missing([ref_number(1)]),
        api.resolve([ref_number(1)]),
        api.optimize(MESSAGES),
    ):
        with pytest.raises(ProtocolRequiredError, match="protocol 1"):
            await call
    assert api.base.protocol == 1
    assert server.paths() == [CAPS]  # none of them was sent
    # Fetching one invocation needs no refs from the server: it works, as protocol 1.
    ref = str(digest_of(invocation(5)).ref)
    server.store[ref] = {**invocation(5), "isError": False}
    assert (await api.get(ref)).args == {"path": "f5.py"}
    assert server.seen[-1].headers[PROTOCOL_HEADER] == "1"


# --- encodings and compression --------------------------------------------------------------


async def test_msgpack_is_used_when_the_server_offers_it(make_api: MakeApi) -> None:
    server = FakeRegistry(encodings=(JSON, MSGPACK))
    api = make_api(server)
    [registered] = await api.register([invocation(1)])
    assert registered.ref == str(digest_of(invocation(1)).ref)
    assert registered.new
    refs = [registered.ref, ref_number(2)]
    assert await api.find_missing(refs) == [ref_number(2)]
    resolved = await api.resolve(refs)
    assert resolved.invocations[registered.ref].result == "x = 1\n"
    for seen in server.seen[1:]:
        assert seen.headers["content-type"] == MSGPACK
        assert seen.headers["accept"].startswith(MSGPACK)  # preferred, JSON as a fallback
        assert "content-encoding" not in seen.headers  # small bodies
    find = server.to(FIND_MISSING)[0]
    assert find.raw == encoding.packb({"refs": refs})
    assert find.body == {"refs": refs}


@pytest.mark.parametrize(
    ("offered", "setting"),
    [((JSON,), "auto"), ((JSON, MSGPACK), "json"), ((JSON,), "msgpack")],
    ids=["not-offered", "forced-json", "msgpack-not-offered"],
)
async def test_json_is_used_when_msgpack_is_not_offered_or_not_wanted(
    make_api: MakeApi, offered: tuple[str, ...], setting: str
) -> None:
    server = FakeRegistry(encodings=offered)
    api = make_api(server, encoding=setting)
    refs = [ref_number(1), ref_number(2)]
    assert await api.find_missing(refs) == refs
    find = server.to(FIND_MISSING)[0]
    assert find.headers["content-type"] == JSON
    assert find.headers["accept"] == JSON
    assert find.raw == encoding.dumps_json({"refs": refs})


@pytest.mark.parametrize("setting", ["json", "msgpack"])
async def test_bodies_at_or_over_the_threshold_are_zstd_compressed(
    make_api: MakeApi, setting: str
) -> None:
    refs = [ref_number(i) for i in range(40)]
    body = {"refs": refs}
    plain = encoding.packb(body) if setting == "msgpack" else encoding.dumps_json(body)
    server = FakeRegistry(compressors=("gzip", "zstd"))

    at = make_api(server, encoding=setting, compress_threshold=len(plain))
    assert await at.find_missing(refs) == refs
    sent = server.to(FIND_MISSING)[-1]
    assert sent.headers["content-encoding"] == "zstd"
    assert sent.raw != plain
    assert sent.raw.startswith(b"\x28\xb5\x2f\xfd")  # a zstd frame
    assert sent.data == plain  # the server inflates it to exactly the encoded body
    assert sent.body == body

    above = make_api(server, encoding=setting, compress_threshold=len(plain) + 1)
    assert await above.find_missing(refs) == refs
    sent = server.to(FIND_MISSING)[-1]
    assert "content-encoding" not in sent.headers
    assert sent.raw == plain


async def test_no_compression_unless_the_server_lists_zstd(make_api: MakeApi) -> None:
    server = FakeRegistry(compressors=("gzip",))
    api = make_api(server, compress_threshold=0)
    refs = [ref_number(i) for i in range(40)]
    assert await api.find_missing(refs) == refs
    sent = server.to(FIND_MISSING)[0]
    assert "content-encoding" not in sent.headers
    assert sent.raw == encoding.packb({"refs": refs})


async def test_requests_without_a_body_are_never_compressed(make_api: MakeApi) -> None:
    server = FakeRegistry()
    api = make_api(server, compress_threshold=0)
    ref = str(digest_of(invocation(3)).ref)
    server.store[ref] = {**invocation(3), "isError": False}
    await api.get(ref)
    [sent] = server.to(f"/v1/invocations/{ref}")
    assert sent.raw == b""
    assert "content-encoding" not in sent.headers


async def test_big_integers_survive_msgpack(make_api: MakeApi) -> None:
    server = FakeRegistry(encodings=(JSON, MSGPACK))
    api = make_api(server)
    big = {"name": "calc", "args": {"n": 2**100, "neg": -(2**70)}, "result": 10**30}
    [registered] = await api.register([big])
    assert registered.ref == str(digest_of(big).ref)  # the server hashed the exact values
    sent = server.to(REGISTER)[0]
    assert sent.headers["content-type"] == MSGPACK
    # On the wire: ext type 1 holding the decimal digits.
    undecoded = msgpack.unpackb(sent.raw, raw=False)
    args = undecoded["invocations"][0]["args"]
    assert args["n"] == msgpack.ExtType(1, str(2**100).encode())
    assert args["neg"] == msgpack.ExtType(1, str(-(2**70)).encode())
    # And back, in msgpack answers.
    fetched = await api.get(registered.ref)
    assert fetched.args == {"n": 2**100, "neg": -(2**70)}
    assert fetched.result == 10**30
    assert type(fetched.result) is int
    resolved = await api.resolve([registered.ref])
    assert resolved.invocations[registered.ref].args["n"] == 2**100


# --- batching -------------------------------------------------------------------------------


async def test_batches_are_split_to_max_batch_and_results_kept_in_order(
    make_api: MakeApi,
) -> None:
    server = FakeRegistry(max_batch=1000)
    api = make_api(server)
    refs = [ref_number(i) for i in range(2500)]
    for ref in refs[::7]:
        server.store[ref] = {**invocation(0), "isError": False}
    missing = await api.find_missing(refs)
    sent = server.to(FIND_MISSING)
    assert [len(seen.body["refs"]) for seen in sent] == [1000, 1000, 500]
    assert [r for seen in sent for r in seen.body["refs"]] == refs
    assert missing == [r for r in refs if r not in server.store]

    resolved = await api.resolve(refs)
    assert [len(seen.body["refs"]) for seen in server.to(RESOLVE)] == [1000, 1000, 500]
    assert list(resolved.invocations) == refs[::7]
    assert resolved.missing == missing


async def test_register_batches_return_refs_in_request_order(make_api: MakeApi) -> None:
    server = FakeRegistry(max_batch=1000)
    api = make_api(server)
    invocations = [invocation(i) for i in range(2500)]
    registered = await api.register(invocations)
    assert [len(seen.body["invocations"]) for seen in server.to(REGISTER)] == [1000, 1000, 500]
    assert [r.ref for r in registered] == [str(digest_of(i).ref) for i in invocations]
    assert all(r.new for r in registered)
    again = await api.register(invocations[:3])
    assert [r.new for r in again] == [False, False, False]


@pytest.mark.parametrize(("count", "sizes"), [(4, [4]), (5, [4, 1]), (8, [4, 4]), (9, [4, 4, 1])])
async def test_batch_edges(make_api: MakeApi, count: int, sizes: list[int]) -> None:
    server = FakeRegistry(max_batch=4)
    api = make_api(server)
    refs = [ref_number(i) for i in range(count)]
    assert await api.find_missing(refs) == refs
    assert [len(seen.body["refs"]) for seen in server.to(FIND_MISSING)] == sizes


# --- retries --------------------------------------------------------------------------------

RETRYABLE: dict[str, Callable[[], Outcome]] = {
    "503": lambda: httpx.Response(503),
    "503-problem": lambda: problem(503, "store-unavailable", headers={"Retry-After": "0"}),
    "502-html": lambda: httpx.Response(502, html="<h1>Bad Gateway</h1>"),
    "504": lambda: httpx.Response(504, text="gateway timeout"),
    "connect-error": refused,
    "read-timeout": lambda: httpx.ReadTimeout("timed out"),
}


@pytest.mark.parametrize("failure", list(RETRYABLE))
async def test_retryable_failures_are_retried_then_succeed(
    make_api: MakeApi, sleeps: list[float], failure: str
) -> None:
    server = FakeRegistry()
    server.script(FIND_MISSING, RETRYABLE[failure](), RETRYABLE[failure]())
    api = make_api(server, retries=2, backoff=0.05, max_backoff=2.0)
    assert await api.find_missing([ref_number(1)]) == [ref_number(1)]
    assert server.count(FIND_MISSING) == 3
    assert len(sleeps) == 2
    assert all(0 <= s <= 2.0 for s in sleeps)
    assert state(api.base.breaker) is BreakerState.CLOSED  # the success reset the count


async def test_no_retries_means_one_attempt(make_api: MakeApi, sleeps: list[float]) -> None:
    server = FakeRegistry()
    server.script(FIND_MISSING, httpx.Response(503))
    api = make_api(server, retries=0)
    with pytest.raises(RegistryUnreachableError, match="1 attempt"):
        await api.find_missing([ref_number(1)])
    assert server.count(FIND_MISSING) == 1
    assert sleeps == []


@pytest.mark.parametrize(("after", "slept"), [("1", 1.0), ("30", 2.0)])
async def test_retry_after_is_honoured_up_to_max_backoff(
    make_api: MakeApi, sleeps: list[float], after: str, slept: float
) -> None:
    server = FakeRegistry()
    server.script(FIND_MISSING, problem(503, "store-unavailable", headers={"Retry-After": after}))
    api = make_api(server, retries=2, backoff=0.01, max_backoff=2.0)
    assert await api.find_missing([ref_number(1)]) == [ref_number(1)]
    assert sleeps == [slept]


async def test_transport_errors_after_the_last_retry_are_unreachable(
    make_api: MakeApi, sleeps: list[float]
) -> None:
    server = FakeRegistry()
    server.script(FIND_MISSING, refused(), refused(), refused())
    api = make_api(server, retries=2, breaker=CircuitBreaker(failure_threshold=100))
    with pytest.raises(RegistryUnreachableError) as info:
        await api.find_missing([ref_number(1)])
    assert type(info.value) is RegistryUnreachableError
    assert "3 attempt(s)" in info.value.detail
    assert "ConnectError" in info.value.detail
    assert BASE in info.value.detail
    assert server.count(FIND_MISSING) == 3
    assert len(sleeps) == 2


async def test_a_503_problem_after_the_last_retry_is_the_typed_error(
    make_api: MakeApi, sleeps: list[float]
) -> None:
    server = FakeRegistry()
    for _ in range(3):
        server.script(
            FIND_MISSING,
            problem(503, "store-unavailable", "redis is down", headers={"Retry-After": "7"}),
        )
    api = make_api(server, retries=2, max_backoff=2.0, breaker=CircuitBreaker(100))
    with pytest.raises(StoreUnavailableError) as info:
        await api.find_missing([ref_number(1)])
    assert info.value.retry_after == 7
    assert info.value.detail == "redis is down"
    assert server.count(FIND_MISSING) == 3
    assert sleeps == [2.0, 2.0]  # Retry-After 7 capped at max_backoff


async def test_a_proxy_502_page_after_the_last_retry_is_unreachable(make_api: MakeApi) -> None:
    server = FakeRegistry()
    for _ in range(2):
        server.script(FIND_MISSING, httpx.Response(502, html="<html>Bad Gateway</html>"))
    api = make_api(server, retries=1, breaker=CircuitBreaker(100))
    with pytest.raises(RegistryUnreachableError) as info:
        await api.find_missing([ref_number(1)])
    assert type(info.value) is RegistryUnreachableError
    assert "HTTP 502" in info.value.detail
    assert server.count(FIND_MISSING) == 2


async def test_a_500_is_not_retried_but_counts_as_a_failure(make_api: MakeApi) -> None:
    server = FakeRegistry()
    server.script(FIND_MISSING, problem(500, "internal", "boom"))
    breaker = CircuitBreaker(failure_threshold=1, reset_timeout=60, clock=FakeClock())
    api = make_api(server, retries=3, breaker=breaker)
    with pytest.raises(UnexpectedResponseError) as info:
        await api.find_missing([ref_number(1)])
    assert info.value.extra["httpStatus"] == 500
    assert server.count(FIND_MISSING) == 1
    assert state(breaker) is BreakerState.OPEN


# --- jitter, by driving the exchange directly -----------------------------------------------


def delays(client: BaseRegistryClient, answers: Callable[[], Outcome]) -> list[float]:
    """The Sleep steps of one `_send` whose every attempt gets `answers()`."""
    exchange = client._send(httpx.Request("GET", f"{BASE}/v1/capabilities"))
    step = next(exchange)
    found: list[float] = []
    try:
        while True:
            if isinstance(step, Sleep):
                found.append(step.seconds)
                step = exchange.send(None)
                continue
            assert isinstance(step, httpx.Request)
            outcome = answers()
            if isinstance(outcome, Exception):
                step = exchange.throw(outcome)
            else:
                step = exchange.send(outcome)
    except ToolrefError:
        return found


@pytest.mark.parametrize("failure", ["503", "connect-error"])
def test_full_jitter_delays_stay_within_the_exponential_ceiling(failure: str) -> None:
    backoff, cap, retries = 0.1, 1.5, 6
    by_retry: dict[int, list[float]] = {k: [] for k in range(1, retries + 1)}
    for seed in range(150):
        client = BaseRegistryClient(
            BASE,
            retries=retries,
            backoff=backoff,
            max_backoff=cap,
            breaker=CircuitBreaker(failure_threshold=1000),
            rng=random.Random(seed),
        )
        found = delays(client, RETRYABLE[failure])
        assert len(found) == retries
        for k, delay in enumerate(found, start=1):
            by_retry[k].append(delay)
    for k, found in by_retry.items():
        # The k-th retry waits U(0, min(cap, backoff * 2**k)); the code counts retries from 1.
        ceiling = min(cap, backoff * 2**k)
        assert all(0 <= d <= ceiling for d in found), (k, ceiling, max(found))
        # Jittered over the range, not a fixed delay.
        assert min(found) < ceiling / 8
        assert max(found) > ceiling / 4
    assert max(by_retry[retries]) <= cap


def test_retry_after_sets_a_floor_below_max_backoff() -> None:
    for seed in range(50):
        client = BaseRegistryClient(
            BASE,
            retries=5,
            backoff=1.0,
            max_backoff=8.0,
            breaker=CircuitBreaker(failure_threshold=1000),
            rng=random.Random(seed),
        )
        found = delays(client, lambda: httpx.Response(503, headers={"Retry-After": "3"}))
        assert len(found) == 5
        for k, delay in enumerate(found, start=1):
            assert 3.0 <= delay <= max(3.0, min(8.0, 2.0**k))


def test_an_http_date_retry_after_is_ignored_not_fatal() -> None:
    client = BaseRegistryClient(
        BASE,
        retries=3,
        backoff=0.01,
        max_backoff=5.0,
        rng=random.Random(1),
        breaker=CircuitBreaker(failure_threshold=1000),
    )
    answer = httpx.Response(503, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})
    found = delays(client, lambda: answer)
    assert len(found) == 3
    assert all(0 <= d <= 0.01 * 2**3 for d in found)


# --- circuit breaker ------------------------------------------------------------------------


async def test_an_open_breaker_refuses_without_touching_the_transport(make_api: MakeApi) -> None:
    server = FakeRegistry()
    clock = FakeClock()
    breaker = CircuitBreaker(failure_threshold=3, reset_timeout=30, clock=clock)
    api = make_api(server, retries=0, breaker=breaker)
    await api.capabilities()
    server.script(FIND_MISSING, refused(), refused(), refused())
    for _ in range(3):
        with pytest.raises(RegistryUnreachableError) as info:
            await api.find_missing([ref_number(1)])
        assert not isinstance(info.value, CircuitOpenError)
    assert state(breaker) is BreakerState.OPEN
    sent = len(server.seen)
    with pytest.raises(CircuitOpenError) as opened:
        await api.find_missing([ref_number(1)])
    assert opened.value.retry_after == 30
    assert isinstance(opened.value, RegistryUnreachableError)  # callers fall back on one class
    with pytest.raises(CircuitOpenError):
        await api.get(ref_number(1))
    assert await api.ready() is False
    assert len(server.seen) == sent  # nothing reached the transport

    clock.now += 30  # one probe goes out; it succeeds and closes the breaker
    assert await api.find_missing([ref_number(1)]) == [ref_number(1)]
    assert state(breaker) is BreakerState.CLOSED
    assert len(server.seen) == sent + 1


async def test_a_failed_probe_reopens_the_breaker(make_api: MakeApi) -> None:
    server = FakeRegistry()
    clock = FakeClock()
    breaker = CircuitBreaker(failure_threshold=2, reset_timeout=10, clock=clock)
    api = make_api(server, retries=0, breaker=breaker)
    await api.capabilities()
    server.script(FIND_MISSING, refused(), refused(), httpx.Response(503))
    for _ in range(2):
        with pytest.raises(RegistryUnreachableError):
            await api.find_missing([ref_number(1)])
    clock.now += 10
    with pytest.raises(RegistryUnreachableError) as probe:
        await api.find_missing([ref_number(1)])  # the probe: a 503
    assert not isinstance(probe.value, CircuitOpenError)
    assert server.count(FIND_MISSING) == 3
    clock.now += 9
    with pytest.raises(CircuitOpenError) as info:
        await api.find_missing([ref_number(1)])
    assert info.value.retry_after == 1
    assert server.count(FIND_MISSING) == 3
    clock.now += 1
    assert await api.find_missing([ref_number(1)]) == [ref_number(1)]
    assert state(breaker) is BreakerState.CLOSED


async def test_every_failed_attempt_counts_toward_the_breaker(make_api: MakeApi) -> None:
    server = FakeRegistry()
    breaker = CircuitBreaker(failure_threshold=3, reset_timeout=60, clock=FakeClock())
    api = make_api(server, retries=5, breaker=breaker)
    await api.capabilities()
    server.script(FIND_MISSING, *(refused() for _ in range(6)))
    with pytest.raises(RegistryUnreachableError):
        await api.find_missing([ref_number(1)])
    assert server.count(FIND_MISSING) == 3  # the breaker opened on the third attempt
    assert state(breaker) is BreakerState.OPEN


async def test_client_errors_are_the_registry_working(make_api: MakeApi) -> None:
    server = FakeRegistry()
    breaker = CircuitBreaker(failure_threshold=2, reset_timeout=60, clock=FakeClock())
    api = make_api(server, retries=0, breaker=breaker)
    await api.capabilities()
    ref = ref_number(1)
    for _ in range(4):
        server.script(f"/v1/invocations/{ref}", refused())
        with pytest.raises(RegistryUnreachableError):
            await api.get(ref)
        with pytest.raises(NotFoundError):  # a 404 is an answer: it resets the count
            await api.get(ref)
    assert state(breaker) is BreakerState.CLOSED


# --- problems -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProblemCase:
    path: str
    answer: Callable[[], httpx.Response]
    error: type[ToolrefError]
    check: Callable[[Any], bool]


ERRORS = [ref_number(7), ref_number(8)]
PROBLEMS = {
    "not-found": ProblemCase(
        f"/v1/invocations/{ref_number(1)}",
        lambda: problem(404, "not-found", "no such ref"),
        NotFoundError,
        lambda e: e.detail == "no such ref",
    ),
    "missing-refs": ProblemCase(
        "/v1/messages:hydrate",
        lambda: problem(409, "missing-refs", "resend them", missingRefs=ERRORS),
        MissingRefsError,
        lambda e: e.missing_refs == ERRORS,
    ),
    "unauthorized": ProblemCase(
        FIND_MISSING,
        lambda: problem(401, "unauthorized", "bad key", headers={"WWW-Authenticate": "Bearer"}),
        AuthenticationError,
        lambda e: e.detail == "bad key",
    ),
    "validation-failed": ProblemCase(
        REGISTER,
        lambda: problem(
            422,
            "validation-failed",
            "wrong shape",
            errors=[{"pointer": "/invocations/0/name", "message": "required"}],
        ),
        ValidationError,
        lambda e: e.extra["errors"] == [{"pointer": "/invocations/0/name", "message": "required"}],
    ),
    "invalid-ref": ProblemCase(
        RESOLVE,
        lambda: problem(422, "invalid-ref", "not a ref", value="tr_x"),
        InvalidRefError,
        lambda e: e.extra["value"] == "tr_x",
    ),
    "batch-too-large": ProblemCase(
        FIND_MISSING,
        lambda: problem(413, "batch-too-large", "too many", limit=1000),
        BatchTooLargeError,
        lambda e: e.extra["limit"] == 1000,
    ),
    "protocol-required": ProblemCase(
        REGISTER,
        lambda: problem(400, "protocol-required", "send Toolref-Protocol: 2"),
        ProtocolRequiredError,
        lambda e: "Toolref-Protocol" in e.detail,
    ),
    "unknown-type": ProblemCase(
        RESOLVE,
        lambda: problem(418, "teapot", "short and stout"),
        UnexpectedResponseError,
        lambda e: e.extra["httpStatus"] == 418,
    ),
}


async def call_path(api: Api, path: str) -> Any:
    if path == FIND_MISSING:
        return await api.find_missing([ref_number(1)])
    if path == RESOLVE:
        return await api.resolve([ref_number(1)])
    if path == REGISTER:
        return await api.register([invocation(1)])
    if path == "/v1/messages:hydrate":
        return await api.hydrate(MESSAGES)
    return await api.get(path.rsplit("/", 1)[1])


@pytest.mark.parametrize("case", list(PROBLEMS))
async def test_problems_become_their_error_classes(
    make_api: MakeApi, sleeps: list[float], case: str
) -> None:
    scripted = PROBLEMS[case]
    server = FakeRegistry()
    server.script(scripted.path, scripted.answer())
    api = make_api(server, retries=3)
    with pytest.raises(scripted.error) as info:
        await call_path(api, scripted.path)
    assert type(info.value) is scripted.error
    assert scripted.check(info.value)
    assert server.count(scripted.path) == 1  # not retried
    assert sleeps == []


async def test_a_non_problem_error_is_an_unexpected_response(make_api: MakeApi) -> None:
    server = FakeRegistry()
    ref = ref_number(1)
    server.script(f"/v1/invocations/{ref}", httpx.Response(404, text="404 page not found"))
    api = make_api(server, retries=3)
    with pytest.raises(UnexpectedResponseError) as info:
        await api.get(ref)
    assert info.value.extra["httpStatus"] == 404
    assert "404 page not found" in info.value.detail
    assert BASE in info.value.detail
    assert server.count(f"/v1/invocations/{ref}") == 1


# --- readiness ------------------------------------------------------------------------------


async def test_ready_is_true_when_readyz_answers_200(make_api: MakeApi) -> None:
    server = FakeRegistry()
    api = make_api(server)
    assert await api.ready() is True
    assert server.paths() == ["/readyz"]  # no negotiation needed


async def test_ready_is_false_when_the_registry_is_down(make_api: MakeApi) -> None:
    server = FakeRegistry()
    server.down = True
    api = make_api(server, retries=1)
    assert await api.ready() is False
    assert server.paths() == ["/readyz", "/readyz"]
    server.down = False
    assert await api.ready() is True


async def test_ready_is_false_when_the_store_is_down(make_api: MakeApi) -> None:
    server = FakeRegistry()
    server.script("/readyz", *(problem(503, "store-unavailable") for _ in range(2)))
    api = make_api(server, retries=1)
    assert await api.ready() is False
    assert await api.ready() is True


# --- refs checked locally -------------------------------------------------------------------

BAD_REFS = [
    "",
    "tr_short",
    "TR_" + ref_number(1)[3:],
    ref_number(1).upper(),
    ref_number(1) + "a",
    "tr_" + "a" * 25 + "b",  # sets padding bits
    "tr_" + "1" * 26,  # 1 is not base32
]


@pytest.mark.parametrize("operation", ["find_missing", "resolve", "get"])
@pytest.mark.parametrize("bad", BAD_REFS)
async def test_invalid_refs_fail_before_any_request(
    make_api: MakeApi, operation: str, bad: str
) -> None:
    server = FakeRegistry()
    api = make_api(server)
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "find_missing": lambda: api.find_missing([ref_number(1), bad]),
        "resolve": lambda: api.resolve([bad, ref_number(2)]),
        "get": lambda: api.get(bad),
    }
    with pytest.raises(InvalidRefError):
        await calls[operation]()
    assert server.seen == []


# --- messages -------------------------------------------------------------------------------


async def test_optimize_and_hydrate_send_only_the_options_given(make_api: MakeApi) -> None:
    server = FakeRegistry()
    api = make_api(server)
    optimized = await api.optimize(MESSAGES, format="anthropic")
    assert server.seen[-1].body == {"messages": MESSAGES, "format": "anthropic"}
    assert optimized.format == "anthropic"
    assert optimized.messages == MESSAGES
    assert optimized.tool_references == {"call_1": ref_number(1)}
    assert optimized.stats["refsUsed"] == 1
    await api.hydrate(MESSAGES)
    assert server.seen[-1].path == "/v1/messages:hydrate"
    assert server.seen[-1].body == {"messages": MESSAGES}
    hydrated = await api.hydrate(MESSAGES, mode="full")
    assert server.seen[-1].body == {"messages": MESSAGES, "mode": "full"}
    assert hydrated.format == "openai-chat"


# --- regressions -----------------------------------------------------------------------------


async def test_concurrent_first_calls_share_one_negotiation(make_api: MakeApi) -> None:
    server = FakeRegistry()
    server.caps_delay = 0.05
    api = make_api(server)
    batches = [[ref_number(i)] for i in range(5)]
    assert await api.find_missing_concurrently(batches) == batches
    assert server.count(CAPS) == 1


async def test_a_capabilities_document_with_new_members_still_negotiates(
    make_api: MakeApi,
) -> None:
    server = FakeRegistry()
    server.caps["features"] = ["summaries"]
    server.caps["limits"]["maxSummaryBytes"] = 4096
    api = make_api(server)
    assert await api.find_missing([ref_number(1)]) == [ref_number(1)]


async def test_a_2xx_answer_that_is_not_json_is_an_unexpected_response(
    make_api: MakeApi,
) -> None:
    server = FakeRegistry()
    server.script(CAPS, httpx.Response(200, html="<html>Welcome to nginx!</html>"))
    api = make_api(server)
    with pytest.raises(UnexpectedResponseError):
        await api.find_missing([ref_number(1)])


async def test_the_attempt_that_opens_the_breaker_gives_up_at_once(
    make_api: MakeApi, sleeps: list[float]
) -> None:
    server = FakeRegistry()
    breaker = CircuitBreaker(failure_threshold=1, reset_timeout=60, clock=FakeClock())
    api = make_api(server, retries=2, max_backoff=2.0, breaker=breaker)
    await api.capabilities()
    server.script(FIND_MISSING, problem(503, "store-unavailable", headers={"Retry-After": "2"}))
    with pytest.raises(ServiceUnavailableError):
        await api.find_missing([ref_number(1)])
    assert server.count(FIND_MISSING) == 1
    assert sleeps == []  # the call cannot be retried, so there is nothing to wait for


THREADED_COMPRESSION = """
import os, threading, httpx
from toolref import RegistryClient
caps = {caps!r}
def handler(request):
    if request.url.path == "/v1/capabilities":
        return httpx.Response(200, json=caps)
    return httpx.Response(200, json={{"refs": []}})
client = RegistryClient("http://registry.test", transport=httpx.MockTransport(handler),
                        compress_threshold=1024)
client.capabilities()
def work():
    for _ in range(10):
        client.register([{{"name": "t", "args": {{}}, "result": os.urandom(60000).hex()}}])
threads = [threading.Thread(target=work) for _ in range(8)]
for thread in threads: thread.start()
for thread in threads: thread.join()
"""


def test_the_sync_client_compresses_safely_from_many_threads() -> None:
    script = THREADED_COMPRESSION.format(caps=capabilities())
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
