"""`make bench`: run every benchmark and write docs/benchmarks.md."""

from __future__ import annotations

import sys
from pathlib import Path

from loadtests import (
    acp_updates,
    bandwidth,
    handoffs,
    hashing,
    memory,
    rewriting,
    service_speed,
    streams,
    summarization,
    traces,
)
from loadtests.report import replace_region, write

DOCS = Path(__file__).resolve().parents[1] / "docs"


def main() -> int:
    found = traces.load()
    if not found:
        print(f"bench: the shared traces are not at {traces.TRACES}", file=sys.stderr)
        return 2
    summaries = summarization.run(found)
    carried = handoffs.run(found)
    sections = [
        bandwidth.run(found),
        service_speed.run(found),
        hashing.run(found),
        memory.run(found),
        rewriting.run(found),
        summaries,
        carried,
        streams.run(),
        acp_updates.run(),
    ]
    text = write(DOCS / "benchmarks.md", "make bench", sections)
    replace_region(DOCS / "summaries.md", "summary-table", summaries.markdown())
    replace_region(DOCS / "handoff.md", "handoff-table", carried.markdown())
    anthropic = next(t for t in found if t.name.endswith("transcript"))
    replace_region(DOCS / "handoff.md", "handoff-example", handoffs.example(anthropic))
    replace_region(DOCS / "acp.md", "acp-life-minimal", acp_updates.life(full_objects=False))
    replace_region(DOCS / "acp.md", "acp-life-full", acp_updates.life(full_objects=True))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
