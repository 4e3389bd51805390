"""The store's Redis commands, on fakeredis (the service tests repeat this on a real engine)."""

from __future__ import annotations

import asyncio
from typing import Any

import fakeredis
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from tests.support.records import encode_values
from toolref.wire.canonical import canonical_json, digest_of
from toolref.wire.errors import StoreUnavailableError
from toolref_server.storage import record
from toolref_server.storage.store import NewRecord, Store
from toolref_server.storage.verifier import Verifier

INVOCATION = {"name": "read", "args": {"path": "a"}, "result": "x" * 2000, "isError": False}


def new_record(invocation: dict[str, object]) -> NewRecord:
    digest = digest_of(invocation)
    data = encode_values(invocation, digest.sha256, digest.size, 512)
    return NewRecord(digest.ref, digest.sha256, data)


@pytest.fixture
def store() -> Store:
    return Store(fakeredis.FakeAsyncRedis(), ttl_seconds=100)


async def test_the_store_keeps_the_verifier_it_is_given() -> None:
    """TOOLREF_VERIFIED_RECORDS and TOOLREF_VERIFIED_CHARS bound what the store keeps. The
    verifier the app builds from them is empty at start, and an empty `Verifier` is falsy:
    the store took it for none and made its own (100,000 records, 32 MiB), whatever the
    settings said. Found by the soak (issue 28): its 2 MiB cache grew past 20 MiB."""
    given = Verifier(limit=100, chars=3000)  # room for one record of 2,000 characters
    store = Store(fakeredis.FakeAsyncRedis(), ttl_seconds=100, verifier=given)
    assert store.verifier is given
    items = [new_record({**INVOCATION, "result": str(n) * 2000}) for n in range(3)]
    await store.register("t", items)
    assert all(await store.fetch("t", [item.ref for item in items]))
    assert len(given) == 1


async def test_the_verifier_counts_tool_names_in_its_characters() -> None:
    """TOOLREF_VERIFIED_CHARS bounds the characters the remembered records hold. It counted
    their arguments and results only: records with long tool names (any length a body
    carries) and tiny payloads weighed a few characters each, so 100,000 of them (the count
    bound) held 100,000 names of any size. Now the name counts too."""
    given = Verifier(limit=100, chars=3000)  # room for one record of a 2,000-character name
    store = Store(fakeredis.FakeAsyncRedis(), ttl_seconds=100, verifier=given)
    items = [new_record({**INVOCATION, "name": str(n) * 2000, "result": "x"}) for n in range(10)]
    await store.register("t", items)
    assert all(await store.fetch("t", [item.ref for item in items]))
    assert len(given) == 1


async def test_register_is_set_if_absent(store: Store) -> None:
    item = new_record(INVOCATION)
    [first] = await store.register("t", [item])
    [second] = await store.register("t", [item])
    assert (first.new, second.new) == (True, False)
    assert first.stored_digest == second.stored_digest == item.digest
    assert await store.redis.ttl(Store.key("t", item.ref)) == 100


async def test_fetch_round_trips_and_reports_absent(store: Store) -> None:
    item = new_record(INVOCATION)
    await store.register("t", [item])
    other = digest_of({**INVOCATION, "name": "other"}).ref
    found, absent = await store.fetch("t", [item.ref, other])
    assert absent is None
    assert found is not None
    assert found.invocation() == INVOCATION
    assert found.digest == item.digest
    assert found.size == len(canonical_json(INVOCATION))
    assert await store.fetch("other-tenant", [item.ref]) == [None]


async def test_touch(store: Store) -> None:
    item = new_record(INVOCATION)
    await store.register("t", [item])
    await store.redis.expire(Store.key("t", item.ref), 3)
    other = digest_of({**INVOCATION, "name": "other"}).ref
    assert await store.touch("t", [item.ref, other]) == [True, False]
    assert await store.redis.ttl(Store.key("t", item.ref)) == 100


async def test_empty_batches_do_not_call_redis(store: Store) -> None:
    assert await store.register("t", []) == []
    assert await store.touch("t", []) == []
    assert await store.fetch("t", []) == []


async def test_redis_failures_become_store_unavailable() -> None:
    class Down(fakeredis.FakeAsyncRedis):
        def pipeline(self, *args: object, **kwargs: object) -> Any:
            raise RedisConnectionError("engine gone")

    store = Store(Down(), ttl_seconds=100, retry_after=7, batches=False)
    with pytest.raises(StoreUnavailableError) as info:
        await store.fetch("t", [digest_of(INVOCATION).ref])
    assert info.value.retry_after == 7
    assert "send full payloads" in info.value.detail


async def test_record_compression_pays_or_is_skipped() -> None:
    digest = digest_of(INVOCATION)
    compressed = encode_values(INVOCATION, digest.sha256, digest.size, 512)
    plain = encode_values(INVOCATION, digest.sha256, digest.size, 10**9)
    assert len(compressed) < len(plain) / 5
    assert record.decode(compressed).invocation() == record.decode(plain).invocation()
    assert record.decode(plain).invocation() == {**INVOCATION, "isError": False}
    with pytest.raises(record.CorruptRecordError):
        record.decode(b"\x09" + plain[1:])


def test_key_layout() -> None:
    ref = digest_of(INVOCATION).ref
    assert Store.key("acme", ref) == f"tr:acme:i:{ref[3:]}"


# --- the breaker in front of the store ------------------------------------------------------


class Counting(fakeredis.FakeAsyncRedis):
    """A fake engine that can go down and counts the round trips it was asked for."""

    def __init__(self, server: fakeredis.FakeServer) -> None:
        super().__init__(server=server)
        self.trips = 0

    def pipeline(self, *args: Any, **kwargs: Any) -> Any:
        self.trips += 1
        return super().pipeline(*args, **kwargs)


@pytest.fixture
def flaky() -> tuple[fakeredis.FakeServer, Counting, Store]:
    server = fakeredis.FakeServer()
    client = Counting(server)
    store = Store(client, ttl_seconds=100, retry_after=3, failure_threshold=2, batches=False)
    store._read = None  # every read is a pipeline, so `trips` counts them all
    return server, client, store


async def test_failures_in_a_row_open_the_breaker_and_requests_skip_the_store(
    flaky: tuple[fakeredis.FakeServer, Counting, Store],
) -> None:
    server, client, store = flaky
    ref = digest_of(INVOCATION).ref
    server.connected = False
    for _ in range(2):
        with pytest.raises(StoreUnavailableError) as failed:
            await store.touch("t", [ref])
        assert "unreachable" in failed.value.detail
    assert client.trips == 2
    assert store.breaker.state.value == "open"

    for call in (store.touch("t", [ref]), store.fetch("t", [ref])):
        with pytest.raises(StoreUnavailableError) as skipped:
            await call
        assert "2 times in a row" in skipped.value.detail
        assert 1 <= skipped.value.retry_after <= 3
    assert client.trips == 2  # failed fast: the store was not asked
    errors = store.metrics.registry.get_sample_value(
        "toolref_store_errors_total", {"operation": "findMissing"}
    )
    assert errors == 2


async def test_a_successful_ping_closes_the_breaker(
    flaky: tuple[fakeredis.FakeServer, Counting, Store],
) -> None:
    server, _, store = flaky
    ref = digest_of(INVOCATION).ref
    server.connected = False
    for _ in range(2):
        with pytest.raises(StoreUnavailableError):
            await store.touch("t", [ref])
    assert not await store.ping()
    assert store.breaker.state.value == "open"
    server.connected = True
    assert await store.ping()  # readiness probes reach the store past the breaker
    assert store.breaker.state.value == "closed"
    assert await store.touch("t", [ref]) == [False]


async def test_an_engine_that_answers_with_an_error_does_not_open_the_breaker() -> None:
    class Full(fakeredis.FakeAsyncRedis):
        def pipeline(self, *args: Any, **kwargs: Any) -> Any:
            raise ResponseError("OOM command not allowed when used memory > 'maxmemory'")

    store = Store(Full(), ttl_seconds=100, failure_threshold=1, batches=False)
    for _ in range(3):
        with pytest.raises(StoreUnavailableError) as info:
            await store.register("t", [new_record(INVOCATION)])
        assert "ResponseError" in info.value.detail
    assert store.breaker.state.value == "closed"  # reachable: each request still tries


class Stalled(fakeredis.FakeAsyncRedis):
    """An engine whose pipelines hang until `fail` is set, then fail as a timeout does;
    `trips` counts the pipelines sent."""

    def __init__(self) -> None:
        super().__init__()
        self.trips = 0
        self.fail = asyncio.Event()

    def pipeline(self, *args: Any, **kwargs: Any) -> Any:
        self.trips += 1
        fail = self.fail

        class Hanging:
            def expire(self, *args: Any) -> None:
                pass

            async def execute(self) -> list[Any]:
                await fail.wait()
                raise RedisTimeoutError("Timeout reading from socket")

        return Hanging()


async def test_requests_waiting_for_a_slot_skip_an_engine_that_failed_meanwhile() -> None:
    # The paused-engine fault test's cause, in miniature: one slot, held by a request that
    # times out; the two waiting for the slot get it only after the failure is recorded and
    # the breaker is open, so neither sends anything to the engine.
    client = Stalled()
    store = Store(client, ttl_seconds=100, failure_threshold=1, slots=1, slot_wait=5, batches=False)
    ref = digest_of(INVOCATION).ref
    calls = [asyncio.create_task(store.touch("t", [ref])) for _ in range(3)]
    await asyncio.sleep(0.01)
    assert client.trips == 1  # one holder; the others wait for its slot
    client.fail.set()
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    details = [o.detail for o in outcomes if isinstance(o, StoreUnavailableError)]
    assert len(details) == 3, outcomes
    assert "unreachable (TimeoutError)" in details[0]
    assert all("1 times in a row" in d for d in details[1:]), details
    assert client.trips == 1


async def test_a_request_that_waits_too_long_for_a_slot_is_refused() -> None:
    client = Stalled()
    store = Store(
        client, ttl_seconds=100, failure_threshold=5, slots=1, slot_wait=0.05, batches=False
    )
    ref = digest_of(INVOCATION).ref
    holder = asyncio.create_task(store.touch("t", [ref]))
    await asyncio.sleep(0.01)
    with pytest.raises(StoreUnavailableError) as waited:
        await store.touch("t", [ref])
    assert "all 1 connections stayed busy for 0.05s" in waited.value.detail
    assert client.trips == 1
    client.fail.set()
    with pytest.raises(StoreUnavailableError):
        await holder
    # Both count as store failures (the wait, then the holder's timeout).
    errors = store.metrics.registry.get_sample_value(
        "toolref_store_errors_total", {"operation": "findMissing"}
    )
    assert errors == 2


async def test_store_counts_refs_registered_resolved_and_missing(store: Store) -> None:
    item = new_record(INVOCATION)
    other = digest_of({**INVOCATION, "name": "other"}).ref
    await store.register("t", [item])
    await store.register("t", [item])
    await store.fetch("t", [item.ref, other])
    await store.touch("t", [item.ref, other, other])
    sample = store.metrics.registry.get_sample_value
    assert sample("toolref_refs_registered_total", {"new": "true"}) == 1
    assert sample("toolref_refs_registered_total", {"new": "false"}) == 1
    assert sample("toolref_refs_resolved_total") == 2
    assert sample("toolref_refs_missing_total") == 3
