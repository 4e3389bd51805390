"""The soak's report: its section of docs/benchmarks.md (tables per process, requests and
errors by kind), the samples as CSV and the chart."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING, Final

from loadtests.soak_memory import MIB, PER, draw, timeline
from loadtests.soak_traffic import CUT_REQUEST, CUT_STREAM

if TYPE_CHECKING:
    from loadtests.soak import Result

# The run on the code before the zstd leak was fixed (issue 28), for comparison: written by
# hand from that run's report (`make soak` cannot run the old code).
BEFORE: Final = (
    "Before: on the code before issue 28's fix, `python -m loadtests.soak --time 5m` failed. "
    "The service kept every zstd body it inflated (`codec._Inflater` was the sink of its "
    "own zstd stream writer: a cycle through a C object, which the collector cannot free): "
    "from 225 to 434 MiB after warm-up, +270 MiB per 10k requests (216.6 MiB along the "
    "line over 8,032 requests, 8 allowed), while every other process passed "
    "([chart](bench/soak-before.png)); the same 5 minutes with the fix passed (service "
    "+2.2 MiB per 10k). Its first runs also found TOOLREF_VERIFIED_RECORDS and "
    "TOOLREF_VERIFIED_CHARS ignored (the store took the empty verifier the app gave it for "
    "none, and kept 32 MiB of records whatever the settings said), fixed alongside."
)


def _mib(value: float) -> str:
    return f"{value / MIB:.1f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows] + [""]


def _span(seconds: float) -> str:
    if seconds % 60:
        return f"{seconds:g} s"
    return f"{seconds / 60:g} minute{'s' if seconds != 60 else ''}"


def intro(result: Result, command: str) -> str:
    o = result.options
    return (
        f"`{command}`: {_span(o.time)} of mixed traffic against real processes on "
        "loopback: `toolref-server serve` on its embedded engine, `toolref relay` in front "
        "of its gateway, the fake provider of tests/e2e behind that, and "
        "examples/llm_backend.py behind `ToolRefMiddleware`, hydrating through the service "
        "(what is sent: loadtests/soak_traffic.py). The RSS of each process and of its "
        f"children (psutil) every {o.every:g} s. {_span(o.warmup)} of warm-up at "
        f"{o.rate * o.warmup_pace:g} actions a second, then {o.rate:g} a second. After "
        f"warm-up each process may grow by {o.limit.per_10k_mib:g} MiB per {PER:,} "
        f"requests (and never less than {o.limit.floor_mib:g} MiB in all, for short runs), "
        "along the least-squares line of RSS against requests served: it uses every "
        "sample, where two endpoints would judge two moments (a body in flight, a "
        "collection just run, the allocator keeping an arena); a leak is a slope, whatever "
        "level the process settled at. The service's caches are set to "
        f"{o.cache_bytes // MIB} MiB each and its TTL to {o.ttl} s, so that within warm-up "
        "they are full and evicting and the store expires as much as it writes."
    )


def markdown(result: Result, chart: str | None, command: str) -> str:
    """The soak's section: what ran, the chart, the tables, the verdict."""
    o, tally = result.options, result.tally
    problems = result.problems()
    lines = ["## Soak", "", intro(result, command), ""]
    if chart:
        lines += [f"![Soak]({chart})", ""]
    lines += _table(
        ["process", "RSS after warm-up, MiB", "at the end", "peak", "slope, MiB / 10k requests",
         "growth on the line, MiB", "allowed, MiB", "verdict"],
        [[g.process, _mib(g.first), _mib(g.last), _mib(g.peak), f"{g.per_10k_mib:+.2f}",
          f"{g.fitted_mib:+.1f}", f"{o.limit.allowed_mib(g.requests):.1f}",
          "pass" if g.passes(o.limit) else "FAIL"] for g in result.growths],
    )  # fmt: skip
    names = [g.process for g in result.growths]
    lines += ["RSS in MiB over the run:", ""]
    lines += _table(
        ["minute", "requests", *names],
        [[f"{s.at / 60:.1f}", f"{s.requests:,}", *(_mib(s.rss.get(n, 0)) for n in names)]
         for s in timeline(result.samples, points=9)],
    )  # fmt: skip
    deliberate = (CUT_REQUEST, CUT_STREAM)
    kinds = sorted(tally.requests.items(), key=lambda kv: (kv[0].startswith(deliberate), kv[0]))
    lines += _table(["requests", "count"], [[k, f"{n:,}"] for k, n in kinds])
    bodies = sorted(tally.bodies.items())
    lines += _table(["request bodies sent", "count"], [[k, f"{n:,}"] for k, n in bodies])
    errors = [[k, f"{n:,}"] for k, n in sorted(tally.errors.items())]
    lines += _table(["errors", "count"], errors or [["none but the deliberate disconnects", "0"]])
    late = f"; {tally.late:,} actions started over a second late" if tally.late else ""
    if problems:
        verdict = "FAIL: " + "; ".join(problems)
    else:
        verdict = (
            "PASS: every process within its allowance, no request failed, none logged an error"
        )
    lines.append(f"- {verdict} ({tally.total:,} requests{late}).")
    if BEFORE:
        lines += ["", BEFORE]
    return "\n".join(lines) + "\n"


def save(result: Result, folder: Path) -> Path:
    """The samples as CSV (`soak.csv`) and the chart (`soak.png`) in `folder`; the chart."""
    folder.mkdir(parents=True, exist_ok=True)
    names = sorted({label for s in result.samples for label in s.rss})
    with (folder / "soak.csv").open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["seconds", "requests", *names])
        for s in result.samples:
            writer.writerow([f"{s.at:.1f}", s.requests, *(s.rss.get(n, "") for n in names)])
    o = result.options
    return draw(result.samples, result.growths, o.warmup, o.limit, folder / "soak.png")
