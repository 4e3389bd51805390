"""Benchmark: replacing payloads with refs and filling them back, next to json.dumps."""

from __future__ import annotations

import json

from loadtests.report import Section
from loadtests.timing import interleaved
from loadtests.traces import Trace
from toolref import formats
from toolref.wire.canonical import digest_of


def run(traces: list[Trace], rounds: int = 5, min_time: float = 0.05) -> Section:
    trace = max(traces, key=lambda t: t.size)
    messages = trace.messages
    fmt = formats.detect(messages)
    found = formats.scan(messages, fmt)
    refs = {p.key: str(digest_of(p.invocation()).ref) for p in found.complete}
    invocations = {refs[p.key]: p.invocation() for p in found.complete}
    optimized = formats.replace(messages, found, refs)
    marked = formats.scan(optimized, fmt)

    def replace_with_digests() -> object:
        scanned = formats.scan(messages, fmt)
        computed = {p.key: str(digest_of(p.invocation()).ref) for p in scanned.complete}
        return formats.replace(messages, scanned, computed)

    timings = interleaved(
        {
            "json.dumps": lambda: json.dumps(messages),
            "replace": lambda: formats.replace(messages, formats.scan(messages, fmt), refs),
            "replace + digests": replace_with_digests,
            "fill": lambda: formats.fill(optimized, formats.scan(optimized, fmt), invocations),
        },
        rounds=rounds,
        min_time=min_time,
    )
    assert formats.fill(optimized, marked, invocations) == messages
    base = timings["json.dumps"]
    rows = [
        [name, f"{t.seconds * 1e3:.2f} ms", f"{t.ratio(base):.3f}"] for name, t in timings.items()
    ]
    return Section(
        title="Message rewriting",
        intro=(
            f"The largest shared trace ({trace.name}: {len(messages)} messages, "
            f"{trace.size:,} bytes, {len(found.complete)} invocations). `replace` is scan plus "
            "replace with known refs (what the server does after registering); `replace + "
            "digests` also computes every ref (what a client does alone); `fill` is scan plus "
            "fill. Ratio: time over `json.dumps` of the same messages, measured alternately "
            "in the same run (median of rounds)."
        ),
        header=["operation", "median time", "ratio to json.dumps"],
        rows=rows,
        figures={name: t.ratio(base) for name, t in timings.items() if name != "json.dumps"},
    )
