"""What Redis holds for records and recipes, on the real engine: dictionaries a version
does not know read as missing (never a 500), and the app keeps recipes with the lifetimes
its settings name (tests/service/test_recipes.py: what those lifetimes do)."""

from __future__ import annotations

from typing import Any

import httpx
import zstandard
from redis.asyncio import Redis

from toolref.wire.canonical import digest_of
from toolref.wire.encoding import dumps_json
from toolref_server.app import create_app
from toolref_server.services import Services
from toolref_server.settings import Settings
from toolref_server.storage import record
from toolref_server.storage.store import Store

READ = {"name": "read", "args": {"path": "a.py"}, "result": "print('hi')\n" * 40, "isError": False}


def _newer_dictionary() -> Any:
    """A records dictionary a later version would ship (an id this one lacks)."""
    samples: list[Any] = [dumps_json({"n": n, "text": "line\n" * (n % 40)}) for n in range(400)]
    return zstandard.train_dictionary(4096, samples, dict_id=0x74720002)


async def test_a_record_of_an_unknown_dictionary_reads_as_missing(
    api: httpx.AsyncClient, redis: Redis
) -> None:
    digest = digest_of(READ)
    body = record.body("read", False, record.payload_of(READ), digest.size, 1)
    packed = zstandard.ZstdCompressor(dict_data=_newer_dictionary()).compress(body)
    key = Store.key("local", digest.ref)
    await redis.set(key, bytes((3,)) + digest.sha256 + b"\x01" + packed)
    resolved = await api.post("/v1/invocations:resolve", json={"refs": [str(digest.ref)]})
    assert resolved.status_code == 200, resolved.text
    assert resolved.json() == {"invocations": {}, "missing": [str(digest.ref)]}
    assert await redis.get(key) is None  # deleted, so the client's resend stores it again
    registered = await api.post("/v1/invocations", json={"invocations": [READ]})
    assert registered.json()["refs"][0]["new"] is True
    again = await api.post("/v1/invocations:resolve", json={"refs": [str(digest.ref)]})
    assert again.json()["invocations"][str(digest.ref)] == READ


async def test_the_app_keeps_recipes_with_the_lifetimes_of_its_settings(redis: Redis) -> None:
    """TOOLREF_EDIT_SUPERSEDED_TTL and TOOLREF_EDIT_REFRESH_SECONDS (the history settings
    renamed) reach the recipes the app keeps, each at most the TTL."""
    settings = Settings(
        redis_url="unused",
        ttl_seconds=3000,
        edit_superseded_ttl=120,
        edit_refresh_seconds=900,
        edit_snapshot_every=5,
    )
    app = create_app(settings, redis=redis)
    async with app.router.lifespan_context(app):
        services: Services = app.state.services
        recipes = services.recipes
        assert (recipes.superseded_ttl, recipes.refresh_seconds) == (120, 900)
        assert recipes.snapshot_every == 5
    longer = Settings(redis_url="unused", ttl_seconds=100, edit_superseded_ttl=600)
    app = create_app(longer, redis=redis)
    async with app.router.lifespan_context(app):
        services = app.state.services
        assert services.recipes.superseded_ttl == 100  # the TTL wins
        assert services.recipes.refresh_seconds == 100
