"""The summary store's mutex and values, and the model-call counters, on the real engine (and
on a cluster in the cluster pass): what `registry.single_flight` relies on."""

from __future__ import annotations

import asyncio

import fakeredis
import pytest
from redis.asyncio import Redis

from toolref.wire.canonical import digest_of
from toolref.wire.errors import StoreUnavailableError
from toolref_server.registry.single_flight import SingleFlight
from toolref_server.storage.counters import WINDOW_SECONDS, ModelCallCounters
from toolref_server.storage.quotas import StoredBytes
from toolref_server.storage.store import Store
from toolref_server.storage.summary_store import Outcome, SummaryStore

from ..conftest import key_names

REF = digest_of({"name": "read", "args": {"path": "a.py"}, "result": "x"}).ref
SID = "extractive:v1:200"


def summaries(redis: Redis, quota: int = 0) -> SummaryStore:
    store = Store(redis, 600, quota=StoredBytes(quota, 600))
    return SummaryStore(store, lock_seconds=30, failure_seconds=60)


def past() -> float:
    return asyncio.get_running_loop().time() - 1


async def test_one_holder_and_what_the_others_see(redis: Redis) -> None:
    store = summaries(redis)
    slot = store.invocation("t", REF, SID)
    assert await store.take(slot) == (True, None)
    assert await store.take(slot) == (False, None)  # held
    assert (await store.wait(slot, past())).outcome is Outcome.LATE
    await store.fail(slot)
    assert await store.take(slot) == (False, None)  # the failure mark holds it too
    assert (await store.wait(slot, past())).outcome is Outcome.FAILED
    await store.release(slot)
    assert (await store.wait(slot, past())).outcome is Outcome.FREE
    assert await store.take(slot) == (True, None)
    assert await store.keep(slot, "read a.py: 1 line")
    waited = await store.wait(slot, past())
    assert (waited.outcome, waited.text) == (Outcome.MADE, "read a.py: 1 line")
    assert await key_names(redis) == [slot.key]  # the lock went with the write
    assert 590 < await redis.ttl(slot.key) <= 600
    # Taking the lock reads the value again: there, it is the answer, the lock given back.
    assert await store.take(slot) == (False, "read a.py: 1 line")
    assert await key_names(redis) == [slot.key]


async def test_a_waiter_gets_the_value_kept_while_it_polls(redis: Redis) -> None:
    store = summaries(redis)
    slot = store.dialogue("t", "user: hi\nassistant: hello", SID)
    assert await store.take(slot) == (True, None)
    loop = asyncio.get_running_loop()
    waiting = asyncio.ensure_future(store.wait(slot, loop.time() + 5))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    assert await store.keep(slot, "greetings")
    waited = await asyncio.wait_for(waiting, 1)
    assert (waited.outcome, waited.text) == (Outcome.MADE, "greetings")


async def test_a_value_kept_before_the_lock_is_taken_is_not_made_again(redis: Redis) -> None:
    """Found in review: the single flight took the lock and computed without reading the
    value again, so a request whose read missed a summary another process kept a round
    trip later (its lock already given back) asked the model a second time. It reads the
    value again once it holds the lock, as dogpile.cache does, and answers with it."""
    store = summaries(redis)
    slot = store.invocation("t", REF, SID)
    # Another process made and kept the summary just after this request's read missed it.
    assert await store.take(slot) == (True, None)
    assert await store.keep(slot, "read a.py: 1 line")
    made: list[str] = []

    async def create() -> str:
        made.append("asked the model")
        return "read a.py, again"

    flight = SingleFlight(store, wait=5)
    assert await flight.get_or_create(slot, create) == ("read a.py: 1 line", True)
    assert made == []
    assert await key_names(redis) == [slot.key]  # no lock left behind
    # Absent, it is made once, under the lock, which goes with the write.
    other = store.invocation("t", REF, "m:v1:200")
    assert await flight.get_or_create(other, create) == ("read a.py, again", False)
    assert made == ["asked the model"]
    assert await key_names(redis) == sorted([slot.key, other.key])


async def test_reads_are_batched_and_counted_and_keeping_past_the_quota_frees_the_lock(
    redis: Redis,
) -> None:
    store = summaries(redis, quota=40)
    kept, other = store.invocation("t", REF, SID), store.invocation("t", REF, "m:v1:200")
    assert await store.take(kept) == (True, None)
    assert await store.keep(kept, "a" * 30)
    assert await store.read("t", [kept, other]) == ["a" * 30, None]
    assert await store.take(other) == (True, None)
    assert not await store.keep(other, "b" * 30)  # 60 bytes would pass the 40-byte quota
    counters = [name for name in await key_names(redis) if ":q:" in name]
    assert await key_names(redis) == sorted([kept.key, *counters])  # its lock went too
    assert (await store.wait(other, past())).outcome is Outcome.FREE
    registry = store.store.metrics.registry
    assert registry.get_sample_value("toolref_summary_cache_total", {"result": "not-kept"}) == 1


async def test_a_pin_past_the_quota_says_it_was_not_kept(redis: Redis) -> None:
    """Found in review: past the quota `pin` answered the text given, as if kept, and
    context editing sent it though no other replica could find it. Now it answers None
    for each, and nothing is written."""
    store = summaries(redis, quota=40)
    first, second = store.invocation("t", REF, SID), store.invocation("t", REF, "m:v1:200")
    assert await store.pin("t", [first], ["a" * 30]) == ["a" * 30]
    before = await key_names(redis)
    assert await store.pin("t", [second], ["b" * 30]) == [None]
    assert await key_names(redis) == before
    assert await store.pin("t", [first], ["c" * 30]) == ["a" * 30]  # the one there


async def test_model_calls_are_counted_per_tenant_and_minute(redis: Redis) -> None:
    now = [1_000 * WINDOW_SECONDS + 1.0]
    counters = ModelCallCounters(Store(redis, 600), clock=lambda: now[0])
    assert [await counters.count("t") for _ in range(3)] == [1, 2, 3]
    assert await counters.count("u") == 1  # another tenant
    now[0] += WINDOW_SECONDS
    assert await counters.count("t") == 1  # the next minute
    names = [name for name in await key_names(redis) if name.startswith("tr:t:")]
    assert len(names) == 2
    for name in names:
        assert 0 < await redis.ttl(name) <= 2 * WINDOW_SECONDS


async def test_an_unreachable_engine_is_a_503_naming_the_summary_cache() -> None:
    """The mutex and the counters are commands on the engine directly: their engine errors
    are `StoreUnavailableError` (503 with Retry-After), counted; giving a lock back never
    raises (the lock then expires by itself)."""
    server = fakeredis.FakeServer()
    store = Store(fakeredis.FakeAsyncRedis(server=server), 600, retry_after=4)
    summaries = SummaryStore(store, lock_seconds=30, failure_seconds=60)
    slot = summaries.invocation("t", REF, SID)
    server.connected = False
    for attempt in (summaries.take(slot), summaries.wait(slot, 0.0)):
        with pytest.raises(StoreUnavailableError) as failed:
            await attempt
        assert "summary cache (Redis) is unreachable" in failed.value.detail
        assert failed.value.retry_after == 4
    with pytest.raises(StoreUnavailableError):
        await ModelCallCounters(store).count("t")
    await summaries.release(slot)
    await summaries.fail(slot)
    errors = store.metrics.registry.get_sample_value(
        "toolref_store_errors_total", {"operation": "summary"}
    )
    assert errors == 3


async def test_a_lone_surrogate_is_kept_as_a_replacement_and_the_lock_released(
    redis: Redis,
) -> None:
    """Found in review: `keep` encoded the text before its guard, so a lone surrogate raised
    with the lock still held (every request for it waited until the lock expired). Text
    UTF-8 cannot carry is kept with U+FFFD in its place, by `keep` and by `pin`."""
    store = summaries(redis)
    slot = store.invocation("t", REF, SID)
    assert await store.take(slot) == (True, None)
    assert await store.keep(slot, "read a.py \udc00 1 line")
    assert await key_names(redis) == [slot.key]  # the lock went with the write
    assert await store.read("t", [slot]) == ["read a.py \ufffd 1 line"]
    other = store.dialogue("t", "user: hi", SID)
    await store.pin("t", [other], ["hi \ud83d"])
    assert await store.read("t", [other]) == ["hi \ufffd"]
