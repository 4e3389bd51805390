"""Tenants, agents and conversations kept apart in the edits' newest state: recipes and
pieces (the store and the process's `RecipeCache`), kept answers (the next edit's
dictionary), the writes under way a read waits for (`storage.under_way`), and the relay's
editors, one per agent credential, over one channel.

The service runs in process on the test engine with two tenants' keys; a relay per tenant
(or one relay carrying two agents) before it; a provider that streams each request a reply
of its own and records what it received (the only fake: what is outside the machine).
Two tenants sending the same request make the same recipe ref (a recipe is named by its
content), so every in-process map keyed by the ref alone would mix them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import zstandard
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.conftest import all_keys, snapshot
from tests.integration.test_answer_dictionary import replies, result, written_back
from tests.support.fake_provider import wire as provider_wire
from tests.support.servers import serve, serve_all
from tests.unit.edits.agents import HEADERS
from toolref.edits import wire
from toolref.edits.edit import Keep, Named, Op
from toolref.edits.recipe import PIECE_MIN, entry_of, piece_of
from toolref.wire.headers import HISTORY_HEADER
from toolref_relay import Relay, RelayConfig
from toolref_server.app import create_app
from toolref_server.settings import Settings
from toolref_server.storage import keys
from toolref_server.storage import store as store_module
from toolref_server.storage.under_way import RECIPE

from .edit_client import EditClient, encoded

pytestmark = pytest.mark.engine

KEY_A, KEY_B = "tenant-a-key-of-the-edit-tests", "tenant-b-key-of-the-edit-tests"
API_KEYS = ",".join(
    f"{tenant}={hashlib.sha256(key.encode()).hexdigest()}"
    for tenant, key in (("a", KEY_A), ("b", KEY_B))
)
MODEL = "scripted-1"
PATH = "/llm/anthropic/v1/messages"
_GUARD = 30.0  # seconds: a failure guard only


@dataclass
class Provider:
    """Streams each request the next of `replies` (so no two requests get the same
    answer), recording the raw headers and the body of each."""

    replies: list[provider_wire.Reply]
    seen: list[tuple[list[tuple[bytes, bytes]], bytes]] = field(default_factory=list)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/{path:path}", self._answer, methods=["POST"])])

    async def _answer(self, request: Request) -> Response:
        self.seen.append((list(request.headers.raw), await request.body()))
        reply = self.replies[len(self.seen) - 1]
        frames = provider_wire.frames("messages", reply, MODEL, 10, usage=False)

        async def events() -> AsyncIterator[bytes]:
            for frame in frames:
                yield frame

        return StreamingResponse(events(), media_type="text/event-stream")

    def bodies(self) -> list[bytes]:
        return [body for _, body in self.seen]


@dataclass
class Agent:
    """One conversation of an agent through a relay: each turn the conversation so far,
    the answer it read written back."""

    url: str
    headers: list[tuple[str, str]] = field(default_factory=lambda: list(HEADERS))
    messages: list[dict[str, Any]] = field(
        default_factory=lambda: [{"role": "user", "content": "Build it. " * 60}]
    )
    sent: list[bytes] = field(default_factory=list)
    turns: int = 0

    def body(self) -> bytes:
        value = {"model": MODEL, "max_tokens": 512, "stream": True, "messages": self.messages}
        return json.dumps(value).encode()

    async def turn(self, http: httpx.AsyncClient, provider: Provider) -> httpx.Response:
        data = self.body()
        self.sent.append(data)
        answer = await http.post(self.url + PATH, content=data, headers=self.headers)
        assert answer.status_code == 200, answer.text
        reply = provider.replies[len(provider.seen) - 1]
        n = self.turns
        self.turns += 1
        back = written_back("messages", reply)
        self.messages = [*self.messages, back, result("messages", reply, n)]
        return answer


@asynccontextmanager
async def gateway(redis: Redis, provider: Provider, **options: Any) -> AsyncIterator[Any]:
    """The service with tenants a and b, before `provider`; yields (app, url)."""
    async with serve_all(provider.app()) as [provider_url]:
        config = Settings(
            redis_url="unused",
            upstreams=f"anthropic={provider_url}",
            api_keys=API_KEYS,
            **options,
        )
        app = create_app(config, redis=redis)
        async with serve_all(app) as [url]:
            yield app, url


def _count(app: Any, slug: str) -> float:
    return float(app.state.services.metrics.edits.labels(slug)._value.get())


def _tenant(key: bytes) -> str:
    found = keys.parse(key.decode())
    assert found is not None, key
    return found.tenant


def _kind(key: bytes) -> str:
    found = keys.parse(key.decode())
    assert found is not None, key
    return found.kind


async def _settled(app: Any) -> None:
    under_way = app.state.services.recipes.under_way
    async with asyncio.timeout(_GUARD):
        while tasks := set(under_way._tasks.values()):
            await asyncio.wait(tasks)


@contextmanager
def tenant_writes_held(
    monkeypatch: pytest.MonkeyPatch, tenant: str
) -> Iterator[tuple[asyncio.Event, list[str]]]:
    """The store's writes for `tenant` wait for the event (`waiting` lists each)."""
    release = asyncio.Event()
    waiting: list[str] = []
    put = store_module.Store.put

    async def held(self: Any, whose: str, action: str, *args: Any, **kwargs: Any) -> Any:
        if whose == tenant:
            waiting.append(action)
            await release.wait()
        return await put(self, whose, action, *args, **kwargs)

    monkeypatch.setattr(store_module.Store, "put", held)
    yield release, waiting


@pytest.mark.parametrize("cached", [True, False])
async def test_two_tenants_with_the_same_conversation_share_nothing(
    redis: Redis, cached: bool
) -> None:
    """Tenants a and b start the same conversation through their own relays (the same
    first request: the same recipe ref), each reading other answers. Every turn of each is
    an edit against its own recipe and answer, with no miss and no resend, whether read
    from the process's caches or from the store; every key is under one tenant, and each
    tenant's kept answer of the shared ref is the one its own provider request streamed."""
    provider = Provider(replies(8, 21))
    sizes = {} if cached else {"edit_cache_bytes": 0, "answer_cache_bytes": 0}
    async with gateway(redis, provider, **sizes) as (app, url):
        relay_a = Relay(RelayConfig(url, key=KEY_A), report=lambda _: None)
        relay_b = Relay(RelayConfig(url, key=KEY_B), report=lambda _: None)
        async with serve(relay_a) as url_a, serve(relay_b) as url_b:
            a, b = Agent(url_a), Agent(url_b)
            async with httpx.AsyncClient(timeout=_GUARD) as http:
                for _ in range(4):
                    await a.turn(http, provider)
                    await b.turn(http, provider)
            await _settled(app)
        assert _count(app, "missing-history") == 0
        assert _count(app, "dictionary-mismatch") == 0
        assert _count(app, "missing-pieces") == 0
    assert a.sent[0] == b.sent[0]  # the same first request
    interleaved = [body for pair in zip(a.sent, b.sent, strict=True) for body in pair]
    assert provider.bodies() == interleaved  # one request each, byte for byte
    found = await all_keys(redis)
    assert {_tenant(k) for k in found} == {"a", "b"}
    # The last turn's answer of each is kept, under its own tenant: different bytes.
    kept: dict[str, bytes] = {}
    for key in found:
        if _kind(key) == keys.ANSWER:
            value = await redis.get(key)
            assert isinstance(value, bytes)
            kept[_tenant(key)] = zstandard.ZstdDecompressor().decompress(value)
    assert set(kept) == {"a", "b"}
    assert kept["a"] != kept["b"]
    turns = len(provider.seen)  # each its own last request's answer (its ids)
    assert f"_{turns - 2:03d}".encode() in kept["a"]
    assert f"_{turns - 1:03d}".encode() in kept["b"]


async def _conversation_of_b(url: str) -> EditClient:
    """Tenant b's two turns sent as edits (pieces of `PIECE_MIN` bytes and more)."""
    sender = EditClient(
        httpx.AsyncClient(base_url=url, timeout=_GUARD), PATH, extra={"Toolref-Key": KEY_B}
    )
    large = [{"role": "user", "content": f"{n} secret of b " + "p" * PIECE_MIN} for n in range(2)]
    messages: list[dict[str, Any]] = list(large)
    for n in range(2):
        messages = [*messages, {"role": "user", "content": f"turn {n} " * 40}]
        body = json.dumps({"model": MODEL, "max_tokens": 9, "messages": messages}).encode()
        assert (await sender.send(body)).status_code == 200
    return sender


async def _problem(http: httpx.AsyncClient, data: bytes, secrets: Any) -> tuple[int, Any]:
    headers = [("content-type", wire.MEDIA_TYPE), ("Toolref-Key", KEY_A), *secrets]
    answer = await http.post(PATH, content=data, headers=headers)
    assert HISTORY_HEADER not in answer.headers
    return answer.status_code, answer.json()


@pytest.mark.parametrize("cached", [True, False])
async def test_another_tenants_recipe_and_pieces_are_exactly_unknown(
    redis: Redis, cached: bool
) -> None:
    """Tenant a naming tenant b's recipe as its base, or b's pieces, is answered exactly
    as for a recipe or pieces never kept (the same status and problem, but the names): no
    oracle of what b holds, nothing built from b's bytes, nothing stored or changed."""
    provider = Provider(replies(8, 22))
    sizes = {} if cached else {"edit_cache_bytes": 0, "answer_cache_bytes": 0}
    async with gateway(redis, provider, **sizes) as (app, url):
        b = await _conversation_of_b(url)
        await _settled(app)
        base = b.last
        assert base is not None
        held = sorted(b.held)
        assert len(held) == 2
        before, forwarded = await snapshot(redis), len(provider.seen)
        body = b.cut(json.dumps({"model": MODEL, "messages": ["x" * 300]}).encode())
        strangers = [piece_of(entry_of(b"s" * PIECE_MIN + bytes([i]))) for i in range(2)]
        never = b.cut(json.dumps({"model": MODEL, "messages": ["never kept"]}).encode())
        async with httpx.AsyncClient(base_url=url, timeout=_GUARD) as http:
            # b's base, and a base never kept
            data, _ = encoded(base, body, set())
            theirs = await _problem(http, data, base.secrets)
            data, _ = encoded(never, body, set())
            unknown = await _problem(http, data, never.secrets)
            # b's pieces named (on no base), and pieces never kept
            ops: list[Op] = [Named(p) for p in held]
            theirs_pieces = await _problem(http, wire.encode(None, ops, b""), [])
            ops = [Named(p) for p in strangers]
            unknown_pieces = await _problem(http, wire.encode(None, ops, b""), [])
            # b's base kept whole, as b's next turn would send it
            data = wire.encode(base.ref, [Keep(0, len(base.entries))], None)
            theirs_whole = await _problem(http, data, base.secrets)
        assert theirs[0] == unknown[0] == theirs_whole[0] == 409
        assert json.dumps(theirs).replace(base.ref, "REF") == json.dumps(unknown).replace(
            never.ref, "REF"
        )
        assert theirs_pieces[0] == unknown_pieces[0] == 409
        assert {k: v for k, v in theirs_pieces[1].items() if k != "missingPieces"} == {
            k: v for k, v in unknown_pieces[1].items() if k != "missingPieces"
        }
        assert len(theirs_pieces[1]["missingPieces"]) == 2
        await _settled(app)
        assert await snapshot(redis) == before  # nothing stored, extended or deleted
        assert len(provider.seen) == forwarded  # nothing forwarded
        await b.http.aclose()


async def test_one_tenants_writes_under_way_are_waited_for_by_it_alone(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tenant b's keep of a recipe still under way (its writes held back) makes no read of
    tenant a wait, though a's recipe has the same ref: a's next turn, reading its base
    from the store (no cache), is served while b's writes are still held."""
    provider = Provider(replies(8, 23))
    sizes = {"edit_cache_bytes": 0, "answer_cache_bytes": 0}
    async with gateway(redis, provider, **sizes) as (app, url):
        relay_a = Relay(RelayConfig(url, key=KEY_A), report=lambda _: None)
        relay_b = Relay(RelayConfig(url, key=KEY_B), report=lambda _: None)
        async with serve(relay_a) as url_a, serve(relay_b) as url_b:
            a, b = Agent(url_a), Agent(url_b)
            async with httpx.AsyncClient(timeout=_GUARD) as http:
                await a.turn(http, provider)
                await _settled(app)
                with tenant_writes_held(monkeypatch, "b") as (release, waiting):
                    await b.turn(http, provider)  # a channel turn: ends before its keeps
                    assert waiting
                    under_way = app.state.services.recipes.under_way._tasks
                    assert any(what[:2] == (RECIPE, "b") for what in under_way)
                    second = await asyncio.wait_for(a.turn(http, provider), _GUARD)
                    assert second.status_code == 200
                    release.set()
                await _settled(app)
        assert _count(app, "missing-history") == 0
        assert _count(app, "dictionary-mismatch") == 0
    assert a.sent[0] == b.sent[0]
    assert provider.bodies() == [a.sent[0], b.sent[0], a.sent[1]]


async def test_another_tenants_writes_under_way_do_not_hold_a_channel_turns_end(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A channel's turn ends its answer before its writes, unless its tenant has a
    quarter of its requests in flight (TOOLREF_GATEWAY_TENANT_REQUESTS_IN_FLIGHT) in writes
    under way. The count was the process's: another tenant's writes (here, tenant a's,
    never ending) held every tenant's answers back until their own writes were stored."""
    provider = Provider(replies(4, 24))
    async with gateway(redis, provider, gateway_tenant_requests_in_flight=12) as (app, url):
        never = asyncio.Event()
        under_way = app.state.services.recipes.under_way
        planted = [asyncio.create_task(never.wait()) for _ in range(3)]  # a quarter of 12
        for n, task in enumerate(planted):
            under_way.add((RECIPE, "a", f"tb_{n}"), task)
        relay_b = Relay(RelayConfig(url, key=KEY_B), report=lambda _: None)
        async with serve(relay_b) as url_b:
            b = Agent(url_b)
            async with httpx.AsyncClient(timeout=_GUARD) as http:
                await b.turn(http, provider)
                with tenant_writes_held(monkeypatch, "b") as (release, waiting):
                    answered = await asyncio.wait_for(b.turn(http, provider), _GUARD)
                    assert answered.status_code == 200  # whole, its writes still held
                    assert waiting
                    release.set()
            never.set()
            await _settled(app)
    assert provider.bodies() == b.sent


async def test_two_agents_through_one_relay_keep_their_own_editors_and_credentials(
    redis: Redis,
) -> None:
    """One relay (one tenant) carries two agents with their own provider keys over its
    one channel, the same conversation started by both (the same recipe ref at the
    gateway, where the recipe is the tenant's). Each request reaches the provider with its
    own agent's key and body, byte for byte; the relay holds an editor per agent."""
    provider = Provider(replies(8, 25))
    async with gateway(redis, provider) as (app, url):
        relay = Relay(RelayConfig(url, key=KEY_A), report=lambda _: None)
        async with serve(relay) as relay_url:
            a, b = Agent(relay_url), Agent(relay_url)
            b.headers = [
                (name, "sk-ant-api03-" + "m" * 80 if name == "x-api-key" else value)
                for name, value in HEADERS
            ]
            async with httpx.AsyncClient(timeout=_GUARD) as http:
                for _ in range(4):
                    await a.turn(http, provider)
                    await b.turn(http, provider)
            await _settled(app)
            assert len(relay.clients) == 2
    assert a.sent[0] == b.sent[0]
    interleaved = [body for pair in zip(a.sent, b.sent, strict=True) for body in pair]
    assert provider.bodies()[-8:] == interleaved
    own = dict(a.headers)["x-api-key"].encode(), dict(b.headers)["x-api-key"].encode()
    keys_seen = [dict(headers)[b"x-api-key"] for headers, _ in provider.seen]
    assert keys_seen[-8:] == [own[n % 2] for n in range(8)]
