"""The chat-backend path of the edits bench: a client app's `ToolReferenceManager` sends
each turn, through `toolref.AsyncTransport` (as an official SDK's `http_client` does), to a
chat backend (`loadtests.chat_backend`, a process: an app behind `ToolRefMiddleware`, which
serves a channel, streaming the answer the conversation's next turn writes back, as the
relay path's upstream does), which restores each edit through a registry
(`toolref-server serve`, a process) on the bench's engine. A counting hop between client
and backend counts every byte the client wrote (request line, headers, body; the channel's
upgrade and frames), as the hop between relay and gateway does for the relay path.

Per conversation, as for the relay path (`edits_bench.Measured`): the bytes; the CPU per
turn of the backend and registry processes together, less the app's own (reading the body
and answering: what a backend without toolref does too, counted by the app in its thread),
with the same control request after each turn; the Redis bytes the conversation added;
and the middleware's added time per request (`chat_backend`: its wall time less the
app's).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import httpx

from loadtests import scripted
from loadtests.counting_hop import CountingHop
from loadtests.edits_baseline import AGENT_HEADERS, PROVIDER_HOSTS, baseline, content_bytes
from loadtests.measured import Measured, keys_of, usage_of
from loadtests.patterns import Pattern, encode
from loadtests.systems import AFTER, ROOT, UPSTREAM_NAME, Launcher, Proc, free_port
from toolref import AsyncTransport, ToolReferenceManager
from toolref.wire.encoding import JSON_TYPE, dumps_json

if TYPE_CHECKING:
    from loadtests.edits_bench import Run

CONTROL_BODY: Final = b'{"control":"' + b"c" * 16_000 + b'"}'
CONTROLS: Final = 3  # control requests after each turn, their median taken
# Set by httpx itself on every request: not the app's to name.
_HOP: Final = frozenset({"content-length", "host", "connection"})


@dataclass
class BackendSystem:
    """A registry process and a chat backend process on the bench's engine, a hop before
    the backend, and the client's HTTP connection to the hop."""

    registry: Proc
    backend: Proc
    hop: CountingHop
    url: str  # the hop's
    http: httpx.AsyncClient  # plain: the bench's own requests
    sdk: httpx.AsyncClient  # the client app's: `AsyncTransport`, its one manager
    manager: ToolReferenceManager  # the client app's one manager, as an app keeps one

    def cpu(self) -> float:
        return self.registry.cpu() + self.backend.cpu()

    async def added(self) -> list[float]:
        """The middleware's added time of every request so far (seconds)."""
        found = await self.http.get(self.backend.url + "/stats")
        return [float(s) for s in found.json()["added"]]

    async def app_cpu(self) -> float:
        """The app's own CPU seconds in every request so far (not the middleware's)."""
        found = await self.http.get(self.backend.url + "/stats/app-cpu")
        return float(found.json()["app_cpu"])


@asynccontextmanager
async def backend_system(launcher: Launcher, engine: str) -> AsyncIterator[BackendSystem]:
    env = AFTER.env(TOOLREF_REDIS_URL=engine, TOOLREF_LOG_LEVEL="warning")
    command = [sys.executable, "-m", "toolref_server.cli", "serve", "--port", str(free_port())]
    registry = launcher.start("registry", command, env, ROOT)
    await launcher.wait()
    command = [
        sys.executable, "-m", "loadtests.chat_backend", "--port", str(free_port()),
        "--registry", registry.url,
    ]  # fmt: skip
    backend = launcher.start("chat-backend", command, AFTER.env(), ROOT)
    await launcher.wait()
    hop = CountingHop([backend.url])
    server = await asyncio.start_server(hop.handle, "127.0.0.1", 0, limit=1 << 20)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    manager = ToolReferenceManager()
    sdk = httpx.AsyncClient(timeout=120, transport=AsyncTransport(manager=manager))
    async with httpx.AsyncClient(timeout=120) as http, sdk:
        try:
            yield BackendSystem(registry, backend, hop, url, http, sdk, manager)
        finally:
            server.close()
            await hop.close()


async def converse(run: Run, system: BackendSystem, pattern: Pattern, kind: str) -> Measured:
    """`pattern`'s turns sent by the system's manager through `system`."""
    before = await keys_of(run.redis)
    url = f"{system.url}/llm/{UPSTREAM_NAME}{pattern.path}"
    headers = {k: v for k, v in AGENT_HEADERS[pattern.fmt] if k not in _HOP}
    headers.setdefault("content-type", JSON_TYPE)
    bodies, cpu, engine, control = [], [], [], []
    start = run.turn
    added_before = len(await system.added())
    for n, turn in enumerate(pattern.turns):
        bodies.append((turn.conversation, encode(turn.body)))
        written = scripted.next_answer(pattern.turns, n)  # streamed as the relay path's
        if written is not None:
            told = {"format": pattern.fmt, "message": written}
            (
                await system.http.post(system.backend.url + "/__next-answer", json=told)
            ).raise_for_status()
        system.hop.turn = run.turn
        run.turn += 1
        app = await system.app_cpu()  # read before the turn's CPU is
        service, engine_cpu = system.cpu(), run.engine.cpu()
        answer = await system.sdk.post(url, content=dumps_json(turn.body), headers=headers)
        ran = system.cpu() - service
        # the middleware's and the registry's, not the app's own (read after the turn's CPU)
        cpu.append(ran - (await system.app_cpu() - app))
        engine.append(run.engine.cpu() - engine_cpu)
        if answer.status_code != 200:
            raise RuntimeError(f"{pattern.name} turn {n + 1}: {answer.status_code} {answer.text}")
        system.hop.turn = -1
        costs = []
        for _ in range(CONTROLS):  # the median of a few: one request is noisy
            service = system.cpu()
            checked = await system.http.post(system.url + "/control", content=CONTROL_BODY)
            costs.append(system.cpu() - service)
            checked.raise_for_status()
        control.append(statistics.median(costs))
    redis, keys = await usage_of(run.redis, await keys_of(run.redis) - before)
    said = content_bytes(turn.body for turn in pattern.turns)
    sizes = baseline(pattern.path, PROVIDER_HOSTS[pattern.fmt], AGENT_HEADERS[pattern.fmt], bodies)
    added = (await system.added())[added_before:]
    return Measured(
        pattern.name, kind, pattern.fmt, len(bodies), sum(len(b) for _, b in bodies),
        sum(sizes), system.hop.of(range(start, run.turn)), cpu, control, engine, redis, keys,
        said, added=added,
    )  # fmt: skip
