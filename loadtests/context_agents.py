"""Context editing on `make e2e`'s long agent sessions: Claude Code and Codex (the pinned
installs of `make e2e`) through `toolref relay` and the service's gateway against the
scripted fake provider, a session of `CALLS` tool calls whose commands print about 4 KB
each, as a file read does (`LongScript`, as tests/e2e/test_context_editing.py runs it),
once with context editing on (the default policy) and once off. Per session: the bodies
the provider got, for `context_bench`'s tokens, cost and rewrites.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Final

from starlette.types import ASGIApp
from tests.support import agents
from tests.support.agents import CLIS, Cli, missing_node
from tests.support.chain import KEY, UPSTREAM, relay_chain
from tests.support.fake_provider import FakeProvider, LongScript
from tests.support.servers import serve

from toolref.wire.endpoints import Endpoint
from toolref_server.app import create_app
from toolref_server.embedded import EmbeddedEngine
from toolref_server.settings import Settings

CALLS: Final = 40  # tool calls of each session
LINES: Final = 1000  # lines each shell step prints after its marker (about 4 KB: a file read)
SESSIONS: Final = ("claude", "codex")
ENDPOINTS: Final = {  # the fake provider's API names, as the gateway reads them
    "messages": Endpoint("anthropic", "messages"),
    "chat": Endpoint("openai-chat", "messages"),
    "responses": Endpoint("openai-responses", "input"),
    "gemini": Endpoint("gemini", "contents"),
}


def _gateway(
    engine_url: str, editing: str
) -> Callable[[str], AbstractAsyncContextManager[ASGIApp]]:
    @asynccontextmanager
    async def gateway(upstream: str) -> AsyncIterator[ASGIApp]:
        tenant = f"e2e={hashlib.sha256(KEY.encode()).hexdigest()}"
        settings = Settings(
            redis_url=engine_url,
            upstreams=f"{UPSTREAM}={upstream}",
            api_keys=tenant,
            context_editing=editing,
        )
        yield create_app(settings)

    return gateway


async def _session(cli: Cli, editing: str, engine_url: str, scratch: Path) -> list[bytes]:
    """The bodies of the session's turns as the provider got them."""
    workdir = scratch / f"{cli.name}-{editing}-work"
    home = scratch / f"{cli.name}-{editing}-home"
    script = LongScript(CALLS, workdir, kinds=("shell", "shell", "read"), lines=LINES)
    fake = FakeProvider(script)
    chain = relay_chain(_gateway(engine_url, editing), scratch / f"{cli.name}-{editing}.log")
    async with serve(fake.app) as fake_url, chain(fake_url) as hops:
        run = await agents.run(cli, hops.base, workdir, home)
    if run.returncode != 0:
        raise RuntimeError(f"{cli.name} (editing {editing}) exited {run.returncode}: {run.stderr}")
    return [record.body for record in fake.turns(cli.api)]


async def sessions() -> dict[str, tuple[list[bytes], list[bytes], Endpoint]]:
    """Per CLI: the provider's bodies with editing on, and off, and the endpoint they
    went to; none where node or the CLIs cannot run here (the bench says so)."""
    if missing_node() is not None:
        return {}
    found = {}
    with tempfile.TemporaryDirectory() as scratch:
        engine = EmbeddedEngine(str(Path(scratch) / "data"))
        url = engine.start()
        try:
            for name in SESSIONS:
                cli = CLIS[name]
                agents.install(cli)
                on = await _session(cli, "on", url, Path(scratch))
                off = await _session(cli, "off", url, Path(scratch))
                found[f"{name}, {CALLS} calls"] = (on, off, ENDPOINTS[cli.api])
        finally:
            engine.stop()
    return found
