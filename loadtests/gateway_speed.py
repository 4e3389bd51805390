"""Gateway speed: CPU and added time per request of the gateway, and of relay + gateway, as
real processes on loopback next to a minimal pass-through proxy (the floor), straight to the
same fake upstream, "before" (the gateway of `systems.BEFORE`, which called its own app over
ASGI) and "after" (this tree), and next to Portkey's gateway (Node, `loadtests.portkey`), all
interleaved in one run.

Small chat requests here (one short user message, a new one each time): sequential, in
alternating blocks, and 32 connections kept busy. Agent-sized bodies, the shared traces
replayed turn by turn: `loadtests.gateway_turns`.

    python -m loadtests.gateway_speed            # both sections
    python -m loadtests.gateway_speed --quick    # fewer rounds, one trace (a smoke run)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psutil

from loadtests import gateway_turns, portkey, startup
from loadtests.drive import Block, Load, Target, busy, sequential
from loadtests.report import BENCHMARKS, Section, replace_section
from loadtests.systems import (
    AFTER,
    KEY,
    UPSTREAM_NAME,
    Code,
    Launcher,
    Proc,
    before_code,
    note,
)
from loadtests.traces import Trace, load

PATH: Final = "/v1/messages"
PROVIDER: Final = {
    "content-type": "application/json",
    "x-api-key": "sk-bench",
    "anthropic-version": "2023-06-01",
}
PROTOCOL_2: Final = {**PROVIDER, "toolref-protocol": "2", "toolref-key": KEY}
CONNECTIONS: Final = 32
PORTKEY: Final = "Portkey gateway (Node)"
GATEWAY_1: Final = "gateway, protocol 1"
GATEWAY_2: Final = "gateway, protocol 2"
CHAIN: Final = "relay + gateway"
GRANIAN_1: Final = "gateway on granian, protocol 1"
GRANIAN_2: Final = "gateway on granian, protocol 2"


@dataclass(frozen=True)
class Plan:
    """How long each part runs: blocks of `block` sequential requests, `rounds` of them
    per target; `load_seconds` of 32 busy connections, `load_rounds` times per target."""

    block: int = 100
    rounds: int = 5
    load_seconds: float = 2.0
    load_rounds: int = 2
    traces: int = 2  # the shared traces replayed, longest first after the Anthropic one
    whole: int = 10  # whole-conversation turns per trace


QUICK: Final = Plan(block=40, rounds=2, load_seconds=1.0, load_rounds=1, traces=1, whole=3)


def small(n: int) -> bytes:
    """A small chat request, different each time (a relay or a gateway keeps nothing): an
    Anthropic Messages body and an OpenAI Chat Completions one alike."""
    message = {"role": "user", "content": f"Say hello to request {n}, in one line."}
    return json.dumps({"model": "bench-1", "max_tokens": 256, "messages": [message]}).encode()


@dataclass
class Systems:
    """Every process of the run, and the targets of the small requests, floor first;
    Portkey's among them where it ran, and what the report says of it (or why it did not)."""

    launcher: Launcher
    upstream: Proc
    floor: Proc
    direct: Target
    targets: list[Target]
    codes: list[Code]
    files: dict[str, str]  # code label -> the files its gateway and relay came from
    chains: dict[str, tuple[Proc, Proc]]  # code label -> its relay and its gateway
    spare: dict[str, Proc]  # code label -> a second gateway, for the turns behind the hop
    portkey: Target | None
    portkey_note: str


async def _portkey(launcher: Launcher, upstream: Proc) -> tuple[Target | None, str]:
    """Portkey's gateway as a target once it has answered a small request, and what ran
    (whether a streamed answer came through too); None and why where it cannot run."""
    try:
        ran = portkey.install()
        proc = portkey.start(launcher)
        await launcher.wait()
        url, headers = proc.url + portkey.PATH, portkey.headers(upstream.url)
        target = Target(PORTKEY, "-", url, headers, [proc])
        async with asyncio.timeout(60):
            await target.send(small(-1))
    except (RuntimeError, OSError, EOFError, ValueError) as exc:
        said = f"{type(exc).__name__}: {str(exc)[:200]}".replace("\n", " ").replace("|", "/")
        return None, f"**Portkey could not run here** ({said}): the checks fall back to the floor."
    streamed = json.dumps({**json.loads(small(-2)), "stream": True}).encode()
    try:
        async with asyncio.timeout(60):
            answer = await target.send(streamed)
        through = answer.body.rstrip().endswith(b"data: [DONE]")
    except (RuntimeError, OSError, EOFError, ValueError):
        through = False
    return target, (
        f"Portkey is {ran}, started as `node build/start-server.js --port=P --headless`; it gets "
        f"the same bodies at `{portkey.PATH}` with `x-portkey-provider: openai` and "
        "`x-portkey-custom-host` the fake upstream's `/v1` (its OpenAI Chat Completions "
        f"answer); a streamed request through it {'came' if through else 'did NOT come'} back "
        "whole (server-sent events to `[DONE]`)."
    )


async def _start(launcher: Launcher, codes: list[Code]) -> Systems:
    upstream = launcher.upstream()
    floor, stack = launcher.floor(upstream), launcher.stack_floor(upstream)
    chains, spare = {}, {}
    # Two workers, as a deployment runs one per core: uvicorn's supervisor binds the socket.
    workers = launcher.gateway(codes[0], upstream, "gateway-2-workers", workers=2)
    # The event loop side by side (both default to uvloop where installed): the gateway on
    # asyncio's, and relay and gateway both on it.
    plain = launcher.gateway(codes[0], upstream, "gateway-asyncio", TOOLREF_EVENT_LOOP="asyncio")
    plain_relay = launcher.relay(codes[0], plain.url, "relay-asyncio", "--event-loop", "asyncio")
    for code in codes:
        short = code.label.split()[0]
        gateway = launcher.gateway(code, upstream, f"gateway-{short}")
        chains[code.label] = (launcher.relay(code, gateway.url, f"relay-{short}"), gateway)
        spare[code.label] = launcher.gateway(code, upstream, f"hop-gateway-{short}")
    # The ASGI server side by side: the gateway's app on granian (Rust), its own engine.
    granian = launcher.granian_gateway(upstream, "gateway-granian")
    await launcher.wait()
    other, said = await _portkey(launcher, upstream)
    direct = Target("fake upstream alone", "-", upstream.url + PATH, PROVIDER, [upstream])
    targets = [
        Target("floor: asyncio streams pass-through", "-", floor.url + PATH, PROVIDER, [floor]),
        Target("uvicorn + httpx pass-through", "-", stack.url + PATH, PROVIDER, [stack]),
        *([other] if other else []),
    ]
    llm = f"/llm/{UPSTREAM_NAME}{PATH}"
    for code in codes:
        relay, gateway = chains[code.label]
        label = code.label
        targets += [
            Target(GATEWAY_1, label, gateway.url + llm, PROVIDER, [gateway]),
            Target(GATEWAY_2, label, gateway.url + llm, PROTOCOL_2, [gateway]),
            Target(CHAIN, label, relay.url + llm, PROVIDER, [relay, gateway]),
        ]
        if code is codes[0]:
            two = "gateway, protocol 2, 2 workers"
            targets.append(Target(two, label, workers.url + llm, PROTOCOL_2, [workers]))
            targets += [
                Target("gateway, protocol 1, asyncio", label, plain.url + llm, PROVIDER, [plain]),
                Target(
                    "relay + gateway, both on asyncio", label, plain_relay.url + llm, PROVIDER,
                    [plain_relay, plain],
                ),
                Target(GRANIAN_1, label, granian[0].url + llm, PROVIDER, [*granian]),
                Target(GRANIAN_2, label, granian[0].url + llm, PROTOCOL_2, [*granian]),
            ]  # fmt: skip
    files = {code.label: code.check() for code in codes}
    return Systems(
        launcher, upstream, floor, direct, targets, codes, files, chains, spare, other, said
    )


@dataclass
class Measured:
    """Per target label and code: its sequential blocks and its loads."""

    blocks: dict[tuple[str, str], list[Block]]
    loads: dict[tuple[str, str], list[Load]]


async def _small(systems: Systems, plan: Plan) -> Measured:
    everyone = [systems.direct, *systems.targets]
    numbers = iter(range(1 << 62))
    blocks: dict[tuple[str, str], list[Block]] = {}
    loads: dict[tuple[str, str], list[Load]] = {}
    for target in everyone:  # warm: imports, pools, first-request paths
        await sequential(target, [small(next(numbers)) for _ in range(10)])
    for target in everyone:  # every worker has started by now
        for proc in target.procs:
            proc.forget()
    for n in range(plan.rounds):  # a different first target each round: drift hits all alike
        for target in everyone[n % len(everyone) :] + everyone[: n % len(everyone)]:
            block = await sequential(target, [small(next(numbers)) for _ in range(plan.block)])
            blocks.setdefault((target.label, target.code), []).append(block)
    for target in everyone:
        await target.close()
    client = psutil.Process()

    def client_cpu() -> float:
        times = client.cpu_times()
        return times.user + times.system

    for n in range(plan.load_rounds):
        order = everyone if n % 2 == 0 else everyone[::-1]
        for target in order:
            load = await busy(
                target,
                small,
                connections=CONNECTIONS,
                seconds=plan.load_seconds,
                upstream=systems.upstream,
                client=client_cpu,
            )
            loads.setdefault((target.label, target.code), []).append(load)
    return Measured(blocks, loads)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True)
class Figures:
    cpu_ms: float  # per request, sequential
    median_ms: float
    p95_ms: float
    throughput: float
    load_cpu_ms: float  # per request, at 32 connections


def _figures(blocks: list[Block], loads: list[Load]) -> Figures:
    seconds = [s for b in blocks for s in b.seconds]
    count = len(seconds)
    answered = sum(load.requests for load in loads)
    return Figures(
        sum(b.cpu for b in blocks) / count * 1e3,
        statistics.median(seconds) * 1e3,
        _percentile(seconds, 0.95) * 1e3,
        answered / sum(load.seconds for load in loads),
        sum(load.cpu for load in loads) / answered * 1e3,
    )


def _ratio(value: float, base: float | None) -> str:
    return "" if base is None or base == 0 else f"{value / base:.2f}x"


def small_section(systems: Systems, measured: Measured, command: str) -> Section:
    figures = {
        key: _figures(blocks, measured.loads[key]) for key, blocks in measured.blocks.items()
    }
    direct = figures[systems.direct.label, "-"]
    floor_key = (systems.targets[0].label, "-")
    floor = figures[floor_key]
    other = figures[PORTKEY, "-"] if systems.portkey else None
    rows = []
    for target in [systems.direct, *systems.targets]:
        key = (target.label, target.code)
        f = figures[key]
        before = (
            next(
                (v for (lb, code), v in figures.items() if lb == target.label and code != "after"),
                None,
            )
            if target.code == "after"
            else None
        )
        added = (f.median_ms - direct.median_ms, f.p95_ms - direct.p95_ms)
        mine = other if target.code != "-" else None  # toolref's rows against Portkey's
        rows.append(
            [
                target.label,
                target.code,
                f"{f.cpu_ms:.2f}",
                _ratio(f.cpu_ms, floor.cpu_ms) if target is not systems.direct else "",
                _ratio(f.cpu_ms, before.cpu_ms if before else None),
                f"{f.median_ms:.2f}" if target is systems.direct else f"{added[0]:+.2f}",
                f"{f.p95_ms:.2f}" if target is systems.direct else f"{added[1]:+.2f}",
                f"{f.throughput:,.0f}",
                _ratio(f.throughput, floor.throughput) if target is not systems.direct else "",
                f"{f.load_cpu_ms:.2f}",
                _ratio(f.cpu_ms, mine.cpu_ms if mine else None),
                _ratio(f.throughput, mine.throughput if mine else None),
            ]
        )
    loads = [
        load
        for key, ls in measured.loads.items()
        if key != (systems.direct.label, "-")
        for load in ls
    ]
    busiest = max(load.upstream_cpu / load.seconds for load in loads)
    client = max(load.client_cpu / load.seconds for load in loads)
    verdicts = [
        f"The fake upstream alone costs {direct.cpu_ms:.2f} ms CPU per request "
        f"({direct.cpu_ms / floor.cpu_ms:.0%} of the floor's) and used at most {busiest:.0%} of "
        f"a core while a system was loaded; the load's client (this process) at most "
        f"{client:.0%} of a core.",
    ]
    for target in systems.targets:
        f = figures[target.label, target.code]
        waited = f.median_ms - direct.median_ms - f.cpu_ms
        if waited > max(f.cpu_ms, 5.0):  # waiting more than working: not a matter of CPU
            verdicts.append(
                f"{target.label} ({target.code}) adds {f.median_ms - direct.median_ms:.1f} ms "
                f"(median) for {f.cpu_ms:.1f} ms of CPU: {waited:.1f} ms of it is waiting."
            )
    verdicts += _checks(figures, systems.codes[0].label, floor, other)
    block_count = len(next(iter(measured.blocks.values())))
    block_size = len(next(iter(measured.blocks.values()))[0].seconds)
    intro = (
        "Small chat requests (one short user message, Anthropic Messages, not streamed, a new "
        "text each time) through each system to one fake upstream (`loadtests/fast_upstream.py`"
        ", asyncio streams, a fixed answer), all real processes on loopback, in one run. The "
        "floor is `loadtests/passthrough.py`, a 40-line pass-through proxy on asyncio streams; "
        "`loadtests/passthrough_httpx.py` is the same on the gateway's stack (uvicorn, httpx). "
        "The gateway is `toolref-server serve` (one worker, its embedded engine a child "
        "process), `TOOLREF_UPSTREAMS` naming the fake; protocol 1 is the request as an SDK "
        "that knows nothing of toolref sends it (passed through), protocol 2 the same with "
        "`Toolref-Protocol: 2` (through the hydration pipeline), and once more served by "
        "two workers (`TOOLREF_WORKERS=2`: uvicorn's supervisor binds the socket, the "
        "workers and the engine are its children); relay + gateway is "
        "`toolref relay --gateway` in front of it. Both run uvloop (their default where "
        "installed, as the relay and server extras install it); the rows `asyncio` are the "
        "gateway told to run asyncio's loop (`TOOLREF_EVENT_LOOP=asyncio`), and relay and "
        "gateway both on it (`--event-loop asyncio`), the choice measured side by side. "
        "The rows `gateway on granian` are the gateway's app served by "
        "granian (Rust's hyper and tokio; one worker, uvloop; `granian --interface asgi "
        "--factory toolref_server.app:create_app`) on an engine of its own, where "
        "`toolref-server serve` runs uvicorn with toolref's own HTTP/1.1 protocol (head, body "
        "and send deadlines, a connection limit, problem+json refusals: "
        "`toolref_server.http.connection`), which granian would not run: the ASGI server "
        "measured side by side. "
        f"{note(systems.files)} CPU is the time every thread of every process of "
        "the system ran (the gateway's engine included; Linux's schedstat, in ns), per "
        "request: sequential, "
        f"{block_count} blocks of {block_size} requests per system, the systems alternating; "
        "and at 32 busy connections. Added time: the system's median (p95) time to the whole "
        "answer minus the fake upstream's alone (its row shows its own times). Ratios are to "
        f"the floor, to `before` and to Portkey. {systems.portkey_note} "
        "Where the CPU goes: `python -m loadtests.gateway_profile` "
        f"(py-spy, installed apart). Command: `{command}`."
    )
    return Section(
        title="Gateway speed: small chat requests",
        intro=intro,
        header=[
            "system",
            "code",
            "CPU ms/req",
            "CPU ÷ floor",
            "CPU ÷ before",
            "added ms (median)",
            "added ms (p95)",
            "req/s @32",
            "req/s ÷ floor",
            "CPU ms/req @32",
            "CPU ÷ Portkey",
            "req/s ÷ Portkey",
        ],
        rows=rows,
        verdicts=verdicts,
        plotted=False,
    )


def _checks(
    figures: dict[tuple[str, str], Figures], after: str, floor: Figures, other: Figures | None
) -> list[str]:
    """The "done when" lines: against Portkey's figures where it ran, else the floor's."""
    gateway = {name: figures[name, after] for name in (GATEWAY_1, GATEWAY_2)}
    chain = {CHAIN: figures[CHAIN, after]}

    def check(
        claim: str, mine: dict[str, Figures], base: Figures, limit: float, rate: bool = False
    ) -> str:
        """`mine`'s CPU per request at most `limit` times `base`'s (its req/s at least)."""
        value = {k: f.throughput if rate else f.cpu_ms for k, f in mine.items()}
        of = base.throughput if rate else base.cpu_ms
        unit = "{:,.0f} req/s" if rate else "{:.2f} ms"
        missed = [k for k, v in value.items() if (v < of * limit if rate else v > of * limit)]
        said = "; ".join(f"{k} {unit.format(v)} ({v / of:.2f}x)" for k, v in value.items())
        met = f"**missed** by {' and '.join(missed)}" if missed else "met"
        return f"Done when {claim}: {said}, against {unit.format(of)}: {met}."

    cpu = "CPU per small request of the gateway (after)"
    chained = "CPU per small request of relay + gateway (after)"
    served = "req/s at 32 connections of the gateway (after)"
    if other is None:
        return [
            check(f"{cpu} is at most 9x the floor's (Portkey did not run)", gateway, floor, 9),
            "Req/s at 32 connections against Portkey's: not judged, Portkey did not run.",
            check(f"{chained} is at most 18x the floor's", chain, floor, 18),
        ]
    return [
        check(f"{cpu} is at most Portkey's", gateway, other, 1),
        check(f"{served} is at least Portkey's", gateway, other, 1, rate=True),
        check(f"{chained} is at most 2x Portkey's", chain, other, 2),
    ]


async def _run(found: list[Trace], plan: Plan, command: str) -> list[Section]:
    loads = [os.getloadavg()[0]]
    with ExitStack() as stack, before_code() as before:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="toolref-gw-")))
        codes = [AFTER] if before is None else [AFTER, before]
        systems = await _start(Launcher(stack, scratch), codes)
        print(f"gateway speed: code {systems.files}", file=sys.stderr)
        print(f"gateway speed: {systems.portkey_note}", file=sys.stderr)
        measured = await _small(systems, plan)
        gateway = systems.chains[AFTER.label][1].url
        started = await asyncio.to_thread(startup.verdicts, AFTER, gateway)
        loads.append(os.getloadavg()[0])
        turns = await gateway_turns.run(systems, found, plan, command)
        loads.append(os.getloadavg()[0])
    machine = (
        f"The machine's load average (1 minute) was {', '.join(f'{x:.1f}' for x in loads)} at "
        f"the start, middle and end of the run, on {os.cpu_count()} cores: other users' "
        "processes share them, so absolute times and throughput vary more than ratios do."
    )
    sections = [small_section(systems, measured, command), turns]
    sections[0].verdicts += started  # `loadtests/startup.py`
    for section in sections:
        section.intro += " " + machine
    return sections


def run(found: list[Trace], plan: Plan = Plan()) -> list[Section]:
    return asyncio.run(_run(found, plan, "make bench"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer rounds")
    parser.add_argument("--write", action="store_true", help="into docs/benchmarks.md")
    args = parser.parse_args()
    found = load()
    if not found:
        print("gateway speed: the shared traces are absent", file=sys.stderr)
        return 2
    plan = QUICK if args.quick else Plan()
    command = "python -m loadtests.gateway_speed" + (" --quick" if args.quick else "")
    for section in asyncio.run(_run(found, plan, command)):
        print(section.markdown())
        if args.write:
            replace_section(BENCHMARKS, section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
