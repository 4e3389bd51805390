"""What only a cluster does (the cluster pass, `TOOLREF_TEST_CLUSTER=1`; skipped on one
node): batched reads while a slot is resharded (a slot being migrated holds some of its keys
on the node it leaves and the others on the node it goes to, and a command naming keys on
both is refused TRYAGAIN until the move ends, which the cluster client resends until it
gives up), and the weaker guarantee of a counted write that fails part-way, where no
transaction reaches (`Store.writes`)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, cast

import httpx
import pytest
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.crc import key_slot

from tests.adversarial.test_server_quotas import Clock, counted_bytes, stored_bytes
from toolref.wire.errors import QuotaExceededError, StoreUnavailableError
from toolref_server.app import create_app
from toolref_server.settings import Settings
from toolref_server.storage import keys
from toolref_server.storage.quotas import StoredBytes
from toolref_server.storage.store import Put, Store

pytestmark = pytest.mark.engine

TTL = 600


def same_slot(count: int) -> tuple[int, list[str]]:
    """`count` recipe-node keys of one tenant that share a hash slot (keys carry no hash
    tag, so a batch of a few hundred has two in one slot more often than not)."""
    found: dict[int, list[str]] = {}
    n = 0
    while True:
        key = keys.recipe_node("t", f"tb_{n:026d}")
        slot = key_slot(key.encode())
        found.setdefault(slot, []).append(key)
        if len(found[slot]) == count:
            return slot, found[slot]
        n += 1


@dataclass
class Move:
    """Slot `slot` migrating from `source` to `target` (CLUSTER SETSLOT, MIGRATE)."""

    redis: RedisCluster
    slot: int
    source: ClusterNode
    target: ClusterNode

    async def _id(self, node: ClusterNode) -> str:
        found = await self.redis.execute_command("CLUSTER", "MYID", target_nodes=node)
        return found.decode() if isinstance(found, bytes) else str(found)

    async def begin(self) -> None:
        source, target = await self._id(self.source), await self._id(self.target)
        await self.redis.execute_command(
            "CLUSTER", "SETSLOT", self.slot, "IMPORTING", source, target_nodes=self.target
        )
        await self.redis.execute_command(
            "CLUSTER", "SETSLOT", self.slot, "MIGRATING", target, target_nodes=self.source
        )

    async def migrate(self, names: list[str]) -> None:
        await self.redis.execute_command(
            "MIGRATE", self.target.host, self.target.port, "", 0, 5000, "KEYS", *names,
            target_nodes=self.source,
        )  # fmt: skip

    async def end(self) -> None:
        """Every key of the slot moved, the slot the target's on every primary."""
        while left := await self.redis.execute_command(
            "CLUSTER", "GETKEYSINSLOT", self.slot, 100, target_nodes=self.source
        ):
            await self.migrate([k.decode() if isinstance(k, bytes) else k for k in left])
        target = await self._id(self.target)
        for node in [self.target, self.source, *self.redis.get_primaries()]:
            await self.redis.execute_command(
                "CLUSTER", "SETSLOT", self.slot, "NODE", target, target_nodes=node
            )


@pytest.fixture
async def cluster(redis: Redis) -> RedisCluster:
    if not isinstance(redis, RedisCluster):
        pytest.skip("one node: nothing of a cluster's (the cluster pass runs this)")
    return redis


def node_of(redis: RedisCluster, key: str) -> str:
    """The name of the primary holding `key`'s slot."""
    node = redis.get_node_from_key(key)
    assert node is not None
    return node.name


def moving(redis: RedisCluster, slot: int) -> Move:
    """`slot` about to move from its node to another primary."""
    source = redis.nodes_manager.get_node_from_slot(slot)
    target = next(n for n in redis.get_primaries() if n.name != source.name)
    return Move(redis, slot, source, target)


async def test_a_batch_reads_whole_while_its_slot_is_half_moved(cluster: RedisCluster) -> None:
    """Found in review: a batch was read with one MGET per slot, so two of its keys in a
    slot half moved (one on each node) were refused TRYAGAIN, resent until the client gave
    up after 16 tries, and the read answered 503 (a recipe not loaded: the turn's edit
    refused), each counting a failure toward opening the store's breaker for everyone.
    On a cluster each key is now read with its own GET, which follows its own ASK."""
    store = Store(cluster, TTL)
    slot, pair = same_slot(2)
    spread = [keys.recipe_node("t", f"tb_{n:026d}") for n in range(3)]  # other slots
    names = [*pair, *spread]
    await store.put("t", "test", [Put(k, k.encode(), TTL) for k in names])
    expected: list[Any] = [k.encode() for k in names]
    move = moving(cluster, slot)
    await move.begin()
    try:
        await move.migrate(pair[:1])  # one key on each node
        assert await store.get_many(names, "test") == expected
        assert await store.read_and_touch("t", names, "test") == expected
        assert store.breaker.sound
    finally:
        await move.end()
    assert await store.get_many(names, "test") == expected  # the slot's new node answers


async def test_a_counted_write_failing_on_one_node_is_off_until_its_windows_end(
    cluster: RedisCluster,
) -> None:
    """What `Store.writes` states for a cluster, where no transaction spans the slots: a
    write the engine fails part-way (one node out of memory) is answered 503 and may leave
    some of its values kept and its bytes counted, the count off until its windows end (the
    counter read in its own window and the next: two TTLs at most), and no longer."""
    clock = Clock(TTL)
    quota = StoredBytes(5_000_000, TTL, clock=clock)
    store = Store(cluster, TTL, quota=quota)
    counter, _ = quota.counters("t", clock())
    home = node_of(cluster, counter)
    full = next(n for n in cluster.get_primaries() if n.name != home)
    names = [keys.answer("t", f"tb_{n:026d}") for n in range(200)]
    refused = next(k for k in names if node_of(cluster, k) == full.name)
    kept = next(k for k in names if node_of(cluster, k) == home)
    value = random.Random(1).randbytes(2_000_000)
    memory: Any = await cluster.info("memory", target_nodes=full)
    await cluster.config_set("maxmemory", memory["used_memory"] + 1_000_000, target_nodes=full)
    try:
        with pytest.raises(StoreUnavailableError):
            await store.put("t", "answer", [Put(refused, value, TTL), Put(kept, value, TTL)])
    finally:
        await cluster.config_set("maxmemory", 0, target_nodes=full)
    # Part-way: one value kept, both counted.
    engine = cast(Redis, cluster)  # the commands both share
    assert await stored_bytes(engine, "t") == len(value)
    assert await counted_bytes(engine, "t") == 2 * len(value)
    assert 0 < await cluster.pttl(counter) <= quota.counter_lifetime * 1000
    with pytest.raises(QuotaExceededError):  # 4 MB counted and 2 MB more: over the 5 MB
        await store.put("t", "answer", [Put(refused, value, TTL)])
    clock.to_next_window(TTL)
    clock.to_next_window(TTL)  # the count's windows ended: the same write fits
    await store.put("t", "answer", [Put(refused, value, TTL)])


async def test_a_clusters_node_reached_as_one_engine_is_said_not_ready(
    cluster: RedisCluster, redis: Redis
) -> None:
    """Found in review: `TOOLREF_REDIS_URL=redis://` at a node of a cluster answered every
    request 503 (MOVED on the other nodes' slots) while `/readyz`, which only PINGs, said
    ready. Now `/readyz` answers 503 naming the fix (and the start logs it); the cluster
    client, and one engine, are ready."""
    node = cluster.get_primaries()[0]
    plain = Redis(host=node.host, port=int(node.port))
    try:
        why = await Store(plain, TTL).misrouted()
        assert why is not None
        assert "redis+cluster://" in why
        assert await Store(cluster, TTL).misrouted() is None
        app = create_app(Settings(redis_url="unused"), redis=plain)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://localhost:8750"
            ) as client,
        ):
            ready = await client.get("/readyz")
        assert ready.status_code == 503
        assert "TOOLREF_REDIS_CLUSTER=true" in ready.json()["detail"]
    finally:
        await plain.aclose()


async def test_one_engine_is_not_misrouted(redis: Redis) -> None:
    if isinstance(redis, RedisCluster):
        pytest.skip("the cluster pass: its nodes are, as one engine (the test above)")
    assert await Store(redis, TTL).misrouted() is None
