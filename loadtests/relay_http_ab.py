"""The relay's HTTP parser on agent turns, side by side: two relays of this tree on one
gateway, one on httptools (`--http auto`), one on h11 (`--http h11`), each sent the turns
of the longer trace `loadtests.gateway_speed` replays, as its own conversation, the two
alternating turn by turn (which goes first swaps each turn); per relay, the median over
the last 20 turns of each round of the time to the whole answer and of the relay's own
CPU (Linux's schedstat). The small-request side by side is in `loadtests.gateway_speed`
(`relay on h11 + gateway`).

    python -m loadtests.relay_http_ab [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from loadtests.bandwidth import turns_of
from loadtests.drive import Target
from loadtests.gateway_turns import HEADERS, PATHS, body_of, chosen, renamed
from loadtests.systems import AFTER, UPSTREAM_NAME, Launcher
from loadtests.traces import load

CHOICES = ("auto", "h11")
LATE = 20


async def measure(rounds: int) -> dict[str, tuple[float, float]]:
    """Per `--http` choice: (time ms, relay CPU ms), medians over the late turns."""
    trace = chosen(load(), 2)[-1]  # the longer of the two `gateway_speed` replays
    fmt, messages, cuts = turns_of(trace)
    path = f"/llm/{UPSTREAM_NAME}{PATHS[fmt.name]}"
    seen: dict[str, tuple[list[float], list[float]]] = {o: ([], []) for o in CHOICES}
    with ExitStack() as stack:
        launcher = Launcher(stack, Path(stack.enter_context(tempfile.TemporaryDirectory())))
        gateway = launcher.gateway(AFTER, launcher.upstream(), "gateway")
        relays = {o: launcher.relay(AFTER, gateway.url, f"relay-{o}", "--http", o) for o in CHOICES}
        await launcher.wait()
        for number in range(rounds):
            talks = {o: renamed(messages) for o in CHOICES}
            targets = {o: Target("relay", o, p.url + path, HEADERS, [p]) for o, p in relays.items()}
            for index, cut in enumerate(cuts):
                for o in CHOICES if (index + number) % 2 == 0 else CHOICES[::-1]:
                    body = body_of(fmt.name, talks[o][:cut])
                    cpu, start = relays[o].cpu(), time.perf_counter()
                    await targets[o].send(body)
                    if index >= len(cuts) - LATE:
                        seen[o][0].append((time.perf_counter() - start) * 1e3)
                        seen[o][1].append((relays[o].cpu() - cpu) * 1e3)
            for target in targets.values():
                await target.close()
    return {o: (statistics.median(t), statistics.median(c)) for o, (t, c) in seen.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    found = asyncio.run(measure(parser.parse_args().rounds))
    for choice, (ms, cpu) in found.items():
        print(f"--http {choice}: last {LATE} turns, time {ms:.2f} ms, relay CPU {cpu:.2f} ms")


if __name__ == "__main__":
    main()
