"""`make soak`: mixed traffic at a steady rate against real processes, long enough to see a
leak; every process's memory must stay flat after warm-up.

    python -m loadtests.soak --time 30m     # `make soak` (SOAK_TIME=30m)
    python -m loadtests.soak --time 2m      # CI's (.ci/run)

The processes, each its own, on loopback: `toolref-server serve` on its embedded engine
(registry and gateway), `toolref relay` in front of the gateway, the fake LLM provider of
tests/e2e behind the gateway, and examples/llm_backend.py behind `ToolRefMiddleware`
hydrating through the service. `loadtests/soak_traffic.py` says what is sent. The RSS of
each process and of its children (the engine) is sampled every second (psutil);
`loadtests/soak_memory.py` says how growth is judged.

The run passes when, after warm-up, no process grows by more than `--limit` MiB per 10,000
requests along the least-squares line (nor less than `--floor` MiB in all, for short runs),
no request failed but the deliberate disconnects, and no process logged an error. The
verdict is the exit status (0 pass, 1 fail); the report goes to stdout, the chart and the
samples to loadtests/results/, and a run of 30 minutes or more (or `--docs`) is recorded in
docs/benchmarks.md (the `soak` region, which `make bench` keeps).

Warm-up runs at twice the rate, so that every cache, pool and allocator arena reaches the
size the steady rate needs before the samples are judged; the service's bounded caches are
set small (`CACHE_BYTES`) and its TTL short (`--ttl`), so that within warm-up they are full
and evicting and the store expires as much as it writes: what is judged is the steady
state, not caches filling up to their bounds.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import re
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tests.support.chain import relay_command
from tests.support.processes import Process, Service, clean_env

from loadtests import soak_report
from loadtests.report import replace_region
from loadtests.soak_items import ITEM_APIS
from loadtests.soak_memory import MIB, Growth, Limit, Sample, Sampler, growth
from loadtests.soak_traffic import Tally, Targets, Traffic
from toolref_server.embedded import free_port

ROOT: Final = Path(__file__).resolve().parents[1]
RESULTS: Final = ROOT / "loadtests" / "results"
DOCS: Final = ROOT / "docs"
KEY: Final = "soak-tenant-key"
LIMIT_MIB: Final = 4.0  # per 10,000 requests, after warm-up
FLOOR_MIB: Final = 8.0  # allowed whatever the requests (soak_memory.Limit says why)
CACHE_BYTES: Final = 2 * MIB  # each of the service's caches
RECORDED: Final = 30 * 60.0  # a run this long is recorded in docs/benchmarks.md
WARMUP_PACE: Final = 2.0  # warm-up's rate, times the steady rate
_PROBLEM: Final = re.compile(r'"level": "(?:error|critical)"|^(?:ERROR|CRITICAL)\b|^Traceback ')


def seconds(text: str) -> float:
    """`90`, `90s`, `2m` or `1h` in seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 90s, 30m or 1h")
    return float(match[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[match[2]]


def error_lines(log: str) -> list[str]:
    """The lines of a process's output that say it failed: an error logged (JSON or
    Python's logging) or a traceback."""
    return [line for line in log.splitlines() if _PROBLEM.search(line)]


@dataclass(frozen=True)
class Options:
    time: float  # seconds, warm-up included
    warmup: float
    rate: float  # actions per second after warm-up
    limit: Limit
    in_flight: int = 32
    ttl: int = 30
    turns: int = 12
    every: float = 1.0
    warmup_pace: float = WARMUP_PACE
    cache_bytes: int = CACHE_BYTES


@contextmanager
def processes(scratch: Path, options: Options) -> Iterator[dict[str, Process]]:
    """The four processes, ready; stopped (Ctrl-C to each group) after."""
    with ExitStack() as stack:
        port = free_port()
        provider = Process(
            [sys.executable, "-m", "tests.support.fake_provider", "--port", str(port),
             "--calls", "1000", "--workdir", str(scratch), "--delay", "0.02", "--no-record"],
            f"http://127.0.0.1:{port}", "/_fake/requests", clean_env(),
        )  # fmt: skip
        stack.callback(provider.stop)
        ttl, cache = str(options.ttl), str(options.cache_bytes)
        service = Service(
            scratch / "data",
            free_port(),
            TOOLREF_API_KEYS=f"soak={hashlib.sha256(KEY.encode()).hexdigest()}",
            TOOLREF_UPSTREAMS=f"fake={provider.url}",
            TOOLREF_TTL_SECONDS=ttl,
            TOOLREF_EDIT_SUPERSEDED_TTL=ttl,
            TOOLREF_EDIT_REFRESH_SECONDS=ttl,
            TOOLREF_VERIFIED_CHARS=cache,
            TOOLREF_EDIT_CACHE_BYTES=cache,  # every turn comes as an edit
            TOOLREF_ANSWER_CACHE_BYTES=cache,  # each streamed answer, the next edit's dictionary
        )
        stack.callback(service.stop)
        port = free_port()
        relay = Process(  # /metrics needs this start's control token: 401 says it is up
            # its recipes per credential bounded low, as the service's caches: full and
            # evicting within warm-up (at 64, a short run judged them still filling)
            [*relay_command(service.url, port), "--max-recipes", "16"],
            f"http://127.0.0.1:{port}", "/metrics",
            clean_env(TOOLREF_KEY=KEY), ready_status=401,
        )  # fmt: skip
        stack.callback(relay.stop)
        port = free_port()
        backend = Process(
            [sys.executable, "-m", "examples.llm_backend", "--registry", service.url,
             "--api-key", KEY, "--port", str(port), "--no-record"],
            f"http://127.0.0.1:{port}", "/received", clean_env(),
        )  # fmt: skip
        stack.callback(backend.stop)
        yield {"service": service, "relay": relay, "backend": backend, "provider": provider}


@dataclass(frozen=True)
class Result:
    options: Options
    samples: list[Sample]
    growths: list[Growth]
    tally: Tally
    logged: dict[str, list[str]]  # process -> its error lines
    notes: tuple[str, ...] = ()  # what the gateway counted (not judged)

    def problems(self) -> list[str]:
        limit = self.options.limit
        found = [
            f"{g.process} grew {g.fitted_mib:+.1f} MiB over {g.requests:,} requests after "
            f"warm-up ({g.per_10k_mib:+.2f} MiB per 10k; {limit.allowed_mib(g.requests):.1f} "
            "allowed)"
            for g in self.growths
            if not g.passes(limit)
        ]
        found += [f"{n} x {what}" for what, n in sorted(self.tally.errors.items())]
        found += [
            f"{name} logged: {lines[0][:200]}" for name, lines in self.logged.items() if lines
        ]
        if not self.growths:
            found.append("too few samples after warm-up to judge")
        return found


def soak(options: Options) -> Result:
    """Start the processes, send for `options.time`, sampling; what was found."""
    salt = uuid.uuid4().hex[:12]
    tally = Tally()
    phases = [
        (options.warmup, options.rate * options.warmup_pace),
        (options.time - options.warmup, options.rate),
    ]
    with (
        tempfile.TemporaryDirectory(prefix="toolref-soak-") as scratch,
        processes(Path(scratch), options) as started,
    ):
        targets = Targets(started["service"].url, started["relay"].url, started["backend"].url, KEY)

        notes: list[str] = []

        async def drive() -> None:
            traffic = Traffic(targets, salt, tally, turns=options.turns)
            try:
                await traffic.run(phases, options.in_flight)
                notes.extend(await counted(traffic))
            finally:
                await traffic.aclose()

        roots = {name: p.process.pid for name, p in started.items()}
        with Sampler(roots, lambda: tally.total, options.every) as sampler:
            asyncio.run(drive())
        logged = {name: error_lines(p.output()) for name, p in started.items()}
    samples = sampler.samples
    return Result(options, samples, growth(samples, options.warmup), tally, logged, tuple(notes))


async def counted(traffic: Traffic) -> list[str]:
    """The gateway's edits by outcome (its /metrics, on loopback), and what the relay said
    the Responses and Gemini turns after the first of each conversation cost (their
    `Toolref-Savings`: the answer dictionary at work makes them small)."""
    answer = await traffic.service.get("/metrics")
    edits = re.findall(r'^toolref_edits_total\{outcome="([^"]+)"\} (\S+)$', answer.text, re.M)
    found = ["gateway edits: " + ", ".join(f"{o} {float(n):,.0f}" for o, n in edits)]
    saved = traffic.item_conversations.savings
    for api in ITEM_APIS:
        raw, wire, turns = (saved[f"{api} {k}"] for k in ("raw", "wire", "turns"))
        ratio = raw / wire if wire else 0.0
        found.append(
            f"{api} turns after the first: {turns:,}, {raw:,} B as {wire:,} B ({ratio:.1f}x)"
        )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--time", type=seconds, default=seconds("30m"), help="30m, 2m, 90s")
    parser.add_argument("--warmup", type=seconds, help="default: a fifth of --time, >= 60 s")
    parser.add_argument("--rate", type=float, default=30.0, help="actions a second (30)")
    parser.add_argument("--limit", type=float, default=LIMIT_MIB, help="MiB per 10k requests")
    parser.add_argument("--floor", type=float, default=FLOOR_MIB, help="MiB allowed at least")
    parser.add_argument("--in-flight", type=int, default=32, help="actions at once, at most")
    parser.add_argument("--ttl", type=int, default=30, help="the service's TTL, seconds (30)")
    parser.add_argument("--turns", type=int, default=12, help="turns per conversation (12)")
    parser.add_argument(
        "--docs",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="record the run in docs/benchmarks.md (default: runs of 30m or more)",
    )
    args = parser.parse_args(argv)
    warmup = args.warmup if args.warmup is not None else max(60.0, args.time / 5)
    if warmup >= args.time:
        parser.error(f"the warm-up ({warmup:g} s) leaves nothing of --time to judge")
    options = Options(
        args.time, warmup, args.rate, Limit(args.limit, args.floor),
        in_flight=args.in_flight, ttl=args.ttl, turns=args.turns,
    )  # fmt: skip
    result = soak(options)
    chart = soak_report.save(result, RESULTS)
    docs = args.docs if args.docs is not None else args.time >= RECORDED
    command = "python -m loadtests.soak " + " ".join(argv if argv is not None else sys.argv[1:])
    if docs:
        (DOCS / "bench").mkdir(exist_ok=True)
        shutil.copy(chart, DOCS / "bench" / "soak.png")
    text = soak_report.markdown(result, "bench/soak.png" if docs else None, command.strip())
    if docs:
        replace_region(DOCS / "benchmarks.md", "soak", text)
    print(text)
    for note in result.notes:
        print(f"soak: {note}", file=sys.stderr)
    for problem in result.problems():
        print(f"soak: FAIL {problem}", file=sys.stderr)
    if not result.problems():
        print(f"soak: PASS; samples and chart in {RESULTS.relative_to(ROOT)}/", file=sys.stderr)
    return 1 if result.problems() else 0


if __name__ == "__main__":
    raise SystemExit(main())
