"""The store's Redis commands, on fakeredis (the service tests repeat this on a real engine)."""

from __future__ import annotations

from typing import Any

import fakeredis
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from toolref.canonical import canonical_json, digest_of
from toolref.errors import StoreUnavailableError
from toolref_server import record
from toolref_server.store import NewRecord, Store

INVOCATION = {"name": "read", "args": {"path": "a"}, "result": "x" * 2000, "isError": False}


def new_record(invocation: dict[str, object]) -> NewRecord:
    digest = digest_of(invocation)
    data = record.encode(invocation, digest.sha256, digest.size, 512)
    return NewRecord(digest.ref, digest.sha256, data)


@pytest.fixture
def store() -> Store:
    return Store(fakeredis.FakeAsyncRedis(), ttl_seconds=100)


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
    assert found.invocation == INVOCATION
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

    store = Store(Down(), ttl_seconds=100, retry_after=7)
    with pytest.raises(StoreUnavailableError) as info:
        await store.fetch("t", [digest_of(INVOCATION).ref])
    assert info.value.retry_after == 7
    assert "send full payloads" in info.value.detail


async def test_record_compression_pays_or_is_skipped() -> None:
    digest = digest_of(INVOCATION)
    compressed = record.encode(INVOCATION, digest.sha256, digest.size, 512)
    plain = record.encode(INVOCATION, digest.sha256, digest.size, 10**9)
    assert len(compressed) < len(plain) / 5
    assert record.decode(compressed).invocation == record.decode(plain).invocation == INVOCATION
    with pytest.raises(record.CorruptRecordError):
        record.decode(b"\x09" + plain[1:])


def test_key_layout() -> None:
    ref = digest_of(INVOCATION).ref
    assert Store.key("acme", ref) == f"tr:acme:i:{ref[3:]}"
