"""Per-tenant quotas: requests per second and stored bytes, both 429 `quota-exceeded`.

The stored-bytes counting runs on the real engine (and, in the cluster pass, on a cluster,
where reads are a GET per key and counting takes its own round trip). Its windows are driven
by a clock offset from real time, so a key's remaining lifetime in the engine and the quota's
idea of "now" stay consistent. The request-rate flood runs against a real process.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import random
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis, RedisCluster

from tests.service.test_recipes import age, pieces_of
from tests.service.test_recipes import keep as keep_recipe
from tests.service.test_recipes import request as recipe_request
from tests.support.processes import Service
from toolref.edits.wire import MEDIA_TYPE
from toolref.sending.editor import Editor
from toolref.wire.canonical import Digest, canonical_json
from toolref.wire.errors import (
    QuotaExceededError,
    ServiceUnavailableError,
    StoreUnavailableError,
    error_from_problem,
)
from toolref.wire.models import Invocation
from toolref_server.app import create_app
from toolref_server.settings import Settings
from toolref_server.storage import keys, record
from toolref_server.storage.quotas import StoredBytes
from toolref_server.storage.recipe_cache import RecipeCache
from toolref_server.storage.recipes import Recipes
from toolref_server.storage.store import NewRecord, Put, Store

from ..conftest import all_keys, snapshot
from ..sockets import connect, read_reply
from .wire import Attack, cost, post, start_service

pytestmark = pytest.mark.engine

KEYS = {"acme": "trk_acme_key", "globex": "trk_globex_key"}
API_KEYS = ",".join(f"{t}={hashlib.sha256(k.encode()).hexdigest()}" for t, k in KEYS.items())


def bearer(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[tenant]}", "Toolref-Protocol": "2"}


@asynccontextmanager
async def clients_for(redis: Redis, **settings: Any) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    """One app (one set of buckets), a client per tenant, and one without a key."""
    app = create_app(Settings(redis_url="unused", api_keys=API_KEYS, **settings), redis=redis)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        made = {
            name: httpx.AsyncClient(transport=transport, base_url="http://t", headers=headers)
            for name, headers in {
                "acme": bearer("acme"),
                "globex": bearer("globex"),
                "anonymous": {"Toolref-Protocol": "2"},
            }.items()
        }
        try:
            yield made
        finally:
            for client in made.values():
                await client.aclose()


def assert_quota(response: httpx.Response, quota: str, limit: float) -> QuotaExceededError:
    assert response.status_code == 429, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == "urn:toolref:problem:quota-exceeded"
    assert problem["quota"] == quota
    assert problem["limit"] == limit
    assert response.headers["retry-after"].isdigit()
    assert int(response.headers["retry-after"]) >= 1
    error = error_from_problem(problem, 429, response.headers)
    # The SDK reads it back as its own error, one it treats like a 503: full payloads.
    assert isinstance(error, QuotaExceededError)
    assert isinstance(error, ServiceUnavailableError)
    return error


def incompressible(seed: int, size: int) -> str:
    """`size` characters zstd cannot shrink much (records are stored compressed)."""
    return base64.b64encode(random.Random(seed).randbytes(size))[:size].decode()


def invocation(seed: int, size: int = 8_000) -> dict[str, Any]:
    return {"name": "read_file", "args": {"n": seed}, "result": incompressible(seed, size)}


# --- requests per second -------------------------------------------------------------------


async def test_a_tenant_past_its_rate_gets_429_and_others_do_not(redis: Redis) -> None:
    async with clients_for(redis, tenant_requests_per_second=5) as clients:
        acme, globex = clients["acme"], clients["globex"]
        refs = {"refs": ["tr_aaaaaaaaaaaaaaaaaaaaaaaaaa"]}
        answers = [await acme.post("/v1/invocations:findMissing", json=refs) for _ in range(6)]
        assert [a.status_code for a in answers[:5]] == [200] * 5  # a second's worth
        error = assert_quota(answers[5], "requestsPerSecond", 5)
        assert "TOOLREF_TENANT_REQUESTS_PER_SECOND" in error.detail
        # Another tenant has its own bucket; a request without a key is 401, not 429; the
        # endpoints without a tenant are not counted.
        assert (await globex.post("/v1/invocations:findMissing", json=refs)).status_code == 200
        assert (await clients["anonymous"].get("/v1/invocations/x")).status_code == 401
        for _ in range(10):
            assert (await acme.get("/v1/capabilities")).status_code == 200
        limits = (await acme.get("/v1/capabilities")).json()["limits"]
        assert limits["requestsPerSecond"] == 5  # what a client needs to pace itself
        assert limits["storedBytes"] is None  # no quota
        assert limits["keepAliveSeconds"] == 5
        await asyncio.sleep(error.retry_after)  # Retry-After says when a token is back
        assert (await acme.post("/v1/invocations:findMissing", json=refs)).status_code == 200


@pytest.fixture(scope="module")
def service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    running = start_service(
        request,
        tmp_path_factory.mktemp("quotas") / "data",
        TOOLREF_API_KEYS=API_KEYS,
        TOOLREF_TENANT_REQUESTS_PER_SECOND="20",
    )
    yield running
    running.stop()


def findmissing(tenant: str) -> bytes:
    return post(
        "/v1/invocations:findMissing",
        b'{"refs": []}',
        {"Authorization": f"Bearer {KEYS[tenant]}"},
    )


@pytest.mark.slow
def test_a_tenants_flood_costs_another_tenant_little(service: Service) -> None:
    """acme sends requests back to back from 4 threads, far past its 20 per second; they
    are refused at once, and globex's small requests (measured as in every attack test;
    its own rate is not reached) stay prompt."""

    def flood(attack: Attack) -> None:
        with connect(service) as sock:
            attack.count()
            for _ in range(50):
                sock.sendall(findmissing("acme").replace(b"Connection: close\r\n", b""))
                reply = read_reply(sock)
                assert reply is not None
                attack.answer(reply.status)

    globex = {"Authorization": f"Bearer {KEYS['globex']}"}
    attack = Attack(flood)
    ratio = cost(service, attack, "acme's request flood", 25, globex)
    assert attack.refused > 0.8 * attack.answered, (attack.refused, attack.answered)
    print(f"acme: {attack.refused} of {attack.answered} refused; globex {ratio:.1f}x")


# --- stored bytes ----------------------------------------------------------------------------

LIMIT = 50_000


async def test_writes_past_the_stored_bytes_quota_are_refused(redis: Redis) -> None:
    async with clients_for(redis, tenant_max_bytes=LIMIT) as clients:
        acme, globex = clients["acme"], clients["globex"]
        limits = (await acme.get("/v1/capabilities")).json()["limits"]
        assert limits["storedBytes"] == LIMIT
        registered: list[str] = []
        refusal = None
        for seed in range(20):
            answer = await acme.post("/v1/invocations", json={"invocations": [invocation(seed)]})
            if answer.status_code != 200:
                refusal = answer
                break
            registered.append(answer.json()["refs"][0]["ref"])
        assert refusal is not None, "never refused"
        error = assert_quota(refusal, "storedBytes", LIMIT)
        assert "TOOLREF_TENANT_MAX_BYTES" in error.detail
        stored = await stored_bytes(redis, "acme")
        counted = await counted_bytes(redis, "acme")
        # Never past the quota; refused only when the next record would not fit; the
        # count is never below what is stored.
        assert stored <= LIMIT
        assert stored + 8_000 > LIMIT - 8_000
        assert stored <= counted <= 2 * stored
        # A refused write writes nothing; reads go on; other tenants are not affected.
        before = await snapshot(redis)
        again = await acme.post("/v1/invocations", json={"invocations": [invocation(99)]})
        assert again.status_code == 429
        assert await snapshot(redis) == before
        resolved = await acme.post("/v1/invocations:resolve", json={"refs": registered})
        assert resolved.status_code == 200
        assert resolved.json()["missing"] == []
        other = await globex.post("/v1/invocations", json={"invocations": [invocation(99)]})
        assert other.status_code == 200
        # Registering what is held already adds nothing in the same window.
        held = await acme.post("/v1/invocations", json={"invocations": [invocation(0)]})
        assert held.status_code == 200
        assert held.json()["refs"][0]["new"] is False


async def test_an_invocation_named_twice_in_a_batch_counts_once(redis: Redis) -> None:
    """Found in review: a batch naming one invocation 50 times counted it 50 times against
    the stored-bytes quota (one record stored). Each ref counts once; the answer still
    lists every item, new the first time only."""
    async with clients_for(redis, tenant_max_bytes=LIMIT) as clients:
        acme = clients["acme"]
        answer = await acme.post("/v1/invocations", json={"invocations": [invocation(1)] * 50})
        assert answer.status_code == 200, answer.text
        refs = answer.json()["refs"]
        assert len(refs) == 50
        assert [r["new"] for r in refs] == [True] + [False] * 49
        assert await counted_bytes(redis, "acme") == await stored_bytes(redis, "acme", "i")


async def stored_bytes(redis: Redis, tenant: str, kind: str = "") -> int:
    """What the tenant keeps in the engine, as stored (every key but its quota counters);
    `kind`: only keys of that kind (`s` summaries, `i` records...)."""
    keys = [k for k in await all_keys(redis) if k.startswith(f"tr:{tenant}:{kind}".encode())]
    return sum([await redis.strlen(k) for k in keys if b":q:" not in k])


async def counted_bytes(redis: Redis, tenant: str) -> int:
    keys = [k for k in await all_keys(redis) if k.startswith(f"tr:{tenant}:q:".encode())]
    return sum([int(await redis.get(k) or 0) for k in keys])


class Clock:
    """Real time plus an offset the test moves: windows change when the test says, and
    only then. It starts in the middle of a window (of `TTL` seconds): started on real time,
    a test that crossed a window's end on its own counted every key twice (seen once in a
    loaded run)."""

    def __init__(self, ttl: int = 600) -> None:
        self.offset = ttl / 2 - time.time() % ttl

    def __call__(self) -> float:
        return time.time() + self.offset

    def to_next_window(self, ttl: int) -> None:
        now = self()
        # `MARGIN` into the next window: a key read twice just after the jump must not look
        # read before the window began when the engine answered the second read a little
        # later than the first (seen under load: counted twice at exactly the start).
        self.offset += ttl - now % ttl + MARGIN


TTL = 600
MARGIN = 0.1  # seconds into a window the test clock jumps to
USED_BEFORE = 0.3  # seconds a key is left unused before the jump: longer than MARGIN


def new_record(seed: int, size: int = 4_000) -> NewRecord:
    model = Invocation.model_validate(invocation(seed, size))
    digest = Digest.of(canonical_json(model.canonical_object()))
    data = record.encode(
        model.name,
        is_error=False,
        payload=record.payload_of(model.to_wire()),
        digest=digest.sha256,
        size=digest.size,
        compress_threshold=512,
    )
    return NewRecord(digest.ref, digest.sha256, data)


async def test_each_key_counts_once_per_window_and_old_windows_free_room(redis: Redis) -> None:
    clock = Clock(TTL)
    quota = StoredBytes(1_000_000, TTL, clock=clock)
    store = Store(redis, TTL, quota=quota)
    window = quota.counters("t", clock())[0]
    records = [new_record(seed) for seed in range(3)]
    size = sum(len(r.data) for r in records)
    refs = [r.ref for r in records]

    await store.register("t", records)
    assert await counted_bytes(redis, "t") == size
    # Used again in the same window (register, resolve, findMissing): not counted again.
    await store.register("t", records)
    await store.fetch("t", refs)
    await store.touch("t", refs)
    assert await counted_bytes(redis, "t") == size

    await asyncio.sleep(USED_BEFORE)
    clock.to_next_window(TTL)
    assert quota.counters("t", clock())[0] != window
    await store.fetch("t", refs)  # kept alive into the new window: counted there
    await store.fetch("t", refs)
    assert int(await redis.get(quota.counters("t", clock())[0]) or 0) == size
    assert await counted_bytes(redis, "t") == 2 * size  # both windows: at most twice

    await asyncio.sleep(USED_BEFORE)
    clock.to_next_window(TTL)
    await store.touch("t", refs[:1])  # findMissing counts too
    assert int(await redis.get(quota.counters("t", clock())[0]) or 0) == len(records[0].data)

    # Two windows without a use: nothing counted any more, whatever was written before.
    clock.to_next_window(TTL)
    clock.to_next_window(TTL)
    current, previous = quota.counters("t", clock())
    assert not await redis.exists(current, previous)


async def test_recipes_count_and_are_refused_past_the_quota(redis: Redis) -> None:
    """Edited requests kept for a tenant (`POST /v1/edits:apply`: nodes, chunks, pieces)
    count toward its stored bytes: an edit whose recipe would not fit is refused 429 and
    writes nothing; another tenant is not affected."""
    async with clients_for(redis, tenant_max_bytes=LIMIT) as clients:
        editor = Editor()
        messages: list[dict[str, str]] = []
        refusal = None
        for turn in range(20):
            messages.append({"role": "user", "content": incompressible(turn, 8_000)})
            body = json.dumps({"model": "m", "messages": messages}).encode()
            edit = editor.prepare([("content-type", "application/json")], body, "messages")
            assert edit is not None
            before = await snapshot(redis)
            answer = await clients["acme"].post(
                "/v1/edits:apply", content=edit.body, headers={"Content-Type": MEDIA_TYPE}
            )
            if answer.status_code != 200:
                refusal = answer
                break
            assert editor.confirm(edit, answer.headers["Toolref-History"])
        assert refusal is not None, "never refused"
        assert turn > 2  # a few turns fit
        error = assert_quota(refusal, "storedBytes", LIMIT)
        assert "TOOLREF_TENANT_MAX_BYTES" in error.detail
        assert await snapshot(redis) == before  # the refused edit wrote nothing
        stored = await stored_bytes(redis, "acme")
        assert 0 < stored <= LIMIT
        assert stored <= await counted_bytes(redis, "acme")
        small = json.dumps({"model": "m", "messages": messages[:2]}).encode()
        first = Editor().prepare([("content-type", "application/json")], small, "messages")
        assert first is not None
        other = await clients["globex"].post(
            "/v1/edits:apply", content=first.body, headers={"Content-Type": MEDIA_TYPE}
        )
        assert other.status_code == 200, other.text


async def test_a_recipe_kept_alive_counts_in_every_window_it_is_kept_in(redis: Redis) -> None:
    """Keeping a recipe extends what it needs (its group's nodes, chunks and pieces: EXPIRE
    GT) without writing them. Found: those extensions were never counted, so a conversation
    kept going window after window held its pieces in the store while the two counters the
    quota reads no longer held them (a tenant at its quota could write as much again each
    window). Now an extension counts like a read: once per window, never refused."""
    clock = Clock(TTL)
    quota = StoredBytes(10_000_000, TTL, clock=clock)
    store = Store(redis, TTL, quota=quota)
    recipes = Recipes(store, RecipeCache(0), refresh_seconds=1, clock=clock)
    held = await keep_recipe(recipes, recipe_request(4), None)
    for turns in (5, 6):  # each turn keeps every entry before it, in the next window
        await asyncio.sleep(USED_BEFORE)
        clock.to_next_window(TTL)
        held = await keep_recipe(recipes, recipe_request(turns), held)
    current, previous = quota.counters("t", clock())
    counted = int(await redis.get(current) or 0) + int(await redis.get(previous) or 0)
    assert pieces_of(held)  # pieces kept by reference only, since the first turn
    assert 0 < await stored_bytes(redis, "t") <= counted


async def test_a_conversation_counts_its_groups_nodes_once_per_window(redis: Redis) -> None:
    """Found: keeping a delta extends its group's nodes to the end they have already (the
    recipe's `refreshed` plus the TTL; EXPIRE GT, which moves it by the fraction of a second
    it is asked in). A node lives less than the TTL, so its remaining lifetime read as a key
    last used before the window began: in a window after the one of the conversation's last
    refresh, every turn counted its group's nodes again (up to TOOLREF_EDIT_SNAPSHOT_EVERY
    of them per turn). Now an extension counts when it carries a key past the window its
    end was in: the counts before cover it up to there."""
    clock = Clock(TTL)
    quota = StoredBytes(10_000_000, TTL, clock=clock)
    store = Store(redis, TTL, quota=quota)
    recipes = Recipes(store, RecipeCache(0), refresh_seconds=TTL, clock=clock)
    held = await keep_recipe(recipes, recipe_request(3), None)  # a snapshot
    held = await keep_recipe(recipes, recipe_request(4), held)  # a delta
    await asyncio.sleep(USED_BEFORE)
    before = clock()
    clock.to_next_window(TTL)  # the next window, before a refresh is due
    await age(redis, clock() - before)  # the engine's lifetimes as they are then
    made = []
    for turns in (5, 6, 7):
        held = await keep_recipe(recipes, recipe_request(turns), held)
        assert held.depth == turns - 3  # a delta, extending its group's nodes
        made.append(int(await redis.strlen(keys.recipe_node("t", held.ref))))
    current, _ = quota.counters("t", clock())
    assert int(await redis.get(current) or 0) == sum(made)  # the new nodes alone


async def test_a_key_written_small_then_large_counts_the_large_value(redis: Redis) -> None:
    """Found in review: a write over a key (SET: an answer, a summary) counted nothing when
    the key was used in this window already, whatever it held before: an answer kept as one
    byte, then again as 5,000 under the same recipe ref, counted one byte. Twenty recipe refs
    so held ten times the quota while the count said 20 bytes. Now a write over a key counts
    what it grows the key by, and is refused past the quota as any write is."""
    clock = Clock(TTL)
    quota = StoredBytes(10_000, TTL, clock=clock)
    store = Store(redis, TTL, quota=quota)
    refused = 0
    for n in range(20):
        key = keys.answer("t", f"tb_{n:026d}")
        try:
            await store.put("t", "answer", [Put(key, b"x", TTL)])
            await store.put("t", "answer", [Put(key, random.Random(n).randbytes(5_000), TTL)])
        except QuotaExceededError:
            refused += 1
    assert refused
    assert 0 < await stored_bytes(redis, "t") <= await counted_bytes(redis, "t") <= 10_000
    # The same value again, or a smaller one, adds nothing.
    held = keys.answer("t", f"tb_{0:026d}")
    before = await counted_bytes(redis, "t")
    await store.put("t", "answer", [Put(held, b"y" * 10, TTL)])
    assert await counted_bytes(redis, "t") == before


async def test_overwrites_and_deletes_count_within_the_bound_the_docs_state(
    redis: Redis,
) -> None:
    """Found in review: the docs said the two counters hold at most twice what a tenant
    keeps; a key written 5,000 bytes, then 1, then 5,000 again counts the 4,999 bytes it
    grows each time (nothing is given back on a shrink or a delete: sizes are read before
    the write, and two concurrent shrinks would both give bytes back), and a key deleted
    then written counts whole again. What holds, and the docs now say: never below what
    the tenant keeps; above it by at most what shrinking overwrites and deletes gave up in
    the window (`quotas` module docstring, docs/operations.md)."""
    quota = StoredBytes(10_000_000, TTL, clock=Clock(TTL))
    store = Store(redis, TTL, quota=quota)
    key = keys.answer("t", f"tb_{0:026d}")
    large, small = random.Random(1).randbytes(5_000), b"x"
    given_up = 0
    await store.put("t", "answer", [Put(key, large, TTL)])
    for _ in range(10):  # an answer kept again each time its turn is regenerated
        await store.put("t", "answer", [Put(key, small, TTL)])
        given_up += len(large) - len(small)
        await store.put("t", "answer", [Put(key, large, TTL)])
        kept, counted = await stored_bytes(redis, "t"), await counted_bytes(redis, "t")
        assert kept <= counted <= kept + given_up
    assert counted == kept + given_up  # the bound is reached: it is what holds, not less
    await store.put("t", "answer", [], delete=[key])  # a base's answer dropped...
    given_up += len(large)
    await store.put("t", "answer", [Put(key, large, TTL)])  # ...and written back
    kept, counted = await stored_bytes(redis, "t"), await counted_bytes(redis, "t")
    assert kept <= counted == kept + given_up


async def test_a_write_the_engine_fails_part_way_counts_nothing_and_keeps_nothing(
    redis: Redis,
) -> None:
    """Found in review: a write's values and its count were separate commands of one
    pipeline, so an engine that refused some of them (out of memory: the first SETs refused,
    the INCRBY after them let through once their arguments were freed) counted 6 MB for a
    tenant that kept nothing, or kept values it never counted. On one node the writes and
    the count are now one transaction (MULTI): all or nothing. (A cluster cannot: skipped.)"""
    if isinstance(redis, RedisCluster):
        pytest.skip("no transaction spans a cluster's slots (`Store.writes`)")
    quota = StoredBytes(100_000_000, TTL, clock=Clock(TTL))
    store = Store(redis, TTL, quota=quota)
    memory: Any = await redis.info("memory")
    await redis.config_set("maxmemory", memory["used_memory"] + 3_000_000)
    try:
        puts = [
            Put(keys.answer("t", f"tb_{n:026d}"), random.Random(n).randbytes(2_000_000), TTL)
            for n in range(3)
        ]
        with pytest.raises(StoreUnavailableError):
            await store.put("t", "answer", puts)
    finally:
        await redis.config_set("maxmemory", 0)
    assert await stored_bytes(redis, "t") == 0
    assert await counted_bytes(redis, "t") == 0


def test_stored_bytes_arithmetic() -> None:
    quota = StoredBytes(100, 10, clock=lambda: 1_005.0)
    assert quota.counters("t", 1_005.0) == ("tr:t:q:100", "tr:t:q:99")
    assert quota.threshold(1_005.0) == 5_000  # used more than 5 s ago: before this window
    # -2 absent, -1 without a lifetime, 4.9 s left (used 5.1 s ago), 5.1 s left.
    assert quota.cost([1, 2, 4, 8], [-2, -1, 4_900, 5_100], 1_005.0) == 7
    # Extended (EXPIRE GT): an absent key is not revived, one without a lifetime not
    # extended, nor one that already lives longer than the extension asks (4.9 s > 4 s).
    left = [-2, -1, 4_900, 5_100, 4_900]
    assert quota.extended([1, 2, 4, 8, 16], left, [10, 10, 10, 10, 4], 1_005.0) == 4
    quota.check("t", used=60, adding=40, now=1_005.0)  # exactly full is allowed
    with pytest.raises(QuotaExceededError) as refused:
        quota.check("t", used=60, adding=41, now=1_005.0)
    assert refused.value.retry_after == 5
    assert not StoredBytes(0, 10).enabled


async def test_the_local_tenant_of_a_service_without_keys_has_no_quota(redis: Redis) -> None:
    app = create_app(
        Settings(redis_url="unused", tenant_requests_per_second=1, tenant_max_bytes=1),
        redis=redis,
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://localhost:8750",
            headers={"Toolref-Protocol": "2"},
        ) as api,
    ):
        for seed in range(5):
            answer = await api.post("/v1/invocations", json={"invocations": [invocation(seed)]})
            assert answer.status_code == 200, answer.text
        limits = (await api.get("/v1/capabilities")).json()["limits"]
        assert limits["requestsPerSecond"] is None
        assert limits["storedBytes"] is None


# --- summaries (issue 28, finding 6) ---------------------------------------------------------


def tool_turn(seed: int) -> list[dict[str, Any]]:
    """An openai-chat tool call with an 8,000-character result zstd cannot shrink much."""
    call = f"call_{seed}"
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call,
                    "type": "function",
                    "function": {"name": "read_file", "arguments": json.dumps({"n": seed})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call, "content": invocation(seed)["result"]},
    ]


async def test_summaries_count_in_the_stored_bytes_quota(redis: Redis) -> None:
    """Issue 28, finding 6: summaries were cached per `maxChars` outside the quota, so a
    tenant at its quota stored 44 times it by asking for many `maxChars` values (on the code
    before the fix the engine held 1.19 MB, 24 times LIMIT, at the end of this test). Now they
    are counted like records: kept while they fit, then answered (computed) and not kept,
    and the engine never holds more than the quota, summaries and all."""
    async with clients_for(redis, tenant_max_bytes=LIMIT) as clients:
        acme = clients["acme"]
        conversation = [{"role": "user", "content": "read"}]
        for seed in range(3):
            conversation += tool_turn(seed)
        conversation.append({"role": "user", "content": "go on"})
        full = await acme.post("/v1/messages:hydrate", json={"messages": conversation})
        assert full.status_code == 200, full.text
        refs = list(full.json()["toolReferences"].values())
        assert len(refs) == 3
        # While there is room a summary is kept, and counted like a record.
        url = f"/v1/invocations/{refs[0]}/summary"
        first = (await acme.get(url, params={"maxChars": 2_000})).json()
        again = (await acme.get(url, params={"maxChars": 2_000})).json()
        assert (first["cached"], again["cached"]) == (False, True)
        assert again["summary"] == first["summary"]
        assert await counted_bytes(redis, "acme") == await stored_bytes(redis, "acme")

        # The attack: every maxChars value, over every ref, through both ways of asking.
        answers = []
        for max_chars in range(1_000, 8_000, 97):
            for ref in refs:
                asked = {"maxChars": max_chars}
                answers.append(await acme.get(f"/v1/invocations/{ref}/summary", params=asked))
        for max_chars in range(1_050, 8_000, 499):
            body = {
                "messages": conversation,
                "mode": "summary",
                "keepRecent": 0,
                "maxChars": max_chars,
            }
            answers.append(await acme.post("/v1/messages:hydrate", json=body))
        # Every request answered, with its summary: nothing refused, nothing failed.
        assert {a.status_code for a in answers} == {200}, answers[-1].text[:300]
        hydrated = answers[-1].json()
        assert hydrated["optimizationStats"]["summarized"] == 3
        assert all(a.json()["summary"] for a in answers if "summary" in a.json())
        stored = await stored_bytes(redis, "acme")
        summaries = await stored_bytes(redis, "acme", kind="s")
        print(f"\nacme holds {stored} bytes ({summaries} of summaries) for a quota of {LIMIT}")
        assert stored <= LIMIT
        assert summaries > 0  # some were kept while they fit
        assert stored <= await counted_bytes(redis, "acme")

        # Over the quota a summary is made each time and never kept.
        last = (await acme.get(url, params={"maxChars": 7_999})).json()
        assert last["cached"] is False
        assert last["summary"]
        before = await snapshot(redis)
        last = (await acme.get(url, params={"maxChars": 7_999})).json()
        assert last["cached"] is False
        after = await snapshot(redis)
        assert {k: v for k, v in after.items() if b":q:" not in k} == {
            k: v for k, v in before.items() if b":q:" not in k
        }


def marker_turn(seed: int, ref: str) -> list[dict[str, Any]]:
    """`tool_turn(seed)` as optimize answers it: its payloads made markers of `ref`."""
    call = f"call_{seed}"
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call, "type": "function", "function": {"name": "read_file", "toolRef": ref}}
            ],
        },
        {"role": "tool", "tool_call_id": call, "toolRef": ref},
    ]


def without_counters(state: dict[Any, Any]) -> dict[Any, Any]:
    return {k: v for k, v in state.items() if b":q:" not in k}


async def test_a_hydrate_at_the_stored_bytes_quota_is_answered_and_registers_nothing(
    redis: Redis,
) -> None:
    """Found in review: a tenant at its stored-bytes quota got 429 on a hydrate carrying
    payloads in full, because hydrate registers them on the side. Hydrate is a read: it is
    answered (markers filled, the rest as sent) and registers nothing, saying so in
    `Toolref-Registration`; the calls sent in full get no ref, so the client keeps sending
    them in full, and the quota is never passed."""
    async with clients_for(redis, tenant_max_bytes=LIMIT) as clients:
        acme = clients["acme"]
        hydrate = "/v1/messages:hydrate"
        user = {"role": "user", "content": "read"}
        first = await acme.post(hydrate, json={"messages": [user, *tool_turn(0)]})
        assert first.status_code == 200, first.text
        assert "toolref-registration" not in first.headers  # registered: nothing to say
        ref = first.json()["toolReferences"]["call_0"]
        for seed in range(1, 20):  # registered until the quota refuses
            answer = await acme.post("/v1/invocations", json={"invocations": [invocation(seed)]})
            if answer.status_code != 200:
                assert_quota(answer, "storedBytes", LIMIT)
                break
        else:
            raise AssertionError("never refused")

        messages = [user, *marker_turn(0, ref), *tool_turn(50)]
        before = without_counters(await snapshot(redis))
        answer = await acme.post(hydrate, json={"messages": messages})
        assert answer.status_code == 200, answer.text
        assert answer.headers["Toolref-Registration"] == "skipped; quota=storedBytes"
        body = answer.json()
        assert body["messages"] == [user, *tool_turn(0), *tool_turn(50)]
        assert body["toolReferences"] == {"call_0": ref}  # the new call has none
        assert body["optimizationStats"]["newRefs"] == 0
        summary = await acme.post(
            hydrate, json={"messages": messages, "mode": "summary", "keepRecent": 0}
        )
        assert summary.status_code == 200, summary.text
        assert summary.headers["Toolref-Registration"] == "skipped; quota=storedBytes"
        assert summary.json()["optimizationStats"]["summarized"] == 1  # the held one only
        new_ref = Digest.of(
            canonical_json(
                Invocation.model_validate(
                    {
                        "name": "read_file",
                        "args": json.dumps({"n": 50}),
                        "result": invocation(50)["result"],
                    }
                ).canonical_object()
            )
        ).ref
        missing = await acme.post("/v1/invocations:findMissing", json={"refs": [str(new_ref)]})
        assert missing.json() == {"missing": [str(new_ref)]}
        after = without_counters(await snapshot(redis))
        assert {k for k in after if b":i:" in k} == {k for k in before if b":i:" in k}
        assert await stored_bytes(redis, "acme") <= LIMIT
