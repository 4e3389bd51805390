"""`make bench`: run every benchmark and write docs/benchmarks.md."""

from __future__ import annotations

import sys
from pathlib import Path

from loadtests import rewriting, traces
from loadtests.report import write

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def main() -> int:
    found = traces.load()
    if not found:
        print(f"bench: the shared traces are not at {traces.TRACES}", file=sys.stderr)
        return 2
    sections = [rewriting.run(found)]
    text = write(DOCS, "make bench", sections)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
