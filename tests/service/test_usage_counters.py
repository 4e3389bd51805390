"""Gateway usage per tenant, upstream and minute: what a worker holds until it flushes
(`toolref_server.usage.Pending`, on a clock the test moves) and the store's per-minute
counters the savings page reads (`toolref_server.storage.usage_counters`), on the real engine."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis._parsers.base import BaseParser
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from tests.conftest import key_names
from tests.service.no_scripts import no_scripts
from toolref.wire.errors import StoreUnavailableError
from toolref_server.app import create_app
from toolref_server.services import Services
from toolref_server.settings import Settings
from toolref_server.storage import keys
from toolref_server.storage.store import Store
from toolref_server.storage.usage_counters import LIFETIME, UsageCounters
from toolref_server.usage import KEEP_MINUTES, Batch, Counts, Pending, Slot, window

NOW = 29_000_000  # a minute (epoch seconds // 60)


class Clock:
    def __init__(self, minute: int) -> None:
        self.seconds = minute * 60.0 + 5

    def __call__(self) -> float:
        return self.seconds


def test_pending_adds_per_minute_tenant_and_upstream_and_hands_a_batch_once_written() -> None:
    clock = Clock(NOW)
    pending = Pending(clock)
    pending.add("acme", "up", Counts(requests=1, raw=100, wire=10))
    pending.add("acme", "up", Counts(requests=1, resends=1))
    pending.add("beta", "up", Counts(requests=1))
    clock.seconds += 60
    pending.add("acme", "up", Counts(requests=1))
    batch = pending.batch()
    assert batch == Batch(
        1,
        {
            Slot(NOW, "acme", "up"): Counts(requests=2, resends=1, raw=100, wire=10),
            Slot(NOW, "beta", "up"): Counts(requests=1),
            Slot(NOW + 1, "acme", "up"): Counts(requests=1),
        },
    )
    pending.add("acme", "up", Counts(requests=5))  # counted after: the next batch's
    assert pending.batch() is batch  # not written yet: the same again
    assert len(pending) == 4
    pending.written(batch)
    assert pending.batch() == Batch(2, {Slot(NOW + 1, "acme", "up"): Counts(requests=5)})


def test_a_batch_not_written_is_kept_a_day_at_most() -> None:
    clock = Clock(NOW)
    pending = Pending(clock)
    pending.add("acme", "up", Counts(requests=5))
    clock.seconds += 60
    pending.add("acme", "up", Counts(requests=3))
    assert pending.batch() == Batch(
        1, {Slot(NOW, "acme", "up"): Counts(requests=5), Slot(NOW + 1, "acme", "up"): Counts(3)}
    )
    clock.seconds += (KEEP_MINUTES - 1) * 60  # the store down for a day: NOW is a day old
    pending.add("acme", "up", Counts(requests=1))
    retry = pending.batch()
    assert retry == Batch(1, {Slot(NOW + 1, "acme", "up"): Counts(requests=3)})
    pending.written(retry)
    assert pending.batch() == Batch(2, {Slot(NOW + KEEP_MINUTES, "acme", "up"): Counts(1)})


def test_pending_holds_at_most_its_limit_and_says_what_it_drops() -> None:
    """While the store is down, a worker holds at most `limit` minute x tenant x upstream
    entries (TOOLREF_USAGE_PENDING_SLOTS), the unwritten batch's included: new ones beyond
    it are dropped, those held keep counting."""
    clock = Clock(NOW)
    pending = Pending(clock, limit=3)
    assert pending.add("acme", "up", Counts(requests=1))
    assert pending.add("beta", "up", Counts(requests=1))
    assert pending.batch() is not None  # taken; the store fails: not written
    assert pending.add("gamma", "up", Counts(requests=1))
    assert not pending.add("delta", "up", Counts(requests=1))
    clock.seconds += 60
    assert not pending.add("gamma", "up", Counts(requests=1))  # a new minute: a new entry
    clock.seconds -= 60
    assert pending.add("gamma", "up", Counts(requests=1))  # held: counted
    assert len(pending) == 3
    batch = pending.batch()
    assert batch is not None
    pending.written(batch)
    assert pending.batch() == Batch(2, {Slot(NOW, "gamma", "up"): Counts(requests=2)})
    assert pending.add("delta", "up", Counts(requests=1))


async def test_minutes_read_back_and_windows_add_up_those_they_span(redis: Redis) -> None:
    counters = UsageCounters(Store(redis, ttl_seconds=600))
    await counters.write(
        "w1",
        Batch(
            1,
            {
                Slot(NOW, "acme", "up"): Counts(requests=1, raw=100, wire=10),
                Slot(NOW - 59, "acme", "up"): Counts(requests=2, resends=1, raw=200, wire=20),
                Slot(NOW - 60, "acme", "up"): Counts(requests=4, raw=400, wire=40),  # day only
                Slot(NOW - 1439, "acme", "other"): Counts(requests=8),  # day only
                Slot(NOW - 1440, "acme", "up"): Counts(requests=16),  # older than a day
                Slot(NOW, "beta", "up"): Counts(wire=7),
                Slot(NOW, "gamma", "up"): Counts(requests=32),  # a tenant not asked for
            },
        ),
    )
    await counters.write(
        "w1", Batch(2, {Slot(NOW, "acme", "up"): Counts(requests=1, raw=1, wire=1)})
    )
    minutes = await counters.read(["acme", "beta"], NOW, 1440)
    # Each minute as counted (the two adds to NOW together), of the tenants asked for, a day
    # back at most.
    assert minutes == {
        Slot(NOW, "acme", "up"): Counts(requests=2, raw=101, wire=11),
        Slot(NOW - 59, "acme", "up"): Counts(requests=2, resends=1, raw=200, wire=20),
        Slot(NOW - 60, "acme", "up"): Counts(requests=4, raw=400, wire=40),
        Slot(NOW - 1439, "acme", "other"): Counts(requests=8),
        Slot(NOW, "beta", "up"): Counts(wire=7),
    }
    assert await counters.read(["acme"], NOW, 60) == {
        slot: counts
        for slot, counts in minutes.items()
        if slot.tenant == "acme" and slot.minute > NOW - 60
    }
    hour, day = window(minutes, NOW, 60), window(minutes, NOW, 1440)
    assert hour == {
        ("acme", "up"): Counts(requests=4, resends=1, raw=301, wire=31),
        ("beta", "up"): Counts(wire=7),
    }
    assert day == {
        ("acme", "up"): Counts(requests=8, resends=1, raw=701, wire=71),
        ("acme", "other"): Counts(requests=8),
        ("beta", "up"): Counts(wire=7),
    }
    # One hash per tenant and minute, alive a day and two minutes.
    names = sorted(n for n in await key_names(redis) if ":u:" in n)
    assert keys.usage("acme", NOW) in names
    assert len(names) == 7
    ttl = await redis.ttl(keys.usage("acme", NOW))
    assert LIFETIME - 5 <= ttl <= LIFETIME


async def test_an_engine_that_fails_keeps_the_counts_for_the_next_flush(redis: Redis) -> None:
    store = Store(redis, ttl_seconds=600)
    counters = UsageCounters(store)
    pending = Pending(Clock(NOW))
    pending.add("acme", "up", Counts(requests=3))

    def refuse(*args: object, **kwargs: object) -> None:
        raise RedisConnectionError("refused")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(redis), "pipeline", refuse)
        with pytest.raises(StoreUnavailableError, match="usage counters"):
            await counters.flush(pending)
    assert len(pending) == 1
    await counters.flush(pending)
    assert len(pending) == 0
    assert await counters.read(["acme"], NOW, 60) == {Slot(NOW, "acme", "up"): Counts(requests=3)}


def _pipelines(redis: Redis, patch: pytest.MonkeyPatch, execute: Any) -> None:
    """Every pipeline of `redis` (its class) runs `execute(run)` for `execute`, `run` the
    real one."""
    real = type(redis).pipeline

    def pipeline(self: Redis, *args: Any, **kwargs: Any) -> Any:
        pipe = real(self, *args, **kwargs)
        run = pipe.execute

        async def patched(*args: Any, **kwargs: Any) -> Any:
            return await execute(lambda: run(*args, **kwargs))

        pipe.execute = patched  # type: ignore[method-assign]
        return pipe

    patch.setattr(type(redis), "pipeline", pipeline)


async def test_a_flush_the_engine_ran_but_whose_reply_was_lost_is_not_counted_twice(
    redis: Redis,
) -> None:
    """The engine ran the flush's commands, then the reply timed out: the next flush sends
    the same counts again, and the engine adds them once."""
    counters = UsageCounters(Store(redis, ttl_seconds=600))
    pending = Pending(Clock(NOW))
    pending.add("acme", "up", Counts(requests=3, raw=300))
    pending.add("beta", "up", Counts(requests=1))

    async def ran_then_timed_out(run: Callable[[], Awaitable[Any]]) -> Any:
        await run()
        raise RedisTimeoutError("Timeout reading from socket")

    with pytest.MonkeyPatch.context() as patch:
        _pipelines(redis, patch, ran_then_timed_out)
        with pytest.raises(StoreUnavailableError, match="usage counters"):
            await counters.flush(pending)
    pending.add("acme", "up", Counts(requests=1))  # counted meanwhile: added once too
    await counters.flush(pending)
    await counters.flush(pending)
    assert len(pending) == 0
    assert await counters.read(["acme", "beta"], NOW, 60) == {
        Slot(NOW, "acme", "up"): Counts(requests=4, raw=300),
        Slot(NOW, "beta", "up"): Counts(requests=1),
    }


@pytest.mark.parametrize("engine_ran", [False, True], ids=["before", "after the engine ran"])
async def test_a_flush_cancelled_midway_keeps_its_counts_for_the_next(
    redis: Redis, engine_ran: bool
) -> None:
    """A flush cancelled while the engine has its commands (a stop cancels the sampler; a
    client gone cancels the savings request): the counts stay for the next flush, added
    once whether or not the engine ran them."""
    counters = UsageCounters(Store(redis, ttl_seconds=600))
    pending = Pending(Clock(NOW))
    pending.add("acme", "up", Counts(requests=3))
    sent, never = asyncio.Event(), asyncio.Event()

    async def hangs(run: Callable[[], Awaitable[Any]]) -> Any:
        if engine_ran:
            await run()
        sent.set()
        await never.wait()

    with pytest.MonkeyPatch.context() as patch:
        _pipelines(redis, patch, hangs)
        flushing = asyncio.create_task(counters.flush(pending))
        await sent.wait()
        flushing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await flushing
    await counters.flush(pending)
    assert len(pending) == 0
    assert await counters.read(["acme"], NOW, 60) == {Slot(NOW, "acme", "up"): Counts(3)}


async def test_each_workers_batch_is_added_once_and_every_worker_counts(redis: Redis) -> None:
    """Two workers' batches of the same number both add to a minute's hash; a batch sent
    again, or an older one arriving late, adds nothing; the marks are not read as usage."""
    counters = UsageCounters(Store(redis, ttl_seconds=600))
    slot = Slot(NOW, "acme", "up")
    for writer, number, requests in [("w1", 1, 1), ("w2", 1, 2), ("w1", 1, 4), ("w1", 2, 8)]:
        await counters.write(writer, Batch(number, {slot: Counts(requests=requests)}))
    await counters.write("w1", Batch(1, {slot: Counts(requests=16)}))  # late: already past
    assert await counters.read(["acme"], NOW, 60) == {slot: Counts(requests=11)}
    held = await redis.hgetall(keys.usage("acme", NOW))
    assert held == {b"up:requests": b"11", b"@w1": b"2", b"@w2": b"1"}
    ttl = await redis.ttl(keys.usage("acme", NOW))
    assert LIFETIME - 5 <= ttl <= LIFETIME


async def test_an_engine_without_scripting_gets_plain_increments(redis: Redis) -> None:
    """An engine that refuses EVAL as an unknown command: the counts are added with HINCRBY
    (at least once there), and the engine is not asked to run the script again."""
    counters = UsageCounters(Store(redis, ttl_seconds=600))
    pending = Pending(Clock(NOW))
    real = type(redis).pipeline
    evals = 0

    def pipeline(self: Redis, *args: Any, **kwargs: Any) -> Any:
        pipe = real(self, *args, **kwargs)
        run, queued = pipe.execute, 0

        def refused(*args: Any) -> Any:
            nonlocal evals, queued
            evals, queued = evals + 1, queued + 1
            return pipe

        async def execute(*args: Any, **kwargs: Any) -> Any:
            if queued:
                raise ResponseError("unknown command 'EVAL', with args beginning with: ")
            return await run(*args, **kwargs)

        pipe.eval = refused  # type: ignore[method-assign, assignment]
        pipe.execute = execute  # type: ignore[method-assign]
        return pipe

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(redis), "pipeline", pipeline)
        for requests in (1, 2):
            pending.add("acme", "up", Counts(requests=requests))
            await counters.flush(pending)
    assert evals == 1
    assert len(pending) == 0
    assert await counters.read(["acme"], NOW, 60) == {Slot(NOW, "acme", "up"): Counts(3)}
    assert await redis.ttl(keys.usage("acme", NOW)) > LIFETIME - 5


async def test_an_engine_whose_acl_refuses_scripts_gets_plain_increments(
    engine_url: str, redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """A user the engine's ACL does not let run EVAL/EVALSHA (NOPERM, as a managed engine
    may): the counts are added with HINCRBY, the script is not tried again, and the switch is
    logged once."""
    async with no_scripts(engine_url, redis, "toolref-no-scripts") as limited:
        counters = UsageCounters(Store(limited, ttl_seconds=600))
        pending = Pending(Clock(NOW))
        with caplog.at_level("WARNING"):
            for requests in (1, 2):
                pending.add("acme", "up", Counts(requests=requests))
                await counters.flush(pending)
        assert not counters.scripted
        assert len(pending) == 0
        assert await counters.read(["acme"], NOW, 60) == {Slot(NOW, "acme", "up"): Counts(3)}
        assert await redis.ttl(keys.usage("acme", NOW)) > LIFETIME - 5
        switched = [r for r in caplog.records if "HINCRBY" in r.getMessage()]
        assert len(switched) == 1


async def test_an_engine_out_of_memory_is_a_failure_not_a_refusal_of_scripts(
    redis: Redis,
) -> None:
    """OOM ("command not allowed when used memory > 'maxmemory'") is not scripting refused:
    the flush fails, its counts are kept, and the next flush still runs the script."""
    counters = UsageCounters(Store(redis, ttl_seconds=600))
    pending = Pending(Clock(NOW))
    pending.add("acme", "up", Counts(requests=3))

    async def out_of_memory(run: Callable[[], Awaitable[Any]]) -> Any:
        oom = "OOM command not allowed when used memory > 'maxmemory'."
        raise BaseParser.parse_error(oom)  # type: ignore[no-untyped-call]

    with pytest.MonkeyPatch.context() as patch:
        _pipelines(redis, patch, out_of_memory)
        with pytest.raises(StoreUnavailableError, match="usage counters"):
            await counters.flush(pending)
    assert counters.scripted
    assert len(pending) == 1
    await counters.flush(pending)
    assert len(pending) == 0
    assert await counters.read(["acme"], NOW, 60) == {Slot(NOW, "acme", "up"): Counts(3)}
    assert await redis.hget(keys.usage("acme", NOW), keys.usage_writer(pending.writer))


async def test_the_app_bounds_what_a_worker_holds_and_adds_it_at_stop(redis: Redis) -> None:
    """TOOLREF_USAGE_PENDING_SLOTS bounds each worker's pending usage; use beyond it is
    counted as dropped; what is held reaches the store when the app stops."""
    settings = Settings(redis_url="unused", usage_pending_slots=2, sample_seconds=60)
    app = create_app(settings, redis=redis)
    async with app.router.lifespan_context(app):
        services: Services = app.state.services
        metrics = services.metrics
        assert metrics.pending.limit == 2
        for tenant in ("acme", "beta", "gamma"):
            metrics.gateway_usage(tenant, "up", Counts(requests=1, raw=10, wire=1))
        assert len(metrics.pending) == 2
        dropped = metrics.usage_dropped.labels("gamma", "up")._value.get()
        assert dropped == 1
        assert metrics.pending.batch() is not None  # taken, as a flush cut by the stop
    now = int(time.time() // 60)
    found = await UsageCounters(Store(redis, ttl_seconds=600)).read(
        ["acme", "beta", "gamma"], now, 5
    )
    assert window(found, now, 5) == {
        (tenant, "up"): Counts(requests=1, raw=10, wire=1) for tenant in ("acme", "beta")
    }
