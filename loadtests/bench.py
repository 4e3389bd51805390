"""`make bench`: run every benchmark and write docs/benchmarks.md."""

from __future__ import annotations

import sys
from pathlib import Path

from loadtests import (
    acp_updates,
    adversarial,
    agents,
    answers,
    bandwidth,
    chart,
    context_bench,
    conversation_memory,
    edits_bench,
    gateway_speed,
    handoffs,
    hashing,
    memory,
    relay,
    rewriting,
    service_speed,
    size_guard,
    streams,
    summarization,
    traces,
    turn_costs,
    web_chat,
    wire_limit,
)
from loadtests.report import region, replace_region, write

DOCS = Path(__file__).resolve().parents[1] / "docs"

PREAMBLE = """Load test: `make loadtest` (60 s, 50 users, a worker per core) passes with no failed
request; its last report is [loadtest/report.html](loadtest/report.html)
([stats](loadtest/stats.csv)). Sizing advice: [operations.md](operations.md). Memory over
a long run: `make soak` (30 minutes against real processes; its last run is the Soak
section at the end, which `make bench` keeps).

Targets missed, what the profile showed, and before and after (same machine):

- hydrate throughput against the bare baseline: 30% at first; 43% after one encoding of the
  filled conversation, no type walk of JSON bodies, one script call per batch and base32
  refs read by `int`; then 28% once every record read was checked against its digest
  (issue 18). Now: records whose bytes were checked once are known by their SHA-256
  (`TOOLREF_VERIFIED_RECORDS`), markers are filled in place where their refs tell them
  apart (one regular-expression scan per message instead of walking it), depth and items
  are checked per message only where the brackets or commas could break a limit, and bodies
  under 512 KiB are worked on inline: offloading them to worker threads cost a third of the
  throughput at 8 connections (GIL hand-offs and cache misses of requests interleaved at
  millisecond grain). The largest single step: the cyclic garbage collector, which at its
  default threshold ran a full pass over every live object (the caches included) every few
  requests, for bodies freed by reference counting anyway; the service now freezes its
  start-up objects and collects 50,000 allocations apart (49% to 68%, p99 2.2x to 1.2x, in
  the runs before and after). The request's size is counted rather than joined again, and
  the answer's messages are encoded one by one (one non-ASCII message made the whole joined
  string wide). What is left is inherent: toolref parses each message with its span,
  detects the format, pairs the calls and fills, where the baseline parses once and splices.
- canonical digest throughput: 19.5% of raw SHA-256 before, 20.5% after (escapes with nothing
  to replace are skipped), 23-26% later. Then strings and values with no floats went through
  orjson (its escaping is JCS's, checked for every code point; its key order JCS's below
  U+D800): 53%, where the check for rare control characters (`bytes.translate`, as slow as
  SHA-256 itself) and a copy per escape kind had been most of the time; 45% with long
  strings in 32K-character slices (orjson sizes its buffer for the worst escaping: 7x a
  long string's bytes at peak, 2x in slices).
- bandwidth: refs + zstd uploaded 2.4x less than zstd alone on the longest trace, not 20x:
  tool payloads are a third of the bytes a client resends; the rest is the model's own text,
  which refs do not replace. Retired with the history refs of 0.2 (issue 38): every client
  now sends edits, each request the segments the receiver does not hold ("Bandwidth").
- memory: 0.53 Redis bytes per payload byte before, 0.44 after, not 0.4. Records now hold a
  msgpack array (no field names) compressed with a zstd dictionary shipped in the package
  (versioned: each frame names its dictionary; trained on a corpus generated from this
  repository, never on the traces). What is left: about 90 bytes of Redis overhead per key,
  which no compression removes; level 9 would reach 0.415 at 6x the compression CPU. Retired
  in 0.3: conversations are kept as recipes and pieces, judged per raw JSON byte (0.5).
- memory per kept conversation: 1.41 Redis bytes per raw byte (history refs) before, 0.56
  after, not 0.5; met since 0.3, which keeps conversations as recipes and pieces.
- per-turn cost of the chat-backend path (history refs): the last 20 turns added 1.65x the
  time the first 20 did. Since 0.3 the client sends edits and the middleware restores them
  through the registry: judged in "Every client speaks edits" (CPU growth, bytes, the
  middleware's added time), which replaces the "Per-turn cost" section.
"""


def main() -> int:
    found = traces.load()
    if not found:
        print(f"bench: the shared traces are not at {traces.TRACES}", file=sys.stderr)
        return 2
    summaries = summarization.run(found)
    carried = handoffs.run(found)
    sections = [
        bandwidth.run(found),
        answers.run(found),
        hashing.run(found),
        memory.run(found),
        conversation_memory.run(found),
        rewriting.run(found),
        summaries,
        carried,
        streams.run(),
        acp_updates.run(),
        adversarial.run(),
        relay.run(found),
        size_guard.run(found),
        turn_costs.run(found),
        wire_limit.run(found),
        *edits_bench.run(found),  # its own processes, stopped before the next section
        context_bench.run(found),  # its own processes too
        *agents.run(),
        web_chat.run(),
        *gateway_speed.run(found),  # its own processes, stopped before the next section
        service_speed.run(found),  # last: its server processes must not slow the others
    ]
    for section in sections:
        drawn = chart.draw(section, DOCS / "bench")
        if drawn is not None:
            section.chart = str(drawn.relative_to(DOCS))
    # Written by `make loadtest-hostile` and `make soak` (30 minutes: not run here).
    kept = region(DOCS / "benchmarks.md", "hostile-loadtest") + region(
        DOCS / "benchmarks.md", "soak"
    )
    text = write(DOCS / "benchmarks.md", "make bench", sections, PREAMBLE, kept)
    replace_region(DOCS / "summaries.md", "summary-table", summaries.markdown())
    replace_region(DOCS / "handoff.md", "handoff-table", carried.markdown())
    anthropic = next(t for t in found if t.name.endswith("transcript"))
    replace_region(DOCS / "handoff.md", "handoff-example", handoffs.example(anthropic))
    replace_region(DOCS / "acp.md", "acp-life-minimal", acp_updates.life(full_objects=False))
    replace_region(DOCS / "acp.md", "acp-life-full", acp_updates.life(full_objects=True))
    print(text)
    return 0


if __name__ == "__main__":
    from loadtests.report import usage

    usage(__doc__, "bench")
    raise SystemExit(main())
