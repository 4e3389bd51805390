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
- issue 39, the baseline over the relay's socket bytes: median 1.64, not 2.0. A turn's
  bytes were 91% its new tool result compressed alone (the size guard); the baseline
  compresses it against the previous body, which holds its vocabulary. Measured per
  segment: zstd level 19 saves 3-4% over level 3, brotli at quality 5 8-12% at about four
  times zstd's CPU (its built-in dictionary is public: the guard holds), quality 11 17% at
  20-40 times. Edits of version 5 carry brotli records (quality 5, within 16 KiB an edit):
  median 1.79, each trace at least 1.74. Then the zstd dictionary the package ships for
  the store's records, public too: at level 3 it made segments larger than brotli's
  streams (the earlier finding: 0-1%), at level 19 9-12% smaller than the smallest record
  before, at about 120 us per KiB. Edits of version 7 carry such frames (record kind 7,
  within 8 KiB an edit): median 1.92, each trace at least 1.79 ("Any conversation, any
  replica"). What is left is the synthetic patterns' guard cost: their tool results are
  random lines over a 72-word vocabulary (`loadtests/patterns.py`), which a segment alone
  spells out each time; on the shared traces the median is 2.46. A turn of `one-mark` is
  816 bytes: 733 its tool result (kind 7), 38 the header (16 of them the base's id, 8 the
  answer's), 24 the model's message against the answer, 11 two small raw segments, 10
  the channel's framing. Naming the base and the answer by a channel-local number (both
  sides know them) would save about 22 of them: 1.92 to about 1.99.
- issue 40, the time relay and gateway add to late turns: brotli records first added
  about 0.8 ms of relay CPU a turn, ten times what they cost in one process. py-spy
  (`python -m loadtests.gateway_profile --keep DIR`) put a fifth of the relay's samples in
  `brotli.compress`; the cause was the allocator: a fixed mmap threshold had frozen glibc's
  trim threshold at 128 KiB, so the encoder's tables (and every turn's body copies) were
  handed back and faulted in again each turn. Keeping up to 16 MiB of heap top
  (`toolref.kit.allocator`) took the profiled relay from 263 busy samples over the same
  204 turns to 189, the gateway from 320 to 256 ("Gateway speed: agent turns"). Then the
  relay's HTTP parser: uvicorn's h11 protocol (pure Python) against its httptools one
  (llhttp, in C), each relay with a gateway of its own, the two alternating turn by turn
  (`python -m loadtests.turns_ab`, at 08bf638 where the relay had `--http`, 6 rounds of the
  165-turn trace): over the last 20 turns the relay's CPU 2.05 ms on h11, 1.94 on
  httptools (0.95x), the time to the whole answer the same (4.33 and 4.34 ms); on small
  requests relay + gateway 1.77 and 1.67 ms of CPU. Not kept: uvicorn's httptools protocol
  forwards a chunked body's trailers as request headers (a trailer `x-api-key` reached the
  provider), takes `Transfer-Encoding: gzip, chunked` and drops the `gzip`, loses the body
  of an `Upgrade: h2c` request (and a request pipelined after it), queues pipelined
  requests without bound, and keeps any head (h11: 16 KiB); matching h11 took a 235-line
  subclass of uvicorn's internals, for 5% of the relay's CPU and no time. The relay now
  names h11 (uvicorn's default would pick httptools wherever it is installed). The ASGI
  server beside it: the gateway's app on granian (Rust) spent more CPU a small request than
  on uvicorn (0.67 against 0.53 ms, protocol 1) for more throughput at 32 connections
  (2,114 against 1,783 req/s: its I/O threads take a second core); the gateway stays on
  uvicorn, whose protocol toolref extends (`toolref_server.http.connection`: deadlines, the
  connection limit, problem+json refusals), and CPU per request is what the issue measures.
  What remains of the late turn (timestamps in each process, the last 20 turns, about 2.9
  ms a turn from the agent's first byte to the answer's end with the fake upstream): the
  relay 1.0 ms (its edit 0.43), the gateway 0.8 ms before the body is sent on (the edit
  applied 0.3, the body written 0.3), the upstream 0.4 ms, the answer back 0.5 ms, of which
  the recipe's keep, run while the upstream answers, is still under way at the answer's end
  for about 0.15 ms (a fast upstream answers before it is done). A channel's turn now ends
  its answer without waiting for either keep (its next turn comes to the same process,
  which waits there for a keep under way): within the host's noise here (`turns_ab
  --revision`: 4.77 against 4.89 ms), but with the store a round trip away it is what the
  late turn takes: `python -m loadtests.turns_ab --revision 07ab263~1 --rounds 4
  --store-delay D` (each gateway's store one valkey-server behind `loadtests.delay_proxy`,
  D ms each way) measured 5.29 against 7.57 ms a turn at D = 0.25 (0.5 ms round trips),
  6.84 against 9.26 ms at D = 0.5, the machine loaded by other work (load average 2-2.7):
  2.3 to 2.4 ms a turn saved, the end of each answer no longer behind two writes. The
  late-turn time moves with the host more than with any of these: between runs an hour
  apart the gateway's own CPU a turn (code unchanged) differed by a fifth. Stop 52's six
  runs read 4.51-5.90 ms (4.51 written); stop 53's two read 5.08 and 5.22 (written:
  FAIL), in runs where the code of 3160e1c beside it took 11-16% longer than in the run
  written before. Then the keep of a channel's turn moved to the answer's end: it had
  begun once the body went upstream, and with a fast upstream the answer reached the
  gateway while the keep's work (deriving the recipe, encoding and compressing its node,
  the store's batch: about 0.4 ms of the event loop) ran, and waited for it. With the
  store's batches written by `storage.commands.Batch` (half redis-py 8.1's CPU a
  pipeline), `turns_ab --revision` read 5.62 against 6.25 ms a late turn (4.48 against
  4.88 in a quieter run), and the written run 4.78 ms (PASS). Two more runs of
  `gateway_speed`, not written: 5.29 ms (FAIL) with the host about 5% slower (every
  system's CPU with it, the before-code's too), and 4.57 ms (PASS) on the last commit of
  stop 54: the point passes in two runs of three, at its target's edge.
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
