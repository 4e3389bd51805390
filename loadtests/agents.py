"""The relay under the real agent CLIs: Claude Code, Codex and Qwen Code (the pinned npm
installs of `make e2e`), each through a scripted session of 20 tool calls against the fake
provider of tests/support, once straight to the provider and once through `toolref relay` and
the service's gateway, in the same run.

Per CLI and per turn: the bytes the agent sent, the bytes the relay sent the gateway, and
the time to the answer's first byte at the agent's end of the chain (a recording proxy in
front of the provider, or of the relay), straight and relayed.

    python -m loadtests.agents
"""

from __future__ import annotations

import asyncio
import hashlib
import statistics
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from starlette.types import ASGIApp
from tests.support import agents
from tests.support.agents import CLIS, Cli, missing_node
from tests.support.chain import KEY, UPSTREAM, Hops, direct, relay_chain
from tests.support.fake_provider import FakeProvider, Recorded, Script
from tests.support.servers import serve

from loadtests.report import Section
from toolref_server.app import create_app
from toolref_server.embedded import EmbeddedEngine
from toolref_server.settings import Settings

TARGET: Final = 20.0  # issue 20: agent bytes over relay bytes, over a 20-turn session
CALLS: Final = 20
SETTLE: Final = {"qwen": 0.3}  # as tests/e2e/test_agents.py: Qwen Code may lose fast output


@dataclass(frozen=True)
class Session:
    """One CLI's session through one chain: per turn, bytes in and out of the relay (the
    same for both when straight) and the time to first byte at the agent's end."""

    agent: list[int]
    relay: list[int]
    first_byte: list[float]


def _llm(records: list[Recorded]) -> list[int]:
    """Indexes of the LLM requests (token counts left out)."""
    return [
        i
        for i, r in enumerate(records)
        if r.method == "POST" and "/v1/" in r.path and "count_tokens" not in r.path
    ]


def _session(hops: Hops) -> Session:
    first = hops.first
    sent = _llm(first.requests)
    agent = [len(first.requests[i].wire) for i in sent]
    times = [first.first_byte[i] for i in sent]
    if hops.chain == "direct":
        return Session(agent, agent, times)
    to_gateway = hops.hops[1]
    relay = [len(to_gateway.requests[i].wire) for i in _llm(to_gateway.requests)]
    return Session(agent, relay, times)


def _gateway(engine_url: str) -> Callable[[str], AbstractAsyncContextManager[ASGIApp]]:
    @asynccontextmanager
    async def gateway(upstream: str) -> AsyncIterator[ASGIApp]:
        tenant = f"e2e={hashlib.sha256(KEY.encode()).hexdigest()}"
        settings = Settings(
            redis_url=engine_url, upstreams=f"{UPSTREAM}={upstream}", api_keys=tenant
        )
        yield create_app(settings)

    return gateway


async def _run_one(cli: Cli, chain: str, engine_url: str, scratch: Path) -> Session:
    workdir, home = scratch / f"{cli.name}-{chain}-work", scratch / f"{cli.name}-{chain}-home"
    script = Script(CALLS, workdir, settle=SETTLE.get(cli.name, 0.0))
    fake = FakeProvider(script)
    chosen = (
        direct if chain == "direct" else relay_chain(_gateway(engine_url), scratch / "relay.log")
    )
    async with serve(fake.app) as fake_url, chosen(fake_url) as hops:
        run = await agents.run(cli, hops.base, workdir, home)
        if run.returncode != 0:
            raise RuntimeError(f"{cli.name} via {chain} exited {run.returncode}: {run.stderr}")
        return _session(hops)


async def _run(clis: list[Cli]) -> dict[str, tuple[Session, Session]]:
    found = {}
    with tempfile.TemporaryDirectory() as scratch:
        engine = EmbeddedEngine(str(Path(scratch) / "data"))
        url = engine.start()
        try:
            for cli in clis:
                straight = await _run_one(cli, "direct", url, Path(scratch))
                relayed = await _run_one(cli, "relay", url, Path(scratch))
                found[cli.name] = (straight, relayed)
        finally:
            engine.stop()
    return found


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def run() -> list[Section]:
    """Two sections: per CLI, and per CLI and turn; none where node or the CLIs cannot be
    had (`make bench` installs them first)."""
    reason = missing_node()
    if reason is not None:
        print(f"agents bench skipped: {reason}", file=sys.stderr)
        return []
    clis = list(CLIS.values())
    for cli in clis:
        agents.install(cli)
    sessions = asyncio.run(_run(clis))
    totals, turns, verdicts = [], [], []
    for cli in clis:
        straight, relayed = sessions[cli.name]
        name = f"{cli.package}@{cli.version}"
        sent, wire = sum(relayed.agent), sum(relayed.relay)
        totals.append(
            [
                name,
                f"{sent / 1e3:.1f} KB",
                f"{wire / 1e3:.1f} KB",
                _ms(statistics.median(straight.first_byte)),
                _ms(statistics.median(relayed.first_byte)),
                f"{sent / wire:.1f}x",
            ]
        )
        for turn, (a, r, d, t) in enumerate(
            # A resend (none in these sessions) would shift the relay column by one.
            zip(
                relayed.agent, relayed.relay, straight.first_byte, relayed.first_byte, strict=False
            ),
            start=1,
        ):
            turns.append([cli.name, str(turn), f"{a:,}", f"{r:,}", f"{a / r:.1f}x", _ms(d), _ms(t)])
        met = "met" if sent >= TARGET * wire else "missed"
        verdicts.append(
            f"{name}: over {len(relayed.agent)} requests the agent sent {sent / wire:.1f}x the "
            f"bytes the relay sent (target {TARGET:.0f}x): {met}."
        )
    intro = (
        "Claude Code, Codex and Qwen Code (pinned as in `make e2e`), each through a "
        f"session of {CALLS} tool calls it runs for real, against the fake provider of "
        "tests/support (its own API, streamed); once straight to the provider, once through "
        "`toolref relay` (a process) and the service's gateway on an embedded engine. "
        "`agent sent` is each request body as the agent put it on the wire, `relay sent` "
        "each body the relay sent the gateway (resends included). Time to first byte is "
        "measured at the agent's end of the chain (a recording proxy in front of the "
        "provider, or of the relay; the relayed chain has two more such proxies, between "
        "relay and gateway and between gateway and provider), from the whole request to "
        "the answer's first byte; medians over the session. The fake's tool results are "
        "small: these sessions are mostly `tools` and system prompt, which the relay's edits "
        "keep by reference after the first turn (docs/edits.md). Command: `make bench` (these "
        "sections alone: `python -m loadtests.agents`)."
    )
    return [
        Section(
            title="Relay: the agent CLIs",
            intro=intro,
            header=["CLI", "agent sent", "relay sent", "TTFB direct", "TTFB relayed", "ratio"],
            rows=totals,
            verdicts=verdicts,
        ),
        Section(
            title="Relay: the agent CLIs, per turn",
            intro="The sessions above, request by request (bytes are request bodies).",
            header=[
                "CLI",
                "turn",
                "agent sent",
                "relay sent",
                "ratio",
                "TTFB direct",
                "TTFB relayed",
            ],
            rows=turns,
            plotted=False,
        ),
    ]


def main() -> int:
    sections = run()
    for section in sections:
        print(section.markdown())
    return 0 if sections else 2


if __name__ == "__main__":
    from loadtests.report import usage

    usage(__doc__, "agents")
    raise SystemExit(main())
