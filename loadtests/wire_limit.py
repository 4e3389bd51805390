"""The wire's limit (issue 40): for the longest shared trace, when each turn starts
streaming on an agent's uplink of `UPLINK_BPS` and `RTT` seconds to the provider, going
direct against going through a relay on the agent's machine and a gateway beside the
provider. A model, from bytes and CPU measured here:

    direct  = RTT + (head + body) x 8 / uplink
    toolref = relay CPU + RTT + edit x 8 / uplink + gateway CPU + body x 8 / DC_BPS + DC_RTT

The relay's CPU is its `Editor.prepare` of the turn (this process, best of `ROUNDS`), the
gateway's the edit read and applied (`wire.read`, `wire.inline`, `apply_segments`) plus
`GATEWAY_FIXED` for its HTTP and Redis work (the small-request CPU of `gateway_speed`); the
provider's own time is the same either way and left out. `break-even` is the uplink below
which going through toolref starts the turn sooner.

    python -m loadtests.wire_limit
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Sequence
from typing import Final

from loadtests import traces
from loadtests.edits_baseline import AGENT_HEADERS
from loadtests.edits_bench import from_trace
from loadtests.patterns import encode
from loadtests.report import Section, shown
from loadtests.traces import Trace
from toolref.edits import wire
from toolref.edits.edit import apply_segments
from toolref.sending.editor import Editor

COMMAND: Final = "make bench (this section alone: python -m loadtests.wire_limit)"
UPLINK_BPS: Final = 20e6
RTT: Final = 0.040
DC_BPS: Final = 1e9  # gateway -> provider, in one region
DC_RTT: Final = 0.001
GATEWAY_FIXED: Final = 0.0011  # s: the gateway's CPU for a small request at 32 connections
HEAD: Final = 600  # bytes of an agent's request head (Claude Code's, about)
ROUNDS: Final = 3
LAST: Final = 20  # the turns judged: the last, with the largest bodies


def _timed(pattern_turns: list[bytes], fmt: str) -> list[tuple[int, int, float, float]]:
    """Per turn: body bytes, edit bytes, relay CPU, gateway CPU (seconds; best of ROUNDS)."""
    best: list[tuple[int, int, float, float]] = []
    for round_ in range(ROUNDS):
        editor = Editor()
        held: dict[str, list[bytes]] = {}
        found = []
        for body in pattern_turns:
            start = time.thread_time()
            edit = editor.prepare(list(AGENT_HEADERS[fmt]), body, "messages")
            relay = time.thread_time() - start
            assert edit is not None
            start = time.thread_time()
            header, blob = wire.read(edit.body, 1 << 30, 1 << 30)
            segments = apply_segments(
                held.get(header.base or "", []), header.ops, wire.inline(header, blob, b"", None)
            )
            gateway = time.thread_time() - start
            held[edit.ref] = segments
            editor.confirm(edit, edit.ref)
            found.append((len(body), len(edit.body), relay, gateway))
        best = found if round_ == 0 else [
            (b, e, min(r, r2), min(g, g2))
            for (b, e, r, g), (_, _, r2, g2) in zip(best, found, strict=True)
        ]  # fmt: skip
    return best


def run(found: Sequence[Trace]) -> Section:
    patterns = [p for p in (from_trace(t, None) for t in found) if p is not None]
    longest = max(patterns, key=lambda p: len(p.turns))
    turns = _timed([encode(turn.body) for turn in longest.turns], longest.fmt)[-LAST:]
    rows: list[list[str]] = []
    evens: list[float] = []
    faster: list[float] = []
    for body, edit, relay, gateway in turns:
        direct = RTT + (HEAD + body) * 8 / UPLINK_BPS
        cpu = relay + gateway + GATEWAY_FIXED
        through = cpu + RTT + edit * 8 / UPLINK_BPS + body * 8 / DC_BPS + DC_RTT
        saved_bits = (HEAD + body - edit) * 8
        even = saved_bits / max(1e-9, cpu + body * 8 / DC_BPS + DC_RTT)
        evens.append(even)
        faster.append(direct / through)
    for label, index in (("first judged", 0), ("median", len(turns) // 2), ("last", -1)):
        body, edit, relay, gateway = turns[index]
        direct = RTT + (HEAD + body) * 8 / UPLINK_BPS
        through = relay + gateway + GATEWAY_FIXED + RTT + edit * 8 / UPLINK_BPS
        through += body * 8 / DC_BPS + DC_RTT
        rows.append(
            [
                label,
                f"{body / 1e3:,.0f} KB",
                f"{edit:,}",
                f"{relay * 1e3:.2f}",
                f"{(gateway + GATEWAY_FIXED) * 1e3:.2f}",
                f"{direct * 1e3:.0f}",
                f"{through * 1e3:.0f}",
                f"{evens[index] / 1e6:,.0f}",
            ]
        )
    least = min(evens)
    return Section(
        "The wire's limit (issue 40): a model",
        f"`{COMMAND}`. {longest.name}, its last {LAST} turns (the largest bodies): when a turn "
        f"starts streaming on an uplink of {UPLINK_BPS / 1e6:.0f} Mbit/s and {RTT * 1e3:.0f} ms "
        "to the provider, direct (the agent's head and body on the uplink) against through "
        "toolref (the relay's CPU, the edit on the uplink, the gateway's CPU and the body on "
        f"a {DC_BPS / 1e9:.0f} Gbit/s, {DC_RTT * 1e3:.0f} ms link to the provider). A model: "
        "bytes and the relay's and gateway's edit CPU measured here (best of "
        f"{ROUNDS} passes), the gateway's HTTP and Redis work taken as {GATEWAY_FIXED * 1e3:.1f} "
        "ms (its CPU for a small request at 32 connections, `gateway_speed`), the provider's "
        "own time left out (the same either way). `break-even`: the uplink below which toolref "
        "starts the turn sooner.",
        [
            "turn",
            "body",
            "edit bytes",
            "relay ms",
            "gateway ms",
            "direct ms",
            "through toolref ms",
            "break-even Mbit/s",
        ],
        rows,
        {"break-even": least, "faster": statistics.median(faster)},
        [
            f"toolref starts these turns sooner on any uplink below {least / 1e6:,.0f} Mbit/s "
            f"(model); on {UPLINK_BPS / 1e6:.0f} Mbit/s, {statistics.median(faster):.1f}x "
            "sooner (median)"
        ],
        plotted=False,
    )


def main() -> int:
    found = traces.load()
    shown(run(found), sys.argv[1:])
    return 0 if found else 2


if __name__ == "__main__":
    from loadtests.report import usage

    usage(__doc__, "wire_limit", write=True)
    sys.exit(main())
