"""Any conversation, any replica (issue 30): every shared trace and every synthetic edit
pattern (`loadtests.patterns`) posted turn by turn, as an agent sends them, to the real
relay (`toolref relay`, a process) and through it to the real gateway (`toolref-server
serve`, a process) on a real engine (valkey, embedded), with the fast fake upstream behind.

Between relay and gateway a hop in this process (`counting_hop`) counts every byte the
relay writes (request line, headers, body) and every request beyond the first of a turn
(resends after a 409 or 400, registry calls). Per conversation: those bytes against the
baseline (`edits_baseline`: zstd against the previous body, under the agent's headers);
the service's CPU per turn (every thread of the gateway process, registry included; the
engine's apart), the last 20 turns over the first 20; and the Redis bytes (MEMORY USAGE of
the keys the conversation added, counters left out) right after its last turn, per raw
JSON byte of what it said (each distinct message once). Then with `--workers 4`, and with
two service processes on one engine, conversations of 200 turns: the extra round trips.
Ratios within one run only.

Whatever path the relay takes is measured: the code under test is this tree, or the
relay and gateway of another revision (`--code REV`, written out with `git archive`); the
report names the path each conversation took (edits: `application/vnd.toolref.edit`
bodies; else the requests as they came, or an older revision's history refs).

    python -m loadtests.edits_bench                 # full: 80-turn patterns, whole traces
    python -m loadtests.edits_bench --quick         # 40 turns each, 60 for the replicas
    python -m loadtests.edits_bench --code i30-relay --write   # another revision, into docs
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from io import BytesIO
from pathlib import Path
from typing import Final

import psutil
from redis.asyncio import Redis

from loadtests import backend_path, edits_report, scripted
from loadtests.bandwidth import turns_of
from loadtests.counting_hop import CountingHop
from loadtests.edits_baseline import AGENT_HEADERS, PROVIDER_HOSTS, baseline, content_bytes
from loadtests.measured import Measured, keys_of, usage_of
from loadtests.patterns import PATTERNS, Pattern, Turn, encode, one_mark
from loadtests.rawhttp import Connection, request
from loadtests.report import Section
from loadtests.systems import AFTER, ROOT, UPSTREAM_NAME, Code, Launcher, Proc, cpu_of, free_port
from loadtests.traces import Trace
from toolref_server.embedded import EmbeddedEngine

# After each turn, a request of constant cost through relay and gateway (a path the relay
# passes through and the gateway forwards as it is): the service's CPU for it says how fast
# the machine ran then, so that CPU growth is judged against it (other work shares the cores).
CONTROL_PATH: Final = "/v1/bench-control"
CONTROL_BODY: Final = b'{"control":"' + b"c" * 16_000 + b'"}'
CONTROLS: Final = 3  # control requests after each turn, their median taken


@dataclass(frozen=True)
class Plan:
    """How long each part runs."""

    turns: int = 80  # requests of each synthetic conversation
    trace_turns: int | None = None  # the first this many turns of each trace (None: all)
    replica_turns: int = 200
    replica_patterns: tuple[str, ...] = ("one-mark", "edited")
    patterns: tuple[str, ...] = tuple(PATTERNS)
    command: str = "make bench (this section alone: python -m loadtests.edits_bench)"
    suffix: str = ""  # after the sections' titles: the code, when not this tree's


QUICK: Final = Plan(40, 40, 60, command="python -m loadtests.edits_bench --quick")


# --- the code and the processes ----------------------------------------------------------


def describe(code: Code) -> str:
    if code.pythonpath:
        return code.label
    found = _git("describe", "--always", "--dirty")
    return f"this tree ({_git('branch', '--show-current') or 'detached'} at {found})"


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip()


@contextmanager
def code_at(revision: str | None) -> Iterator[Code]:
    """This tree (None), or the SDK, relay and service of `revision` in a temporary folder."""
    if revision is None:
        yield AFTER
        return
    commit = _git("rev-parse", "--short", revision)
    if not commit:
        raise ValueError(f"--code {revision}: git knows no such revision here")
    archive = subprocess.run(
        ["git", "archive", commit, "client_sdk", "service"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    with tempfile.TemporaryDirectory(prefix="toolref-code-") as folder:
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
        tree = Path(folder)
        path = f"{tree / 'client_sdk'}:{tree / 'service'}"
        gateway = "toolref_server.gateway.gateway"
        code = Code(f"{revision} ({commit})", path, tree, "toolref_relay", gateway)
        code.check()
        yield code


@dataclass
class System:
    """One relay, its hop, and the gateways behind it (processes), on a shared engine."""

    relay: Proc
    gateways: list[Proc]
    hop: CountingHop
    label: str

    def cpu(self) -> float:
        return sum(g.cpu() for g in self.gateways)

    def servers(self) -> list[psutil.Process]:
        """The processes that serve requests: each gateway's workers, or the gateway."""
        found = []
        for gateway in self.gateways:
            root = psutil.Process(gateway.popen.pid)
            workers = [c for c in root.children() if "spawn_main" in " ".join(c.cmdline())]
            found += workers or [root]
        return found


@asynccontextmanager
async def system(
    launcher: Launcher, code: Code, upstream: Proc, engine: str, *, gateways: int, workers: int
) -> AsyncIterator[System]:
    """`gateways` service processes of `workers` workers each on `engine`, and a relay
    whose gateway is a counting hop in front of them."""
    name = f"{gateways}x{workers}"
    started = []
    for n in range(gateways):
        env = code.env(
            TOOLREF_UPSTREAMS=f"{UPSTREAM_NAME}={upstream.url}",
            TOOLREF_REDIS_URL=engine,
            TOOLREF_WORKERS=str(workers),
            TOOLREF_LOG_LEVEL="warning",
        )
        command = [sys.executable, "-m", "toolref_server.cli", "serve", "--port", str(free_port())]
        started.append(launcher.start(f"gateway-{name}-{n}", command, env, code.cwd))
    await launcher.wait()  # the relay checks its gateway (through the hop) at start
    hop = CountingHop([g.url for g in started], fresh=workers > 1)
    server = await asyncio.start_server(hop.handle, "127.0.0.1", 0, limit=1 << 20)
    port = server.sockets[0].getsockname()[1]
    # Replicas: each turn an HTTP request the hop hands to any process (no affinity); one
    # process: the channel, as a relay runs by default.
    options = () if gateways == 1 and workers == 1 else ("--no-channel",)
    relay = launcher.relay(code, f"http://127.0.0.1:{port}", f"relay-{name}", *options)
    await launcher.wait()
    label = (
        "one service process"
        if gateways == 1 and workers == 1
        else (
            f"`--workers {workers}`"
            if gateways == 1
            else f"{gateways} service processes, one engine"
        )
    )
    try:
        yield System(relay, started, hop, label)
    finally:
        server.close()
        await hop.close()


# --- conversations ---------------------------------------------------------------------


def from_trace(trace: Trace, limit: int | None) -> Pattern | None:
    """A shared trace as the bodies its agent sent, turn by turn (messages only)."""
    fmt, messages, cuts = turns_of(trace)
    if fmt.name not in PATTERNS_FORMATS:
        return None
    turns = []
    for cut in cuts[:limit]:
        body = {"model": "bench-1", "stream": True, "messages": messages[:cut]}
        if fmt.name == "anthropic":
            body["max_tokens"] = 1024
        turns.append(Turn(0, body))
    return Pattern(trace.name, fmt.name, tuple(turns), "a shared trace")  # type: ignore[arg-type]


PATTERNS_FORMATS: Final = frozenset(AGENT_HEADERS)


class Run:
    """Turns through one system, numbered across the run for the hop."""

    def __init__(self, engine: EmbeddedEngine, redis: Redis, upstream: str) -> None:
        assert engine.process is not None
        self.engine = Proc("engine", engine.url, engine.process)
        self.redis = redis
        self.upstream = upstream  # scripted: each turn answered what the next writes back
        self.turn = 0

    async def converse(self, system: System, pattern: Pattern, kind: str) -> Measured:
        before = await keys_of(self.redis)
        servers = system.servers()
        start = self.turn
        url = f"{system.relay.url}/llm/{UPSTREAM_NAME}{pattern.path}"
        headers = dict(AGENT_HEADERS[pattern.fmt])
        agent = Connection.to(system.relay.url)
        script = Connection.to(self.upstream)
        bodies, cpu, engine, control, served = [], [], [], [], [0] * len(servers)
        probe = request(f"{system.relay.url}/llm/{UPSTREAM_NAME}{CONTROL_PATH}", CONTROL_BODY)
        try:
            for n, turn in enumerate(pattern.turns):
                body = encode(turn.body)
                bodies.append((turn.conversation, body))
                written = scripted.next_answer(pattern.turns, n)
                if written is not None:
                    told = json.dumps({"format": pattern.fmt, "message": written}).encode()
                    await script.send(request(f"{self.upstream}/__next-answer", told))
                system.hop.turn = self.turn
                self.turn += 1
                used = [cpu_of(s) for s in servers]
                service, engine_cpu = system.cpu(), self.engine.cpu()
                answer = await agent.send(request(url, body, headers))
                cpu.append(system.cpu() - service)
                engine.append(self.engine.cpu() - engine_cpu)
                if answer.status != 200:
                    raise RuntimeError(
                        f"{pattern.name} turn {n + 1}: {answer.status} {answer.body[:400]!r}"
                    )
                deltas = [cpu_of(s) - u for s, u in zip(servers, used, strict=True)]
                served[deltas.index(max(deltas))] += 1  # the one that worked most
                system.hop.turn = -1  # not the conversation's
                costs = []
                for _ in range(CONTROLS):  # the median of a few: one request is noisy
                    service = system.cpu()
                    checked = await agent.send(probe)
                    costs.append(system.cpu() - service)
                    if checked.status != 200:
                        raise RuntimeError(f"the control request: {checked.status}")
                control.append(statistics.median(costs))
        finally:
            await agent.close()
            await script.close()
        redis, keys = await usage_of(self.redis, await keys_of(self.redis) - before)
        said = content_bytes(turn.body for turn in pattern.turns)
        sizes = baseline(
            pattern.path, PROVIDER_HOSTS[pattern.fmt], AGENT_HEADERS[pattern.fmt], bodies
        )
        sent = system.hop.of(range(start, self.turn))
        return Measured(
            pattern.name, kind, pattern.fmt, len(bodies), sum(len(b) for _, b in bodies),
            sum(sizes), sent, cpu, control, engine, redis, keys, said, served,
        )  # fmt: skip


def conversations(found: list[Trace], plan: Plan) -> list[tuple[str, Pattern]]:
    chosen: list[tuple[str, Pattern]] = []
    for trace in found:
        pattern = from_trace(trace, plan.trace_turns)
        if pattern is not None:
            chosen.append(("trace", pattern))
    for n, name in enumerate(plan.patterns):
        chosen.append(("pattern", PATTERNS[name](plan.turns, n + 1)))
    return chosen


async def measure(
    found: list[Trace], plan: Plan, code: Code
) -> tuple[list[Measured], list[Measured], list[tuple[str, Measured]]]:
    """Every conversation through one service process (the relay path), then through a chat
    backend (`backend_path`) with a conversation of `replica_turns` after them, then the
    replica patterns through `--workers 4` and through two processes."""
    with tempfile.TemporaryDirectory(prefix="toolref-edits-") as folder, ExitStack() as stack:
        engine = EmbeddedEngine(folder, config={"appendonly": "no", "save": '""'})
        engine.start()
        stack.callback(engine.stop)
        launcher = Launcher(stack, Path(folder))
        upstream = launcher.upstream()
        await launcher.wait()
        redis = Redis.from_url(engine.url)
        run = Run(engine, redis, upstream.url)
        try:
            measured = []
            async with system(launcher, code, upstream, engine.url, gateways=1, workers=1) as one:
                await run.converse(one, one_mark(6, 999), "warm-up")
                for kind, pattern in conversations(found, plan):
                    measured.append(await run.converse(one, pattern, kind))
            await redis.flushall()  # the same conversations again, stored by no one yet
            backend = []
            async with backend_path.backend_system(launcher, engine.url) as chat:
                # The manager learns per endpoint that the backend reads edits: both formats
                await backend_path.converse(run, chat, one_mark(6, 997), "warm-up")
                as_text = PATTERNS["results-as-text"](3, 991)
                await backend_path.converse(run, chat, as_text, "warm-up")
                for kind, pattern in conversations(found, plan):
                    backend.append(await backend_path.converse(run, chat, pattern, kind))
                long = PATTERNS["one-mark"](plan.replica_turns, 600)
                backend.append(await backend_path.converse(run, chat, long, "long"))
            replicas = []
            for gateways, workers in ((1, 4), (2, 1)):
                await redis.flushall()
                layout = system(
                    launcher, code, upstream, engine.url, gateways=gateways, workers=workers
                )
                async with layout as chosen:
                    await run.converse(chosen, one_mark(6, 998), "warm-up")
                    for n, name in enumerate(plan.replica_patterns):
                        pattern = PATTERNS[name](plan.replica_turns, 500 + n)
                        done = await run.converse(chosen, pattern, "pattern")
                        replicas.append((chosen.label, done))
        finally:
            await redis.aclose()
    return measured, backend, replicas


def run(
    found: list[Trace], plan: Plan = Plan(), revision: str | None = None, why: str = ""
) -> list[Section]:
    """The two sections; `why`: why no shared trace ran, when none did."""
    with code_at(revision) as code:
        measured, backend, replicas = asyncio.run(measure(found, plan, code))
        label = describe(code)
    ran = [m.name for m in measured if m.kind == "trace"]
    said = f"Shared traces: {', '.join(ran)}." if ran else f"No shared trace ran: {why}."
    skipped = [t.name for t in found if t.name not in ran]
    if skipped:
        said += f" Skipped (a format the relay does not rewrite): {', '.join(skipped)}."
    return edits_report.sections(measured, backend, replicas, plan, label, traces=said)


def main(argv: list[str] | None = None) -> int:
    from loadtests import traces

    parser = argparse.ArgumentParser(prog="python -m loadtests.edits_bench")
    parser.add_argument("--quick", action="store_true", help="40 turns each (60 for replicas)")
    parser.add_argument("--code", help="measure the relay and gateway of this git revision")
    parser.add_argument(
        "--write", action="store_true", help="put the sections in docs/benchmarks.md"
    )
    parser.add_argument("--turns", type=int, help="turns of every conversation (a smoke run)")
    parser.add_argument("--patterns", help="these patterns only, comma-separated (empty: none)")
    parser.add_argument("--traces", help="the shared traces whose names hold one of these")
    parser.add_argument("--no-traces", action="store_true", help="no shared trace")
    args = parser.parse_args(argv)
    found = [] if args.no_traces else traces.load()
    if args.traces:
        wanted = args.traces.split(",")
        found = [t for t in found if any(part in t.name for part in wanted)]
    why = "--no-traces" if args.no_traces else f"the folder {traces.TRACES} is absent or empty"
    if not found:
        print(f"edits bench: no shared traces ({why}): patterns only", file=sys.stderr)
    plan = QUICK if args.quick else Plan()
    command = " ".join(["python -m loadtests.edits_bench", *(argv or sys.argv[1:])])
    plan = replace(plan, command=command, suffix=f", at {args.code}" if args.code else "")
    if args.turns:
        plan = replace(plan, turns=args.turns, trace_turns=args.turns, replica_turns=args.turns)
    if args.patterns is not None:
        names = tuple(name for name in args.patterns.split(",") if name)
        unknown = [n for n in names if n not in PATTERNS]
        if unknown:
            parser.error(f"--patterns: no pattern {unknown}; choose among {', '.join(PATTERNS)}")
        plan = replace(plan, patterns=names)
    sections = run(found, plan, args.code, why)
    for section in sections:
        print(section.markdown())
    if args.write:
        edits_report.write(sections)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
