"""Stored-bytes counting found wrong in review of the storage layer (the real engine; on
the cluster pass, a cluster): see each test's docstring."""

from __future__ import annotations

import asyncio
import random

import pytest
from redis.asyncio import Redis

from tests.adversarial.test_server_quotas import (
    TTL,
    USED_BEFORE,
    Clock,
    stored_bytes,
)
from toolref_server.storage.quotas import StoredBytes
from toolref_server.storage.store import Put, Store
from toolref_server.storage.summary_store import SummaryStore

pytestmark = pytest.mark.engine


async def test_a_key_read_twice_in_one_batch_counts_once(redis: Redis) -> None:
    """Found in review: `Store.read_and_touch` (summaries; records on a cluster or an
    engine without scripts) queued every PTTL before every EXPIRE, so a key named N times
    in one batch read N times "last used before this window" and counted N times: a
    summary-mode hydrate whose conversation names one result 500 times counted its summary
    500 times (429 for a tenant keeping a few KB). Each key now counts once per batch."""
    clock = Clock(TTL)
    quota = StoredBytes(10_000_000, TTL, clock=clock)
    store = Store(redis, TTL, quota=quota)
    summaries = SummaryStore(store, lock_seconds=5, failure_seconds=5)
    slot = summaries.dialogue("t", "a transcript", "sid")
    text = random.Random(1).randbytes(3_000).hex().encode()
    await store.put("t", "summary", [Put(slot.key, text, TTL)])
    await asyncio.sleep(USED_BEFORE)
    clock.to_next_window(TTL)
    current, _ = quota.counters("t", clock())
    texts = await summaries.read("t", [slot] * 50)
    assert texts == [text.decode()] * 50
    assert int(await redis.get(current) or 0) == await stored_bytes(redis, "t", "d")
