"""Gateway usage per tenant, upstream and minute: what a worker holds until it flushes
(`toolref_server.usage.Pending`, on a clock the test moves) and the store's per-minute
counters the savings page reads (`toolref_server.storage.usage_counters`), on the real engine."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.conftest import key_names
from toolref.wire.errors import StoreUnavailableError
from toolref_server.storage import keys
from toolref_server.storage.store import Store
from toolref_server.storage.usage_counters import LIFETIME, UsageCounters
from toolref_server.usage import KEEP_MINUTES, Counts, Pending, Slot, window

NOW = 29_000_000  # a minute (epoch seconds // 60)


class Clock:
    def __init__(self, minute: int) -> None:
        self.seconds = minute * 60.0 + 5

    def __call__(self) -> float:
        return self.seconds


def test_pending_adds_per_minute_tenant_and_upstream_and_drains_once() -> None:
    clock = Clock(NOW)
    pending = Pending(clock)
    pending.add("acme", "up", Counts(requests=1, raw=100, wire=10))
    pending.add("acme", "up", Counts(requests=1, resends=1))
    pending.add("beta", "up", Counts(requests=1))
    clock.seconds += 60
    pending.add("acme", "up", Counts(requests=1))
    assert pending.drain() == {
        Slot(NOW, "acme", "up"): Counts(requests=2, resends=1, raw=100, wire=10),
        Slot(NOW, "beta", "up"): Counts(requests=1),
        Slot(NOW + 1, "acme", "up"): Counts(requests=1),
    }
    assert pending.drain() == {}


def test_what_a_failed_flush_puts_back_is_kept_a_day_at_most() -> None:
    clock = Clock(NOW)
    pending = Pending(clock)
    pending.restore(
        {
            Slot(NOW - KEEP_MINUTES, "acme", "up"): Counts(requests=5),  # a day old: dropped
            Slot(NOW - KEEP_MINUTES + 1, "acme", "up"): Counts(requests=3),
        }
    )
    pending.add("acme", "up", Counts(requests=1))
    assert pending.drain() == {
        Slot(NOW - KEEP_MINUTES + 1, "acme", "up"): Counts(requests=3),
        Slot(NOW, "acme", "up"): Counts(requests=1),
    }


async def test_minutes_read_back_and_windows_add_up_those_they_span(redis: Redis) -> None:
    counters = UsageCounters(Store(redis, ttl_seconds=600))
    await counters.add(
        {
            Slot(NOW, "acme", "up"): Counts(requests=1, raw=100, wire=10),
            Slot(NOW - 59, "acme", "up"): Counts(requests=2, resends=1, raw=200, wire=20),
            Slot(NOW - 60, "acme", "up"): Counts(requests=4, raw=400, wire=40),  # day only
            Slot(NOW - 1439, "acme", "other"): Counts(requests=8),  # day only
            Slot(NOW - 1440, "acme", "up"): Counts(requests=16),  # older than a day
            Slot(NOW, "beta", "up"): Counts(wire=7),
            Slot(NOW, "gamma", "up"): Counts(requests=32),  # a tenant not asked for
        }
    )
    await counters.add({Slot(NOW, "acme", "up"): Counts(requests=1, raw=1, wire=1)})
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
