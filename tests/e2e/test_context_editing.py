"""Context editing with real agents (issue 41): Claude Code and Codex through relay and
gateway, editing on, against the scripted fake provider, on a long task whose commands print
a few KB each; near its end the model runs its first command again.

The session completes; the provider sees summaries where the old results were (the last
ones whole); and the result the model asked for again is the tool run again: the command
ran twice, and its second result reaches the provider whole while the first stays a
summary. The gateway's policy is set small (the results here are a few KB, not tens), so
the path is the one a long session takes. Claude Code sends `context_management` on every
request, clearing only its old thinking: its tool results are edited (the default policy).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from starlette.types import ASGIApp

from tests.conftest import client_for
from tests.support import agents
from tests.support.chain import KEY, UPSTREAM, relay_chain
from tests.support.fake_provider import FINAL_TEXT, FakeProvider, LongScript, marker, tool_results
from tests.support.fake_provider.wire import Api
from tests.support.servers import serve

from .test_agents import diagnostics, installed

pytestmark = pytest.mark.e2e

CALLS = 16
AGAIN = CALLS - 2  # the step that runs step 0's command again
LINES = 250  # lines each shell step prints after its marker: a few KB of output
POLICY: dict[str, Any] = {
    "context_editing": "on",
    "context_trigger_tokens": 2_000,
    "context_keep": 3,
    "context_min_tokens": 64,
    "context_clear_at_least": 300,
    "context_rewrite_weight": 0.0,
}


@asynccontextmanager
async def edited_gateway(engine_url: str, upstream: str) -> AsyncIterator[ASGIApp]:
    from toolref_server.app import create_app
    from toolref_server.settings import Settings

    redis = client_for(engine_url)
    try:
        await redis.flushall()
        tenant = f"e2e={hashlib.sha256(KEY.encode()).hexdigest()}"
        settings = Settings(
            redis_url="unused", upstreams=f"{UPSTREAM}={upstream}", api_keys=tenant, **POLICY
        )
        yield create_app(settings, redis=redis)
    finally:
        await redis.aclose()


@pytest.mark.parametrize("name", ["claude", "codex"])
async def test_a_long_session_completes_with_old_results_summarized(
    name: str, tmp_path: Path, engine_url: str
) -> None:
    cli = installed(agents.SESSION_CLIS[name])
    workdir, home = tmp_path / "work", tmp_path / "home"
    script = LongScript(CALLS, workdir, kinds=("shell", "shell", "read"), lines=LINES, again=AGAIN)
    fake = FakeProvider(script, dump=tmp_path / "requests")
    chain = relay_chain(lambda url: edited_gateway(engine_url, url), tmp_path / "relay.log")
    async with serve(fake.app) as fake_url, chain(fake_url) as hops:
        run = await agents.run(cli, hops.base, workdir, home)

    assert run.returncode == 0, diagnostics(run, fake)
    assert FINAL_TEXT in run.stdout, diagnostics(run, fake)
    api: Api = cli.api
    last = tool_results(api, fake.turns(api)[-1].json())
    assert len(last) >= CALLS
    summarized = [k for k, text in enumerate(last) if "[toolref:" in text]
    # the old shell results reach the provider as summaries, the last ones whole
    assert 0 in summarized, [t[:120] for t in last]
    assert len(summarized) >= 3
    assert all(k < len(last) - 3 for k in summarized)
    for k in summarized:
        assert "bytes of this result cleared; call " in last[k]
        assert len(last[k]) < 700 < len(last[-1])  # a summary; the output whole
    # asked for again: the command ran twice, and its second result is whole
    assert (workdir / "runs-00.txt").read_text().split() == ["ran", "ran"]
    again = last[AGAIN]
    assert marker(0) in again
    assert "[toolref:" not in again
    assert f"\n{LINES}" in again or f"{LINES}\n" in again
