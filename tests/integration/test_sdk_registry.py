"""The SDK's registry clients against the real service: one behavioural suite, three setups.

- `sync-socket`: `RegistryClient` over a real socket to `toolref-server serve` (a subprocess
  on its embedded engine, started once for the module);
- `async-socket`: `AsyncRegistryClient` over a real socket to that same service;
- `in-process`: `AsyncRegistryClient` through `httpx.ASGITransport` to `create_app` on the
  test engine.

Tests talk to a `Registry` adapter with async methods (the sync client's calls run in a
thread), so each is written once. Every client sends through a recording transport, so tests
see what went over the wire. Payloads carry a per-test token: no test sees another's data.
Both socket setups run with `TOOLREF_MAX_BATCH=50`, the in-process app with `max_batch=50`.
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import zstandard
from redis.asyncio import Redis
from starlette.applications import Starlette

from tests.support.processes import Service
from toolref import (
    AsyncRegistryClient,
    BreakerState,
    CanonicalizationError,
    Capabilities,
    CircuitBreaker,
    CircuitOpenError,
    InvalidRefError,
    Invocation,
    MessagesResult,
    MissingRefsError,
    NotFoundError,
    RegisteredRef,
    RegistryClient,
    RegistryUnreachableError,
    Resolved,
    digest_of,
)
from toolref.wire.encoding import JSON_TYPE, MSGPACK_TYPE, dumps_json, unpackb
from toolref.wire.headers import PROTOCOL_HEADER
from toolref_server.app import create_app
from toolref_server.embedded import free_port, valkey_server_binary
from toolref_server.settings import Settings

from ..conftest import ON_CLUSTER, client_for, engine_env, need

MAX_BATCH = 50
SYNC, ASYNC, IN_PROCESS = "sync-socket", "async-socket", "in-process"
CAPABILITIES = "/v1/capabilities"
REGISTER = "/v1/invocations"
FIND_MISSING = "/v1/invocations:findMissing"
RESOLVE = "/v1/invocations:resolve"


# --- what went over the wire -------------------------------------------------------------


@dataclass
class Sent:
    """One request as the transport saw it, and its response (None if sending failed)."""

    request: httpx.Request
    response: httpx.Response | None = None

    @property
    def path(self) -> str:
        return self.request.url.path

    def body(self) -> Any:
        """The request body decoded as the server would: zstd, then msgpack or JSON."""
        content = self.request.content
        if self.request.headers.get("content-encoding") == "zstd":
            content = zstandard.ZstdDecompressor().decompress(content)
        if self.request.headers["content-type"] == MSGPACK_TYPE:
            return unpackb(content)
        return json.loads(content)


class Recorder:
    def __init__(self) -> None:
        self.sent: list[Sent] = []

    def start(self, request: httpx.Request) -> Sent:
        sent = Sent(request)
        self.sent.append(sent)
        return sent

    def to(self, path: str) -> list[Sent]:
        return [s for s in self.sent if s.path == path]

    def clear(self) -> None:
        self.sent.clear()


class RecordingTransport(httpx.BaseTransport):
    def __init__(self, inner: httpx.BaseTransport, recorder: Recorder) -> None:
        self.inner, self.recorder = inner, recorder

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        sent = self.recorder.start(request)
        sent.response = self.inner.handle_request(request)
        return sent.response

    def close(self) -> None:
        self.inner.close()


class AsyncRecordingTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport, recorder: Recorder) -> None:
        self.inner, self.recorder = inner, recorder

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        sent = self.recorder.start(request)
        sent.response = await self.inner.handle_async_request(request)
        return sent.response

    async def aclose(self) -> None:
        await self.inner.aclose()


# --- one client, whichever kind, behind async methods ----------------------------------------


class Registry:
    """A sync or async registry client behind one async interface, with its recorder."""

    def __init__(self, client: RegistryClient | AsyncRegistryClient, recorder: Recorder) -> None:
        self.client, self.recorder = client, recorder

    async def _run(self, method: str, *args: Any) -> Any:
        bound = getattr(self.client, method)
        if isinstance(self.client, RegistryClient):
            return await asyncio.to_thread(bound, *args)
        return await bound(*args)

    @property
    def breaker(self) -> CircuitBreaker:
        return self.client.breaker

    async def capabilities(self) -> Capabilities:
        found: Capabilities = await self._run("capabilities")
        return found

    async def register(self, invocations: Sequence[Any]) -> list[RegisteredRef]:
        found: list[RegisteredRef] = await self._run("register", invocations)
        return found

    async def find_missing(self, refs: Sequence[str]) -> list[str]:
        found: list[str] = await self._run("find_missing", refs)
        return found

    async def resolve(self, refs: Sequence[str]) -> Resolved:
        found: Resolved = await self._run("resolve", refs)
        return found

    async def get(self, ref: str) -> Invocation:
        found: Invocation = await self._run("get", ref)
        return found

    async def optimize(self, messages: list[Any], format: str | None = None) -> MessagesResult:
        found: MessagesResult = await self._run("optimize", messages, format)
        return found

    async def hydrate(self, messages: list[Any], format: str | None = None) -> MessagesResult:
        found: MessagesResult = await self._run("hydrate", messages, format)
        return found

    async def ready(self) -> bool:
        found: bool = await self._run("ready")
        return found

    async def aclose(self) -> None:
        if isinstance(self.client, RegistryClient):
            self.client.close()
        else:
            await self.client.aclose()


class Setup:
    """One way of reaching the registry; `connect` builds recording clients of that kind."""

    def __init__(
        self,
        name: str,
        base_url: str,
        engine: Callable[[], Redis],
        service: Service | None = None,
        app: Starlette | None = None,
    ) -> None:
        self.name, self.base_url, self.engine = name, base_url, engine
        self.service, self.app = service, app
        self._opened: list[Registry] = []

    def connect(self, **options: Any) -> Registry:
        recorder = Recorder()
        client: RegistryClient | AsyncRegistryClient
        if self.name == SYNC:
            transport = RecordingTransport(httpx.HTTPTransport(), recorder)
            client = RegistryClient(self.base_url, transport=transport, **options)
        else:
            inner: httpx.AsyncBaseTransport = (
                httpx.AsyncHTTPTransport() if self.app is None else httpx.ASGITransport(self.app)
            )
            async_transport = AsyncRecordingTransport(inner, recorder)
            client = AsyncRegistryClient(self.base_url, transport=async_transport, **options)
        registry = Registry(client, recorder)
        self._opened.append(registry)
        return registry

    async def evict(self, ref: str) -> None:
        """Delete a ref's record in the engine, as expiry or eviction would."""
        redis = self.engine()
        try:
            assert await redis.delete("tr:local:i:" + ref[3:]) == 1
        finally:
            await redis.aclose()

    async def aclose(self) -> None:
        for registry in self._opened:
            await registry.aclose()


def state(breaker: CircuitBreaker) -> BreakerState:
    """The breaker's state now (a call, so that mypy does not narrow it across awaits)."""
    return breaker.state


def engine_socket(data_dir: Path) -> str:
    """The unix socket of a service's embedded engine, as its config names it."""
    for line in (data_dir / "valkey.conf").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "unixsocket":
            return value.strip('"')
    raise AssertionError(f"no unixsocket in {data_dir / 'valkey.conf'}")


@pytest.fixture(scope="module")
def service(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Service]:
    """`toolref-server serve` as a real process, once for the module."""
    try:
        valkey_server_binary()
    except Exception as exc:
        need(f"no valkey-server binary: {exc}")
    data_dir = tmp_path_factory.mktemp("registry") / "data"
    running = Service(
        data_dir, free_port(), TOOLREF_MAX_BATCH=str(MAX_BATCH), **engine_env(request)
    )
    yield running
    running.stop()


@pytest.fixture(params=[SYNC, ASYNC, IN_PROCESS])
async def setup(request: pytest.FixtureRequest) -> AsyncIterator[Setup]:
    kind: str = request.param
    async with AsyncExitStack() as stack:
        made: Setup
        if kind == IN_PROCESS:
            url: str = request.getfixturevalue("engine_url")
            redis = client_for(url)
            stack.push_async_callback(redis.aclose)
            app = create_app(Settings(redis_url="unused", max_batch=MAX_BATCH), redis=redis)
            await stack.enter_async_context(app.router.lifespan_context(app))
            made = Setup(kind, "http://localhost:8750", lambda: client_for(url), app=app)
        elif ON_CLUSTER:
            running = request.getfixturevalue("service")
            url = request.getfixturevalue("engine_url")
            made = Setup(kind, running.url, lambda: client_for(url), running)
        else:
            running = request.getfixturevalue("service")
            socket = engine_socket(running.data_dir)
            made = Setup(kind, running.url, lambda: Redis(unix_socket_path=socket), running)
        stack.push_async_callback(made.aclose)
        yield made


@pytest.fixture
def token() -> str:
    """Unique per test, carried in every payload the test makes."""
    return uuid.uuid4().hex


# --- payloads ------------------------------------------------------------------------------


BIG_INTS = [2**53, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 10**30, -(10**40)]


def invocation(token: str, label: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": "read_file",
        "args": {"path": f"{token}/{label}.py"},
        "result": f"# {label} {token}\n",
        "isError": False,
        **extra,
    }


def rich(token: str) -> dict[str, Any]:
    """Big integers (beyond 53 and 64 bits), unicode everywhere, nesting, an error result."""
    return {
        "name": "query_db ✓",
        "args": {
            "sql": f"select * from t where tag = '{token}'",
            "ids": BIG_INTS,
            "ratio": 1.5,
            "none": None,
            "flags": [True, False],
            "ключ 🔑": {"deep": [[{"日本語": "値"}]]},
        },
        "result": {
            "rows": [{"id": 2**70 + 1, "name": "Zoë 🌍 日本語\u2028end", "bytes": -(2**64)}],
            "note": f"{token} ☃ \U0001f600",
        },
        "isError": True,
    }


def unknown_ref(token: str, label: str) -> str:
    """A well-formed ref of an invocation nobody registered."""
    return str(digest_of(invocation(token, f"never-{label}")).ref)


def conversation(token: str) -> list[dict[str, Any]]:
    """A small openai-chat conversation with two complete tool calls."""
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": f"read a.py and run echo ({token})"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "read_file",
                        "arguments": json.dumps({"path": f"{token}/a.py"}),
                    },
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {
                        "name": "run",
                        "arguments": json.dumps({"cmd": f"echo ✓ {token}", "n": 2**64 + 7}),
                    },
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": f"print('héllo {token}')\n" * 20},
        {"role": "tool", "tool_call_id": "call_2", "content": f"✓ {2**64 + 7}"},
        {"role": "assistant", "content": "Both done."},
    ]


def conversation_refs(messages: list[dict[str, Any]]) -> dict[str, str]:
    """call id -> the ref of its invocation, computed locally."""
    calls = {c["id"]: c["function"] for c in messages[2]["tool_calls"]}
    results = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    return {
        call_id: str(
            digest_of({"name": f["name"], "args": f["arguments"], "result": results[call_id]}).ref
        )
        for call_id, f in calls.items()
    }


def with_markers(messages: list[dict[str, Any]], refs: dict[str, str]) -> list[dict[str, Any]]:
    """The conversation as optimize should answer it (openai-chat markers, in place)."""
    out = copy.deepcopy(messages)
    for call in out[2]["tool_calls"]:
        call["function"] = {"name": call["function"]["name"], "toolRef": refs[call["id"]]}
    for message in out:
        if message["role"] == "tool":
            del message["content"]
            message["toolRef"] = refs[message["tool_call_id"]]
    return out


# --- the suite, for every setup -------------------------------------------------------------


async def test_capabilities_are_negotiated_once(setup: Setup, token: str) -> None:
    registry = setup.connect()
    assert registry.client.negotiated is None
    assert registry.client.protocol == 1
    held = invocation(token, "a")
    [registered] = await registry.register([held])
    await registry.find_missing([registered.ref])
    await registry.resolve([registered.ref])
    await registry.get(registered.ref)
    optimized = await registry.optimize(conversation(token))
    await registry.hydrate(optimized.messages)
    caps = await registry.capabilities()

    assert len(registry.recorder.to(CAPABILITIES)) == 1
    assert len(registry.recorder.sent) == 7
    assert registry.client.negotiated == caps
    assert registry.client.protocol == 2
    assert caps.protocol.low == 1
    assert caps.protocol.high == 2
    assert caps.limits.max_batch == MAX_BATCH
    assert caps.ref_scheme.prefix == "tr_"
    assert "openai-chat" in caps.formats
    for sent in registry.recorder.sent[1:]:
        assert sent.request.headers[PROTOCOL_HEADER] == "2"
        assert sent.response is not None
        assert sent.response.headers[PROTOCOL_HEADER] == "2"


async def test_register_answers_refs_sizes_and_new_flags_in_order(setup: Setup, token: str) -> None:
    registry = setup.connect()
    a, b = invocation(token, "a"), rich(token)
    first = await registry.register([a, b, a])
    expected = [digest_of(a), digest_of(b), digest_of(a)]
    assert [r.ref for r in first] == [str(d.ref) for d in expected]
    assert [r.size for r in first] == [d.size for d in expected]
    assert [r.new for r in first] == [True, True, False]

    again = await registry.register([b, Invocation.model_validate(a)])
    assert [(r.ref, r.size, r.new) for r in again] == [
        (first[1].ref, first[1].size, False),
        (first[0].ref, first[0].size, False),
    ]


async def test_find_missing_names_only_what_is_not_held(setup: Setup, token: str) -> None:
    registry = setup.connect()
    held = [r.ref for r in await registry.register([invocation(token, "a"), rich(token)])]
    x, y = unknown_ref(token, "x"), unknown_ref(token, "y")
    assert await registry.find_missing([x, held[0], y, held[1]]) == [x, y]
    assert await registry.find_missing(held) == []
    assert await registry.find_missing([]) == []


async def test_resolve_returns_held_invocations_and_lists_missing(setup: Setup, token: str) -> None:
    registry = setup.connect()
    a, b = invocation(token, "a"), rich(token)
    ref_a, ref_b = [r.ref for r in await registry.register([a, b])]
    x = unknown_ref(token, "x")
    resolved = await registry.resolve([ref_b, x, ref_a])
    assert list(resolved.invocations) == [ref_b, ref_a]
    assert resolved.invocations[ref_a].to_wire() == a
    assert resolved.invocations[ref_b].to_wire() == b
    assert resolved.missing == [x]


async def test_get_returns_exactly_what_was_registered(setup: Setup, token: str) -> None:
    registry = setup.connect()
    b = rich(token)
    [registered] = await registry.register([b])
    got = await registry.get(registered.ref)
    assert got == Invocation.model_validate(b)
    assert got.to_wire() == b
    assert got.args["ids"] == BIG_INTS
    assert got.result["rows"][0]["id"] == 2**70 + 1
    assert got.result["rows"][0]["name"] == "Zoë 🌍 日本語\u2028end"
    assert got.is_error is True
    assert got.digest().ref == registered.ref


async def test_an_unknown_ref_is_not_found(setup: Setup, token: str) -> None:
    registry = setup.connect()
    x = unknown_ref(token, "x")
    with pytest.raises(NotFoundError) as raised:
        await registry.get(x)
    assert x in raised.value.detail
    assert state(registry.breaker) is BreakerState.CLOSED  # a 404 is the registry working
    assert await registry.ready()


@pytest.mark.parametrize(
    "bad", ["tr_short", "TR_" + "a" * 26, "tr_" + "1" * 26, "xx_" + "a" * 26, "tr_" + "a" * 27]
)
async def test_a_malformed_ref_is_refused_locally(setup: Setup, bad: str, token: str) -> None:
    registry = setup.connect()
    good = unknown_ref(token, "x")
    with pytest.raises(InvalidRefError):
        await registry.get(bad)
    with pytest.raises(InvalidRefError):
        await registry.find_missing([good, bad])
    with pytest.raises(InvalidRefError):
        await registry.resolve([bad])
    assert registry.recorder.sent == []  # not even capabilities were fetched


@pytest.mark.parametrize("msgpack", [True, False], ids=["msgpack", "json"])
async def test_a_lone_surrogate_is_the_services_422_whatever_the_encoding(
    redis: Redis, msgpack: bool
) -> None:
    """Messages read from valid JSON holding a lone surrogate (`"\\ud800"`): msgpack, whose
    strings are UTF-8, has no form for it, and the client raised `UnicodeEncodeError` (no
    `ToolrefError`) before sending. The request goes as JSON, the surrogate as its escape,
    and the service's 422 names it; nothing is stored."""
    app = create_app(Settings(redis_url="unused"), redis=redis)
    async with app.router.lifespan_context(app):
        registry = AsyncRegistryClient(
            "http://localhost:8750",
            transport=httpx.ASGITransport(app=app),
            retries=0,
            encoding="auto" if msgpack else "json",
        )
        messages = json.loads('[{"role":"user","content":"half \\ud800 of it"}]')
        with pytest.raises(CanonicalizationError, match="surrogate"):
            await registry.optimize(messages)
        await registry.aclose()
    assert await redis.dbsize() == 0


async def test_optimize_and_hydrate_round_trip_a_conversation(setup: Setup, token: str) -> None:
    registry = setup.connect()
    messages = conversation(token)
    refs = conversation_refs(messages)
    optimized = await registry.optimize(messages, "openai-chat")
    assert optimized.format == "openai-chat"
    assert optimized.messages == with_markers(messages, refs)
    assert optimized.tool_references == refs
    assert optimized.stats == {
        "originalBytes": len(dumps_json(messages)),
        "optimizedBytes": len(dumps_json(optimized.messages)),
        "refsUsed": 2,
        "newRefs": 2,
        "cacheHits": 0,
    }
    assert optimized.stats["optimizedBytes"] < optimized.stats["originalBytes"]

    hydrated = await registry.hydrate(optimized.messages)  # format detected
    assert hydrated.format == "openai-chat"
    assert hydrated.messages == messages
    assert dumps_json(hydrated.messages) == dumps_json(messages)  # byte for byte
    assert hydrated.tool_references == refs
    assert hydrated.stats["newRefs"] == 0
    assert hydrated.stats["cacheHits"] == 2
    assert hydrated.stats["refsUsed"] == 2
    assert hydrated.stats["originalBytes"] == len(dumps_json(messages))

    resolved = await registry.resolve(list(refs.values()))
    assert resolved.missing == []
    assert resolved.invocations[refs["call_2"]].result == f"✓ {2**64 + 7}"
    again = await registry.optimize(hydrated.messages)
    assert again.messages == optimized.messages
    assert (again.stats["newRefs"], again.stats["cacheHits"]) == (0, 2)


async def test_batches_beyond_max_batch_are_split_and_answered_in_order(
    setup: Setup, token: str
) -> None:
    registry = setup.connect()
    items = [invocation(token, f"n{i}") for i in range(2 * MAX_BATCH + 20)]
    expected = [str(digest_of(i).ref) for i in items]
    registered = await registry.register(items)
    assert [r.ref for r in registered] == expected
    assert all(r.new for r in registered)
    sizes = [len(s.body()["invocations"]) for s in registry.recorder.to(REGISTER)]
    assert sizes == [MAX_BATCH, MAX_BATCH, 20]

    unknown = [unknown_ref(token, str(i)) for i in range(5)]
    asked = list(expected)
    for n, ref in enumerate(unknown):
        asked.insert(n * 30, ref)  # spread over every batch
    assert await registry.find_missing(asked) == unknown
    assert [len(s.body()["refs"]) for s in registry.recorder.to(FIND_MISSING)] == [50, 50, 25]

    resolved = await registry.resolve(asked)
    assert resolved.missing == unknown
    assert list(resolved.invocations) == expected
    assert [resolved.invocations[r].to_wire() for r in expected] == items
    assert len(registry.recorder.to(RESOLVE)) == 3


async def test_a_ref_repeated_across_batches_is_reported_missing_once(
    setup: Setup, token: str
) -> None:
    registry = setup.connect()
    [held] = await registry.register([invocation(token, "a")])
    x = unknown_ref(token, "x")
    assert await registry.find_missing([x, held.ref] * 10) == [x]  # one batch: reported once
    asked = [x, held.ref] * MAX_BATCH  # two batches, each with both refs
    assert await registry.find_missing(asked) == [x]
    assert (await registry.resolve(asked)).missing == [x]


WIRE_CONFIGS: dict[str, dict[str, Any]] = {
    "msgpack": {},
    "msgpack+zstd": {"compress_threshold": 256},
    "json": {"encoding": "json"},
    "json+zstd": {"encoding": "json", "compress_threshold": 256},
}


async def test_msgpack_json_and_zstd_carry_the_same_answers(setup: Setup, token: str) -> None:
    big = invocation(token, "big", result=f"line of {token} ✓\n" * 100)  # ~4 KB
    items = [rich(token), big]
    messages = conversation(token)
    outcomes: dict[str, Any] = {}
    for config, options in WIRE_CONFIGS.items():
        registry = setup.connect(**options)
        caps = await registry.capabilities()
        assert MSGPACK_TYPE in caps.encodings
        assert "zstd" in caps.compressors
        registered = await registry.register(items)
        refs = [r.ref for r in registered]
        x = unknown_ref(token, "x")
        missing = await registry.find_missing([*refs, x])
        resolved = await registry.resolve([*refs, x])
        got = await registry.get(refs[0])
        optimized = await registry.optimize(messages)
        hydrated = await registry.hydrate(optimized.messages)
        outcomes[config] = (
            [(r.ref, r.size) for r in registered],
            missing,
            {ref: inv.to_wire() for ref, inv in resolved.invocations.items()},
            resolved.missing,
            got.to_wire(),
            optimized.messages,
            optimized.tool_references,
            hydrated.messages,
            hydrated.tool_references,
        )
        assert resolved.invocations[refs[0]].to_wire() == items[0]
        assert got.to_wire() == items[0]
        assert hydrated.messages == messages

        msgpack = not config.startswith("json")
        threshold: int = options.get("compress_threshold", 16_384)
        posts = [s for s in registry.recorder.sent if s.request.method == "POST"]
        assert len(posts) == 5
        for sent in registry.recorder.sent[1:]:  # after capabilities, fetched as JSON
            assert sent.response is not None
            accept = sent.request.headers["accept"]
            answered = sent.response.headers["content-type"]
            assert (MSGPACK_TYPE in accept) is msgpack, (config, sent.path, accept)
            assert answered == (MSGPACK_TYPE if msgpack else JSON_TYPE), (config, sent.path)
        for sent in posts:
            assert sent.request.headers["content-type"] == (MSGPACK_TYPE if msgpack else JSON_TYPE)
            raw = sent.request.content
            zstd = sent.request.headers.get("content-encoding") == "zstd"
            plain = zstandard.ZstdDecompressor().decompress(raw) if zstd else raw
            assert zstd is (len(plain) >= threshold), (config, sent.path, len(plain))
            if zstd:
                assert len(raw) < len(plain)
        compressed = [s.path for s in posts if "content-encoding" in s.request.headers]
        if threshold < 16_384:
            assert REGISTER in compressed
            assert FIND_MISSING not in compressed  # small bodies go as they are
        else:
            assert compressed == []
    first, *others = outcomes.values()
    for config, outcome in zip(list(outcomes)[1:], others, strict=True):
        assert outcome == first, config


async def test_an_evicted_ref_is_reported_missing(setup: Setup, token: str) -> None:
    registry = setup.connect()
    a, b = invocation(token, "a"), rich(token)
    ref_a, ref_b = [r.ref for r in await registry.register([a, b])]
    assert await registry.find_missing([ref_a, ref_b]) == []
    await setup.evict(ref_a)

    assert await registry.find_missing([ref_a, ref_b]) == [ref_a]
    resolved = await registry.resolve([ref_a, ref_b])
    assert resolved.missing == [ref_a]
    assert list(resolved.invocations) == [ref_b]
    assert resolved.invocations[ref_b].to_wire() == b
    with pytest.raises(NotFoundError):
        await registry.get(ref_a)

    # A conversation whose payload was evicted: hydrate names it, registering it heals it.
    messages = conversation(token)
    optimized = await registry.optimize(messages)
    evicted = optimized.tool_references["call_1"]
    await setup.evict(evicted)
    with pytest.raises(MissingRefsError) as raised:
        await registry.hydrate(optimized.messages)
    assert raised.value.missing_refs == [evicted]
    assert (await registry.optimize(messages)).stats["newRefs"] == 1
    assert (await registry.hydrate(optimized.messages)).messages == messages
    assert await registry.register([a]) == [
        RegisteredRef(ref=ref_a, size=digest_of(a).size, new=True)
    ]


# --- socket setups only: the registry goes down and comes back -------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("setup", [SYNC, ASYNC], indirect=True)
async def test_registry_down_opens_the_breaker_and_recovery_closes_it(
    setup: Setup, token: str
) -> None:
    assert setup.service is not None
    breaker = CircuitBreaker(failure_threshold=2, reset_timeout=0.5)
    registry = setup.connect(retries=1, backoff=0.01, breaker=breaker)
    before = invocation(token, "before")
    [held] = await registry.register([before])
    assert await registry.ready()
    sent = registry.recorder.sent

    assert setup.service.interrupt() == 0
    try:
        sent.clear()
        with pytest.raises(RegistryUnreachableError) as raised:
            await registry.find_missing([held.ref])
        assert type(raised.value) is RegistryUnreachableError  # tried, not skipped
        assert "2 attempt(s)" in raised.value.detail
        assert [s.path for s in sent] == [FIND_MISSING, FIND_MISSING]
        assert all(s.response is None for s in sent)
        assert state(breaker) is BreakerState.OPEN

        sent.clear()
        with pytest.raises(CircuitOpenError):
            await registry.resolve([held.ref])
        with pytest.raises(CircuitOpenError):
            await registry.register([invocation(token, "during")])
        assert not await registry.ready()
        assert sent == []  # the network was not touched

        # Once reset_timeout has passed one probe goes out; it fails and the breaker reopens.
        await asyncio.sleep(breaker.retry_in() + 0.01)
        assert state(breaker) is BreakerState.HALF_OPEN
        assert not await registry.ready()
        assert [s.path for s in sent] == ["/readyz"]
        assert state(breaker) is BreakerState.OPEN
    finally:
        setup.service.restart()  # same data folder, same port

    sent.clear()
    await asyncio.sleep(breaker.retry_in() + 0.01)
    assert state(breaker) is BreakerState.HALF_OPEN
    resolved = await registry.resolve([held.ref])  # the probe
    assert [s.path for s in sent] == [RESOLVE]
    assert state(breaker) is BreakerState.CLOSED
    assert resolved.missing == []
    assert resolved.invocations[held.ref].to_wire() == before  # it persisted
    assert await registry.ready()
    during = invocation(token, "during")
    assert [r.new for r in await registry.register([during, before])] == [True, False]
    assert await registry.find_missing([held.ref]) == []
