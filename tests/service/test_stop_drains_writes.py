"""A stop waits for the store writes a channel's turns left to run after their answers
(`UnderWay.drained`, the lifespan's last steps before the store's client closes): one cut
would cost its conversation's next turn a resend. Bounded: a write that never ends is
left after twice the store's command deadline, with a warning."""

from __future__ import annotations

import asyncio
import logging

import pytest
from redis.asyncio import Redis

from toolref_server.app import create_app
from toolref_server.settings import Settings
from toolref_server.storage.under_way import RECIPE

pytestmark = pytest.mark.engine


async def test_a_stop_waits_for_a_write_under_way(redis: Redis) -> None:
    app = create_app(Settings(redis_url="unused"), redis=redis)
    release = asyncio.Event()
    written: list[str] = []

    async def write() -> None:
        await release.wait()
        await redis.set("t:written", b"1")
        written.append("recipe")

    async with app.router.lifespan_context(app):
        under_way = app.state.services.recipes.under_way
        under_way.add((RECIPE, "t", "tb_x"), asyncio.create_task(write()))
        asyncio.get_running_loop().call_soon(release.set)  # runs while the stop waits
    assert written == ["recipe"]
    assert await redis.get("t:written") == b"1"


async def test_a_write_that_never_ends_is_left_with_a_warning(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(Settings(redis_url="unused", redis_timeout=0.05), redis=redis)
    never = asyncio.Event()
    async with app.router.lifespan_context(app):
        task = asyncio.create_task(never.wait())
        app.state.services.recipes.under_way.add((RECIPE, "t", "tb_y"), task)
    assert not task.done()
    assert any("1 store writes still running" in r.getMessage() for r in caplog.records)
    assert any(r.levelno == logging.WARNING for r in caplog.records)
    task.cancel()
