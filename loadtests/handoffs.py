"""Benchmark and doc example: what a handoff carries on each shared trace."""

from __future__ import annotations

from loadtests.report import Section
from loadtests.traces import Trace
from toolref import formats, handoff
from toolref.wire.encoding import dumps_json


def run(traces: list[Trace]) -> Section:
    rows = []
    for trace in traces:
        fmt = formats.detect(trace.messages)
        found = formats.scan(trace.messages, fmt)
        payload = sum(len(dumps_json(p.invocation()["result"])) for p in found.complete)
        result = handoff.build(trace.messages, fmt)
        rows.append(
            [
                trace.name,
                str(result.tool_calls),
                str(result.kept),
                str(result.dropped_duplicates),
                str(result.left_out),
                f"{payload:,}",
                f"{len(result.block):,}",
            ]
        )
    return Section(
        title="Handoff",
        intro=(
            "Per shared trace, with the defaults (`maxToolContextChars` 40,000, results cut to "
            "4,000 characters head and tail): tool calls seen, carried, dropped as duplicates "
            "(a later read, run or edit supersedes them) and left out to fit, next to the "
            "characters of all tool results and of the whole block."
        ),
        header=[
            "trace",
            "tool calls",
            "kept",
            "duplicates",
            "left out",
            "result chars",
            "block chars",
        ],
        rows=rows,
    )


def example(trace: Trace, lines: int = 60) -> str:
    """Before and after on one real conversation, for docs/handoff.md."""
    fmt = formats.detect(trace.messages)
    text_only = handoff.digest(trace.messages)
    result = handoff.build(trace.messages, fmt)
    block = result.block.splitlines()
    shown = "\n".join(block[:lines])
    rest = len(block) - lines
    fence = "````"
    return "\n".join(
        [
            f"From `{trace.name}` ({len(trace.messages)} messages, "
            f"{result.tool_calls} tool calls).",
            "",
            "**Before**: a summary made from the text blocks only, which is all a text",
            "summarizer sees. Not one line of any file read or command output survives:",
            "",
            fence,
            text_only,
            fence,
            "",
            f"**After**: the handoff block ({len(result.block):,} characters; {result.kept} tool "
            f"calls kept, {result.dropped_duplicates} dropped as duplicates, "
            f"{result.chars_omitted:,} characters cut from long results). The first {lines} "
            "lines:",
            "",
            fence,
            shown,
            f"[... {rest} more lines ...]" if rest > 0 else "",
            fence,
            "",
        ]
    )
