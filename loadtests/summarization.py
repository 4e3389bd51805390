"""Benchmark: what summary mode saves per shared trace, next to dropping old results.

Summary mode (keepRecent 3, 400-character extractive summaries) is computed with the same
pure functions the service uses. "Drop" is what clearing old results outright saves
(Anthropic's context editing keeps the last 3 tool results and clears the rest): every
older result becomes a short `[tool result cleared]` text.
"""

from __future__ import annotations

from typing import Any

from loadtests.report import Section
from loadtests.traces import Trace
from toolref import formats
from toolref.kit import extractive
from toolref.wire.canonical import digest_of
from toolref.wire.encoding import dumps_json
from toolref_server.registry import compaction

KEEP = 3
BUDGET = 400
CLEARED = "[tool result cleared]"


def _condensed(messages: list[Any], summary_of: Any) -> tuple[list[Any], int]:
    fmt = formats.detect(messages)
    found = formats.scan(messages, fmt)
    refs = {p.key: str(digest_of(p.invocation()).ref) for p in found.complete}
    older = compaction.older_results(found, refs, KEEP, ())
    chosen = compaction.replacements(fmt, older, [summary_of(c) for c in older])
    return compaction.apply(messages, found, chosen), len(chosen)


def measure(trace: Trace) -> dict[str, int]:
    full = len(dumps_json(trace.messages))
    summarized, count = _condensed(
        trace.messages, lambda c: extractive.summarize(c.invocation, BUDGET)
    )
    fmt = formats.detect(trace.messages)
    found = formats.scan(trace.messages, fmt)
    refs = {p.key: "" for p in found.complete}
    older = compaction.older_results(found, refs, KEEP, ())
    dropped = compaction.apply(
        trace.messages, found, {c.pair.key: fmt.text_result(CLEARED) for c in older}
    )
    return {
        "full": full,
        "summary": len(dumps_json(summarized)),
        "drop": len(dumps_json(dropped)),
        "summarized": count,
        "older": len(older),
    }


def _pct(part: int, whole: int) -> str:
    return f"{100 * (1 - part / whole):.1f}%"


def run(traces: list[Trace]) -> Section:
    rows = []
    for trace in traces:
        m = measure(trace)
        rows.append(
            [
                trace.name,
                str(len(trace.messages)),
                f"{m['full']:,}",
                f"{m['summary']:,} ({_pct(m['summary'], m['full'])} saved)",
                f"{m['drop']:,} ({_pct(m['drop'], m['full'])} saved)",
                f"{m['summarized']} of {m['older']}",
            ]
        )
    return Section(
        title="Summary mode",
        intro=(
            f"Per shared trace: the bytes of the whole conversation sent to the model in full, "
            f"with summary mode (`keepRecent: {KEEP}`, {BUDGET}-character extractive "
            "summaries; a result is replaced only when its placeholder is shorter), and with "
            f"older results dropped outright (keep the last {KEEP}, clear the rest, as "
            "Anthropic's context editing does). Dropping saves more bytes but leaves the model "
            "nothing of those results; summary mode keeps what they said and a ref to fetch them."
        ),
        header=[
            "trace",
            "messages",
            "full bytes",
            "summary mode",
            "drop old results",
            "summarized",
        ],
        rows=rows,
    )
