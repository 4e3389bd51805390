"""`toolref-server cache export` and `cache import` between two real engines."""

from __future__ import annotations

import gc
import io
import os
import subprocess
import sys
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO, Any, cast

import httpx
import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis

from tests.support.processes import ROOT, clean_env
from toolref.wire.canonical import digest_key
from toolref_server import export
from toolref_server.app import create_app
from toolref_server.embedded import EmbeddedEngine, valkey_server_binary
from toolref_server.settings import Settings
from toolref_server.storage import keyspace

from ..conftest import ON_CLUSTER, key_names, need

# Between two embedded engines; tests/cluster/test_cluster_export.py moves a cluster's keys.
pytestmark = pytest.mark.skipif(ON_CLUSTER, reason="exports between two embedded engines")

RECORDS = 10_000


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[tuple[EmbeddedEngine, EmbeddedEngine]]:
    try:
        valkey_server_binary()
    except Exception as exc:
        need(f"no valkey-server binary: {exc}")
    first = EmbeddedEngine(tmp_path / "a", config={"appendonly": "no"})
    second = EmbeddedEngine(tmp_path / "b", config={"appendonly": "no"})
    first.start()
    second.start()
    yield first, second
    first.stop()
    second.stop()


async def api_on(url: str, stack: list[Any], api_keys: str = "") -> httpx.AsyncClient:
    redis = Redis.from_url(url)
    app = create_app(Settings(redis_url="unused", api_keys=api_keys), redis=redis)
    lifespan = app.router.lifespan_context(app)
    await lifespan.__aenter__()
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://localhost:8750",
        headers={"Toolref-Protocol": "2"},
    )
    stack.append((client, lifespan, redis))
    return client


@pytest.fixture
async def stack() -> AsyncIterator[list[Any]]:
    opened: list[Any] = []
    yield opened
    for client, lifespan, redis in opened:
        await client.aclose()
        await lifespan.__aexit__(None, None, None)
        await redis.aclose()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolref_server.cli", "cache", *args],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def invocation(n: int) -> dict[str, Any]:
    return {
        "name": "read_file",
        "args": {"path": f"src/module_{n}.py"},
        "result": f"# module {n}\n" + "x = 1\n" * (n % 50),
        "isError": n % 97 == 0,
    }


@pytest.mark.slow
async def test_ten_thousand_records_resolve_identically_after_export_and_import(
    engines: tuple[EmbeddedEngine, EmbeddedEngine], stack: list[Any], tmp_path: Path
) -> None:
    source, target = engines
    before = await api_on(source.url, stack)
    refs: list[str] = []
    for start in range(0, RECORDS, 1000):
        batch = [invocation(n) for n in range(start, start + 1000)]
        answer = await before.post("/v1/invocations", json={"invocations": batch})
        refs.extend(r["ref"] for r in answer.json()["refs"])
    summary = (await before.get(f"/v1/invocations/{refs[0]}/summary")).json()
    original: dict[str, Any] = {}
    for start in range(0, RECORDS, 1000):
        answer = await before.post(
            "/v1/invocations:resolve", json={"refs": refs[start : start + 1000]}
        )
        original.update(answer.json()["invocations"])
    assert len(original) == RECORDS

    dump = tmp_path / "registry.trx"
    exported = cli("export", str(dump), "--redis-url", source.url)
    assert exported.returncode == 0, exported.stderr
    assert f"exported {RECORDS + 1} keys" in exported.stderr
    imported = cli("import", str(dump), "--redis-url", target.url)
    assert imported.returncode == 0, imported.stderr
    assert f"imported {RECORDS + 1} keys (0 already present)" in imported.stderr
    again = cli("import", str(dump), "--redis-url", target.url)
    assert f"imported 0 keys ({RECORDS + 1} already present)" in again.stderr  # idempotent

    after = await api_on(target.url, stack)
    restored: dict[str, Any] = {}
    for start in range(0, RECORDS, 1000):
        answer = await after.post(
            "/v1/invocations:resolve", json={"refs": refs[start : start + 1000]}
        )
        assert answer.json()["missing"] == []
        restored.update(answer.json()["invocations"])
    assert restored == original
    cached = (await after.get(f"/v1/invocations/{refs[0]}/summary")).json()
    assert cached["summary"] == summary["summary"]
    assert cached["cached"] is True  # the summary came across too
    redis = Redis.from_url(target.url)
    ttl = await redis.ttl(f"tr:local:i:{refs[5][3:]}")
    await redis.aclose()
    assert 0 < ttl <= 86_400  # lifetimes came across


async def test_export_of_one_tenant(
    engines: tuple[EmbeddedEngine, EmbeddedEngine], stack: list[Any], tmp_path: Path
) -> None:
    from toolref_server.http.auth import hash_key

    source, target = engines
    keys = f"acme={hash_key('a')},globex={hash_key('g')}"
    acme = await api_on(source.url, stack, keys)
    await acme.post(
        "/v1/invocations",
        json={"invocations": [invocation(1)]},
        headers={"Authorization": "Bearer a"},
    )
    await acme.post(
        "/v1/invocations",
        json={"invocations": [invocation(2)]},
        headers={"Authorization": "Bearer g"},
    )
    dump = tmp_path / "acme.trx"
    assert cli("export", str(dump), "--redis-url", source.url, "--tenant", "acme").returncode == 0
    assert cli("import", str(dump), "--redis-url", target.url).returncode == 0
    redis = Redis.from_url(target.url)
    names = await key_names(redis)
    await redis.aclose()
    assert len(names) == 1
    assert names[0].startswith("tr:acme:i:")


def test_import_refuses_a_file_that_is_not_an_export(tmp_path: Path) -> None:
    import zstandard

    bogus = tmp_path / "bogus.trx"
    bogus.write_bytes(zstandard.compress(b"\x93\x01\x02\x03"))
    result = cli("import", str(bogus), "--redis-url", "redis://127.0.0.1:1")
    assert result.returncode == 2
    assert "not a toolref export" in result.stderr


class _Discard(io.RawIOBase):
    """An export's sink that keeps nothing (only the export's own memory is measured)."""

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return len(data)


async def test_an_export_holds_one_bounded_page_of_values_whatever_their_size(
    redis: Redis, engine_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found: export read its keys 500 to a pipeline whatever their values' size (500
    records of 30 MB: 15 GB held at once). Now a page also stops at `PAGE_BYTES` of values
    (a larger value alone), asked by STRLEN first."""
    page = 256 << 10
    monkeypatch.setattr(keyspace, "PAGE_BYTES", page)
    sizes = [100 << 10] * 80 + [400 << 10]  # the last one past a page alone
    for size in sizes:
        key = f"tr:acme:i:{digest_key(os.urandom(16))}"
        await redis.set(key, os.urandom(size), ex=3_600)
    client = SyncRedis.from_url(engine_url)
    try:
        pages = list(keyspace.items(client, "acme"))
        gc.collect()
        tracemalloc.start()
        try:
            assert export.export(client, cast(IO[bytes], _Discard()), "acme") == len(sizes)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    finally:
        client.close()
    held = [sum(len(value) for _, value, _ in found) for found in pages]
    assert sorted(len(value) for found in pages for _, value, _ in found) == sorted(sizes)
    assert max(held) <= max(page, 400 << 10), held
    print(f"\nexport of {sum(sizes)} bytes: pages of at most {max(held)}, peak {peak}")
    assert peak < sum(sizes) // 2, peak  # not every value at once (before: 1.3 times them)
