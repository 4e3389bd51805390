"""`commands.Batch`, the store's pipeline on one node, against a real engine: the replies
redis-py's pipeline gives (as the store reads them), an error reply read with the rest, a
pooled connection the engine dropped replaced, and a batch cancelled midway never leaving
its unread replies on a pooled connection."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis, RedisCluster
from redis.exceptions import ResponseError

from toolref_server.storage.commands import Batch
from toolref_server.storage.store import Put, Store

pytestmark = pytest.mark.engine


@pytest.fixture
def node(redis: Redis) -> Redis:
    if isinstance(redis, RedisCluster):
        pytest.skip("a Batch is for one node: a cluster's store uses the cluster pipeline")
    return redis


def queue(pipe: Any) -> None:
    pipe.set("a", b"\x00value\r\n", ex=100)
    pipe.set("a", b"other", nx=True, ex=100)  # there already: not written
    pipe.get("a")
    pipe.getrange("a", 1, 5)
    pipe.strlen("a")
    pipe.expire("a", 50, lt=True)
    pipe.expire("a", 10, gt=True)  # shorter: not applied
    pipe.pttl("a")
    pipe.incrby("n", 7)
    pipe.execute_command("MGET", "a", "missing", "n")
    pipe.delete("a", "missing")
    pipe.get("a")


async def test_a_batch_reads_as_redis_py_s_pipeline_does(node: Redis) -> None:
    batch = Batch(node)
    queue(batch)
    assert len(batch) == 12
    replies = await batch.execute()
    await node.flushall()
    pipe = node.pipeline(transaction=False)
    queue(pipe)
    expected = await pipe.execute()
    assert len(replies) == len(expected) == 12
    for got, want in zip(replies, expected, strict=True):
        assert bool(got) == bool(want)  # SET and EXPIRE: b"OK"/None, 1/0 for True/None
        if not isinstance(want, bool):
            assert got == want or abs(got - want) < 1000  # PTTL: the same lifetime
    assert replies[2] == b"\x00value\r\n"
    assert replies[3] == b"value"
    assert replies[9] == [b"\x00value\r\n", None, b"7"]
    assert await batch.execute() == []  # emptied: nothing sent


async def test_an_error_reply_is_raised_once_every_reply_is_read(node: Redis) -> None:
    batch = Batch(node)
    batch.set("text", b"not a number")
    batch.incrby("text", 1)  # the engine's error reply
    batch.set("after", b"written")
    with pytest.raises(ResponseError, match="not an integer"):
        await batch.execute()
    assert await node.get("after") == b"written"  # the command after it ran
    batch.get("after")
    assert await batch.execute() == [b"written"]  # the connection read to its end


async def test_a_pooled_connection_the_engine_dropped_is_replaced(
    node: Redis, engine_url: str
) -> None:
    await node.set("k", b"v")
    batch = Batch(node)
    batch.execute_command("CLIENT", "ID")
    (pooled,) = await batch.execute()  # the pool's one connection
    killer = Redis.from_url(engine_url)
    try:
        assert await killer.execute_command("CLIENT", "KILL", "ID", pooled) == 1  # type: ignore[no-untyped-call]
    finally:
        await killer.aclose()
    batch.get("k")
    assert await batch.execute() == [b"v"]
    batch.execute_command("CLIENT", "ID")
    assert (await batch.execute())[0] != pooled  # on a new connection


async def test_a_cancelled_batch_leaves_no_reply_on_a_pooled_connection(node: Redis) -> None:
    """A connection given back with a reply unread would answer the next batch with it
    (BLPOP's late nil read as SET's reply). A batch cancelled while its reply is awaited
    drops its connection (as redis-py's own reads do); the next batch gets its own."""
    blocked = Batch(node)
    blocked.execute_command("BLPOP", "queue", "0.3")  # replies nil after 0.3 s
    task = asyncio.create_task(blocked.execute())
    while not await _blocked(node):  # noqa: ASYNC110 (the engine's state: no event to wait on)
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    batch = Batch(node)
    batch.set("x", b"1")
    batch.get("x")
    assert await batch.execute() == [b"OK", b"1"]
    await asyncio.sleep(0.4)  # past the BLPOP's timeout: a late nil would be read now
    batch.get("x")
    assert await batch.execute() == [b"1"]


async def _blocked(node: Redis) -> bool:
    info = await node.info("clients")
    return int(info.get("blocked_clients", 0)) > 0


async def test_the_store_writes_and_reads_through_batches(node: Redis) -> None:
    store = Store(node, ttl_seconds=100)
    assert isinstance(store.pipeline(), Batch)
    written = await store.put(
        "t", "write", [Put("t:a", b"1", 100), Put("t:b", b"2", 100, keep=True)]
    )
    assert written == [True, True]
    assert await store.put("t", "write", [Put("t:b", b"3", 100, keep=True)]) == [False]
    assert await store.get_many(["t:a", "t:b", "t:c"], "read") == [b"1", b"2", None]
    assert not isinstance(Store(node, ttl_seconds=100, batches=False).pipeline(), Batch)
