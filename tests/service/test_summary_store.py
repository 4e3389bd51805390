"""The summary store's mutex and values, and the model-call counters, on the real engine (and
on a cluster in the cluster pass): what `registry.single_flight` relies on."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError

from toolref.wire.canonical import digest_of
from toolref.wire.errors import StoreUnavailableError
from toolref_server.registry.single_flight import SingleFlight, Skipped
from toolref_server.registry.summarizers import SummarizerError
from toolref_server.storage import keys
from toolref_server.storage.counters import WINDOW_SECONDS, ModelCallCounters
from toolref_server.storage.quotas import StoredBytes
from toolref_server.storage.store import Store
from toolref_server.storage.summary_store import Outcome, SummaryStore

from ..conftest import key_names
from .no_scripts import no_scripts

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
    token, _ = await store.take(slot)
    assert token is not None
    assert await store.take(slot) == (None, None)  # held
    assert (await store.wait(slot, past())).outcome is Outcome.LATE
    await store.fail(slot, token)
    assert await store.take(slot) == (None, None)  # the failure mark holds it too
    assert (await store.wait(slot, past())).outcome is Outcome.FAILED
    await store.release(slot, token)  # a failure mark is no holder's: it stays
    assert (await store.wait(slot, past())).outcome is Outcome.FAILED
    await redis.delete(keys.summary_lock(slot.key))  # the mark expired
    assert (await store.wait(slot, past())).outcome is Outcome.FREE
    token, _ = await store.take(slot)
    assert token is not None
    assert await store.keep(slot, token, "read a.py: 1 line")
    waited = await store.wait(slot, past())
    assert (waited.outcome, waited.text) == (Outcome.MADE, "read a.py: 1 line")
    assert await key_names(redis) == [slot.key]  # the lock went with the write
    assert 590 < await redis.ttl(slot.key) <= 600
    # Taking the lock reads the value again: there, it is the answer, the lock given back.
    assert await store.take(slot) == (None, "read a.py: 1 line")
    assert await key_names(redis) == [slot.key]


async def test_a_waiter_gets_the_value_kept_while_it_polls(redis: Redis) -> None:
    store = summaries(redis)
    slot = store.dialogue("t", "user: hi\nassistant: hello", SID)
    token, _ = await store.take(slot)
    assert token is not None
    loop = asyncio.get_running_loop()
    waiting = asyncio.ensure_future(store.wait(slot, loop.time() + 5))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    assert await store.keep(slot, token, "greetings")
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
    token, _ = await store.take(slot)
    assert token is not None
    assert await store.keep(slot, token, "read a.py: 1 line")
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
    token, _ = await store.take(kept)
    assert token is not None
    assert await store.keep(kept, token, "a" * 30)
    assert await store.read("t", [kept, other]) == ["a" * 30, None]
    token, _ = await store.take(other)
    assert token is not None
    assert not await store.keep(other, token, "b" * 30)  # 60 bytes would pass the 40-byte quota
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
    await summaries.release(slot, "a token")
    await summaries.fail(slot, "a token")
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
    token, _ = await store.take(slot)
    assert token is not None
    assert await store.keep(slot, token, "read a.py \udc00 1 line")
    assert await key_names(redis) == [slot.key]  # the lock went with the write
    assert await store.read("t", [slot]) == ["read a.py \ufffd 1 line"]
    other = store.dialogue("t", "user: hi", SID)
    await store.pin("t", [other], ["hi \ud83d"])
    assert await store.read("t", [other]) == ["hi \ufffd"]


@pytest.mark.parametrize("first_ends", ["kept", "failed", "skipped"])
async def test_a_holder_whose_lock_expired_leaves_the_next_holders_lock(
    redis: Redis, first_ends: str
) -> None:
    """Found in review: `keep`, `release` and `fail` deleted or overwrote the lock without
    checking it was still theirs. A holder whose lock expired while it computed then took
    away the lock of the request that had taken it since, and a third request called the
    model as well (or fell back on a failure that was not its summary's). Now each
    compares its token first: the second holder's lock stays until the second is done."""
    store = summaries(redis)
    slot = store.invocation("t", REF, SID)
    lock = keys.summary_lock(slot.key)
    calls: list[str] = []
    started = {name: asyncio.Event() for name in ("first", "second")}
    finish = {name: asyncio.Event() for name in ("first", "second")}

    def model(name: str) -> Callable[[], Awaitable[str]]:
        async def create() -> str:
            calls.append(name)
            if name in started:
                started[name].set()
                await finish[name].wait()
            if name == "first" and first_ends == "failed":
                raise SummarizerError("the model failed")
            if name == "first" and first_ends == "skipped":
                raise Skipped("tenant-quota", "not asked")
            return f"{name}'s summary"

        return create

    def process(name: str) -> asyncio.Future[tuple[str, bool]]:  # a replica of its own
        return asyncio.ensure_future(SingleFlight(store, wait=5).get_or_create(slot, model(name)))

    first = process("first")
    await asyncio.wait_for(started["first"].wait(), 5)
    await redis.delete(lock)  # the first's lock expired while it still computes
    second = process("second")
    await asyncio.wait_for(started["second"].wait(), 5)
    finish["first"].set()
    with suppress(SummarizerError):
        await first
    held = await redis.get(lock)
    assert held is not None  # still the second's
    assert held != b"failed"
    third = process("third")
    if first_ends == "kept":
        assert await third == ("first's summary", True)  # the value kept is the answer
    else:
        assert (await store.wait(slot, past())).outcome is Outcome.LATE  # held
        await asyncio.sleep(0.05)  # the third takes its look while the second still holds
    finish["second"].set()
    assert (await second)[0] == "second's summary"
    if first_ends != "kept":
        assert await third == ("second's summary", True)  # waited for the second's
    assert calls == ["first", "second"]  # the third asked no model
    assert await redis.exists(lock) == 0  # the second gave its lock back


@pytest.mark.parametrize("cluster", [True, False])
async def test_a_lock_taken_whose_reply_was_lost_is_given_back(
    redis: Redis, monkeypatch: pytest.MonkeyPatch, cluster: bool
) -> None:
    """Found in review: when the lock was taken and the command after it failed (on a
    cluster the GET of the value that follows the SET NX; on one node the round trip's
    reply), `take` raised with the lock left behind, and every request for that summary
    waited for it and fell back until it expired (30 s by default). Now the lock is given
    back (if it is still the one taken) before the error is raised."""
    store = summaries(redis)
    store.store.cluster = cluster  # the cluster's two commands, or the one round trip
    slot = store.invocation("t", REF, SID)
    client: Any = store.store.redis
    if cluster:

        async def lost(*args: Any, **kwargs: Any) -> Any:
            raise ConnectionError("Connection closed by server.")

        monkeypatch.setattr(client, "get", lost)
    else:
        pipeline = client.pipeline

        def replies_lost(*args: Any, **kwargs: Any) -> Any:
            pipe = pipeline(*args, **kwargs)
            execute = pipe.execute

            async def lost() -> Any:
                await execute()  # the engine ran the SET and the GET; their replies are lost
                raise ConnectionError("Connection closed by server.")

            pipe.execute = lost
            return pipe

        monkeypatch.setattr(client, "pipeline", replies_lost)
    with pytest.raises(StoreUnavailableError):
        await store.take(slot)
    monkeypatch.undo()
    assert await key_names(redis) == []  # no lock left to wait for
    assert (await store.wait(slot, past())).outcome is Outcome.FREE


async def test_an_engine_without_scripts_checks_the_token_with_plain_commands(
    engine_url: str, redis: Redis
) -> None:
    """The compare-and-delete (and -set) of the lock falls back to a GET and a DEL or SET
    where the engine refuses scripts: a holder whose lock expired still leaves the next
    holder's lock, and gives back or marks failed its own."""
    async with no_scripts(engine_url, redis, "toolref-summary-no-eval") as limited:
        store = summaries(limited)
        slot = store.invocation("t", REF, SID)
        lock = keys.summary_lock(slot.key)
        first, _ = await store.take(slot)
        await redis.delete(lock)  # the first's lock expired
        second, _ = await store.take(slot)
        assert first is not None
        assert second is not None
        await store.release(slot, first)
        assert not store.scripted  # the engine refused the script: plain commands since
        await store.fail(slot, first)
        assert await store.keep(slot, first, "first's summary")  # kept; the lock is not its
        assert await redis.get(lock) == second.encode()  # the second's, still
        await store.fail(slot, second)
        assert await redis.get(lock) == b"failed"
        other = store.invocation("t", REF, "m:v1:200")
        third, _ = await store.take(other)
        assert third is not None
        await store.release(other, third)
        assert await redis.exists(keys.summary_lock(other.key)) == 0
