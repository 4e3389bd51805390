"""The latest Codex on its built-in OpenAI provider, which prefers the Responses
WebSocket, through `toolref relay` and the service's gateway to the fake provider's
WebSocket mode (and straight to the fake, for the time it takes there).

Before WebSocket mode the relay's upgrade was answered 500: Codex printed `Reconnecting...
2/5` to `5/5`, lost about 7 s, warned "Falling back from WebSockets to HTTPS transport", and
sent its whole history over HTTP each turn. Here it must stay on its WebSocket: no such
line, every turn a `response.create` message at the provider (none over HTTP), the session
complete, each tool call run for real.

`gpt-5-codex` runs the scripted session (`exec_command` tool calls); Codex's default model
(which calls tools through a JavaScript `exec` tool the script does not write) runs one
turn, answered with text, over the same transport.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import pytest

from tests.conftest import client_for
from tests.e2e.test_agents import installed
from tests.support import agents
from tests.support.chain import free_port, relay_command, wait_listening
from tests.support.fake_provider import (
    FINAL_TEXT,
    SIDE_TEXT,
    FakeProvider,
    Script,
    marker,
    step_file,
)
from tests.support.servers import serve

pytestmark = pytest.mark.e2e

CALLS = int(os.environ.get("TOOLREF_E2E_CALLS", "20"))
KEY = "e2e-ws-tenant-key"
FALLBACK_SIGNS = ("Reconnecting", "Falling back", "falling back")


@asynccontextmanager
async def relayed(fake_url: str, engine_url: str, log: Path) -> AsyncIterator[str]:
    """agent -> `toolref relay` (a process) -> gateway (in process) -> the fake; yields the
    agent's base URL."""
    from toolref_server.app import create_app
    from toolref_server.settings import Settings

    async with AsyncExitStack() as stack:
        redis = client_for(engine_url)
        stack.push_async_callback(redis.aclose)
        await redis.flushall()
        settings = Settings(
            redis_url="unused",
            upstreams=f"fake={fake_url}",
            api_keys=f"e2e={hashlib.sha256(KEY.encode()).hexdigest()}",
        )
        gateway_url = await stack.enter_async_context(serve(create_app(settings, redis=redis)))
        port = free_port()
        out = stack.enter_context(log.open("ab"))
        process = await asyncio.create_subprocess_exec(
            *relay_command(gateway_url, port),
            env={**os.environ, "TOOLREF_KEY": KEY},
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
        )

        async def stop() -> None:
            if process.returncode is None:
                process.terminate()
                await asyncio.wait_for(process.wait(), 10)

        stack.push_async_callback(stop)
        await wait_listening(port, process, 30)
        yield f"http://127.0.0.1:{port}/llm/fake"


def _no_fallback(run: agents.Run) -> None:
    said = run.stdout + run.stderr
    for sign in FALLBACK_SIGNS:
        assert sign not in said, f"{sign!r} in Codex's output:\n{said[-3000:]}"


@pytest.mark.parametrize("chain", ["relay", "direct"])
async def test_codex_stays_on_its_websocket_through_the_relay(
    chain: str, tmp_path: Path, engine_url: str
) -> None:
    cli = installed(agents.CODEX_WS)
    workdir, home = tmp_path / "work", tmp_path / "home"
    script = Script(CALLS, workdir)
    fake = FakeProvider(script, dump=tmp_path / "requests")
    log = tmp_path / "relay.log"
    async with serve(fake.app) as fake_url, AsyncExitStack() as stack:
        base = fake_url
        if chain == "relay":
            base = await stack.enter_async_context(relayed(fake_url, engine_url, log))
        run = await agents.run(cli, base, workdir, home, model="gpt-5-codex")
    relay_lines = log.read_text(errors="replace") if log.exists() else ""
    frames = [r for r in fake.requests if r.method == "WS"]
    print(
        f"\ncodex {cli.version} (gpt-5-codex) via {chain}: exit {run.returncode} in "
        f"{run.seconds:.2f} s, {len(fake.sockets)} socket(s), {len(frames)} messages, "
        f"bytes per message {[len(r.wire) for r in frames]}"
    )
    if chain == "relay":
        said = [line for line in relay_lines.splitlines() if " turn " in line]
        print("\n".join(said[-3:]))
    detail = f"{run.stdout[-2000:]}\n{run.stderr[-3000:]}\n{relay_lines[-2000:]}"
    assert run.returncode == 0, detail
    assert FINAL_TEXT in run.stdout, detail
    _no_fallback(run)
    # Every turn came over the WebSocket: none over HTTP.
    assert fake.sockets, detail
    assert not [r for r in fake.requests if r.method == "POST"], detail
    assert all(json.loads(r.wire)["type"] == "response.create" for r in frames)
    turns = fake.turns("responses")
    assert turns[-1].answer == "text"
    assert turns[-1].results >= CALLS
    for k in range(CALLS):
        if script.kind(k) == "shell":
            assert step_file(workdir, k).read_text().strip() == marker(k)
    # After the first turn each message carries only what is new (previous_response_id).
    continued = [json.loads(r.wire) for r in turns[1:]]
    assert all("previous_response_id" in event for event in continued)


async def test_codex_on_its_default_model_completes_a_turn_over_the_relay(
    tmp_path: Path, engine_url: str
) -> None:
    cli = installed(agents.CODEX_WS)
    workdir, home = tmp_path / "work", tmp_path / "home"
    fake = FakeProvider(Script(0, workdir))
    async with (
        serve(fake.app) as fake_url,
        relayed(fake_url, engine_url, tmp_path / "relay.log") as base,
    ):
        run = await agents.run(cli, base, workdir, home, prompt="Say hello.")
    print(f"\ncodex {cli.version} (default model) via relay: {run.seconds:.2f} s")
    assert run.returncode == 0, run.stderr[-3000:]
    assert SIDE_TEXT in run.stdout or FINAL_TEXT in run.stdout, run.stdout[-2000:]
    _no_fallback(run)
    assert fake.sockets
    assert not [r for r in fake.requests if r.method == "POST"]
