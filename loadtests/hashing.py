"""Hashing: canonical digests (RFC 8785 bytes, then SHA-256) next to raw SHA-256."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from loadtests.report import Section
from loadtests.timing import interleaved
from loadtests.traces import Trace
from toolref import formats
from toolref.wire.canonical import canonical_json, digest_of


def payloads(traces: list[Trace], minimum: int = 10_000) -> list[dict[str, Any]]:
    """The trace invocations of at least `minimum` canonical bytes (string-heavy: tool
    output is text)."""
    found = []
    for trace in traces:
        fmt = formats.detect(trace.messages)
        for pair in formats.scan(trace.messages, fmt).complete:
            invocation = pair.invocation()
            if len(canonical_json(invocation)) >= minimum:
                found.append(invocation)
    return found


def run(traces: list[Trace], rounds: int = 5, min_time: float = 0.05) -> Section:
    invocations = payloads(traces)
    if not invocations:  # no trace payload that large: make one
        invocations = [{"name": "bash", "args": {}, "result": "x = 1\n" * 4000, "isError": False}]
    blobs = [canonical_json(i) for i in invocations]
    total = sum(map(len, blobs))

    def digests() -> object:
        return [digest_of(i) for i in invocations]

    def raw() -> object:
        return [hashlib.sha256(b).digest() for b in blobs]

    def dumps_and_hash() -> object:
        return [hashlib.sha256(json.dumps(i).encode()).digest() for i in invocations]

    timings = interleaved(
        {"sha256": raw, "json.dumps + sha256": dumps_and_hash, "canonical digest": digests},
        rounds=rounds,
        min_time=min_time,
    )
    base = timings["sha256"]
    share = base.seconds / timings["canonical digest"].seconds
    rows = [
        [name, f"{total / t.seconds / 2**20:,.0f} MiB/s", f"{base.seconds / t.seconds:.3f}"]
        for name, t in timings.items()
    ]
    verdict = "PASS" if share >= 0.25 else "FAIL"
    return Section(
        title="Hashing",
        intro=(
            f"Throughput over the {len(invocations)} shared-trace invocations of 10 KB or more "
            f"({total:,} canonical bytes, mostly tool output text): `canonical digest` is what "
            "a ref costs (canonical JSON, then SHA-256); `sha256` hashes the same canonical bytes "
            "already made. Relative: throughput as a share of raw SHA-256's."
        ),
        header=["operation", "throughput", "share of sha256"],
        rows=rows,
        figures={"share": share},
        verdicts=[
            f"{verdict}: canonical digests run at {share:.0%} of raw SHA-256 throughput "
            "(target 25%)"
        ],
    )
