"""Agent turns side by side: this tree against another revision (`--revision`), and its
relay started with other options (`--relay-options`, e.g. "--event-loop asyncio"), through
real relay and gateway processes in one run; what a change did to the late turns of a long
conversation, as ratios within one run on this machine.

Each system is a gateway (its embedded engine a child) and a relay in front of it. Each is
sent the turns of the longer trace `loadtests.gateway_speed` replays (each turn the whole
conversation so far, streamed answers), as a conversation of its own per round (its first
message made new), the systems alternating turn by turn (which goes first rotates). Per
system, over the last 20 turns of every round: the median time to the whole answer, and
the median CPU a turn of the relay and of the gateway with its engine (Linux's schedstat);
beside them the gateway's over the first 20 turns, and its growth (last over first).
The small-request side by side is `loadtests.code_ab`.

`--store-delay MS`: each gateway's store is one engine behind a proxy that delays every
byte by MS each way (`loadtests.delay_proxy`: a store a round trip of twice MS away), not
its embedded engine; the engine's CPU is then no gateway's.

    python -m loadtests.turns_ab [--revision REV] [--relay-options "..."] [--rounds 3]
        [--store-delay MS]
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from loadtests.bandwidth import turns_of
from loadtests.code_ab import checkout
from loadtests.drive import Target
from loadtests.gateway_turns import HEADERS, PATHS, body_of, chosen, renamed
from loadtests.systems import AFTER, UPSTREAM_NAME, Code, Launcher, Proc
from loadtests.traces import load

LATE = 20


@dataclass
class System:
    """A relay and its gateway, and what their late turns took (ms)."""

    label: str
    relay: Proc
    gateway: Proc
    times: list[float] = field(default_factory=list)
    relay_cpu: list[float] = field(default_factory=list)
    gateway_cpu: list[float] = field(default_factory=list)
    first_gateway_cpu: list[float] = field(default_factory=list)  # its first turns (ms)

    def line(self) -> str:
        time_, relay, gateway = (
            statistics.median(v) for v in (self.times, self.relay_cpu, self.gateway_cpu)
        )
        first = statistics.median(self.first_gateway_cpu)
        return (
            f"{self.label}: last {LATE} turns, time {time_:.2f} ms, CPU relay {relay:.2f} ms "
            f"+ gateway {gateway:.2f} ms = {relay + gateway:.2f} ms; gateway's first {LATE} "
            f"turns {first:.2f} ms (last over first {gateway / first:.2f})"
        )


async def measure(
    revision: str | None, options: str | None, rounds: int, store_delay: float | None = None
) -> list[System]:
    trace = chosen(load(), 2)[-1]  # the longer of the two `gateway_speed` replays
    fmt, messages, cuts = turns_of(trace)
    path = f"/llm/{UPSTREAM_NAME}{PATHS[fmt.name]}"
    with ExitStack() as stack:
        launcher = Launcher(stack, Path(stack.enter_context(tempfile.TemporaryDirectory())))
        upstream = launcher.upstream()
        plans: list[tuple[str, Code, tuple[str, ...]]] = [("this tree", AFTER, ())]
        if revision is not None:
            plans.append((revision, checkout(stack, revision), ()))
        if options:
            plans.append((f"this tree, relay {options}", AFTER, tuple(shlex.split(options))))
        store: dict[str, str] = {}
        if store_delay is not None:
            _, proxy = launcher.far_engine(store_delay)
            store["TOOLREF_REDIS_URL"] = proxy.url.replace("http://", "redis://") + "/0"
            await launcher.wait()
        systems = []
        for number, (label, code, extra) in enumerate(plans):
            gateway = launcher.gateway(code, upstream, f"gateway-{number}", 1, **store)
            relay = launcher.relay(code, gateway.url, f"relay-{number}", *extra)
            systems.append(System(label, relay, gateway))
        await launcher.wait()
        for number in range(rounds):
            talks = [renamed(messages) for _ in systems]
            targets = [
                Target("relay", s.label, s.relay.url + path, HEADERS, [s.relay]) for s in systems
            ]
            for index, cut in enumerate(cuts):
                turn = (index + number) % len(systems)
                for at in [*range(turn, len(systems)), *range(turn)]:
                    system, body = systems[at], body_of(fmt.name, talks[at][:cut])
                    relay, gateway = system.relay.cpu(), system.gateway.cpu()
                    start = time.perf_counter()
                    await targets[at].send(body)
                    if index >= len(cuts) - LATE:
                        system.times.append((time.perf_counter() - start) * 1e3)
                        system.relay_cpu.append((system.relay.cpu() - relay) * 1e3)
                        system.gateway_cpu.append((system.gateway.cpu() - gateway) * 1e3)
                    elif index < LATE:
                        system.first_gateway_cpu.append((system.gateway.cpu() - gateway) * 1e3)
            for target in targets:
                await target.close()
    return systems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--revision", help="a revision of this repository to set beside")
    parser.add_argument("--relay-options", help="this tree's relay with these options beside")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--store-delay", type=float, help="ms each way between each gateway and its store"
    )
    args = parser.parse_args()
    if not load():
        print("turns a/b: the shared traces are absent", file=sys.stderr)
        return 2
    for system in asyncio.run(
        measure(args.revision, args.relay_options, args.rounds, args.store_delay)
    ):
        print(system.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
