"""What the size guard costs (issue 37, M1): every shared trace and edit pattern sent turn by
turn through an `Editor` (the relay's, sans-I/O, every recipe confirmed), size-guarded (each
new segment compressed alone: version-2 edits, the default) and unguarded (compressed
against the conversation: `--no-size-guard`), with issue 30's baseline beside them (each
body zstd against the previous body of its conversation). Edit bodies only, no request
heads: the heads are the same either way. Ratios within one run.

    python -m loadtests.size_guard
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from loadtests import traces
from loadtests.edits_baseline import delta
from loadtests.edits_bench import from_trace
from loadtests.patterns import PATTERNS, Pattern, encode
from loadtests.report import Section
from loadtests.traces import Trace
from toolref.sending.editor import Editor

COMMAND = "make bench (this section alone: python -m loadtests.size_guard)"


def sent(pattern: Pattern, *, guarded: bool) -> int:
    """Bytes of the edit bodies an editor sends for `pattern`'s turns."""
    editor = Editor(size_guard=guarded)
    total = 0
    for turn in pattern.turns:
        edit = editor.prepare([], encode(turn.body), "messages")
        assert edit is not None
        total += len(edit.body)
        editor.confirm(edit, edit.ref)
    return total


def baseline(pattern: Pattern) -> int:
    previous: dict[int, bytes] = {}
    total = 0
    for turn in pattern.turns:
        body = encode(turn.body)
        total += len(delta(body, previous.get(turn.conversation)))
        previous[turn.conversation] = body
    return total


def run(found: Sequence[Trace], turns: int = 40) -> Section:
    chosen = [p for p in (from_trace(t, None) for t in found) if p is not None]
    chosen += [make(turns, 0) for make in PATTERNS.values()]
    rows: list[list[str]] = []
    ratios: list[float] = []
    for pattern in chosen:
        guarded, open_ = sent(pattern, guarded=True), sent(pattern, guarded=False)
        ratios.append(guarded / open_)
        per_turn = (guarded - open_) / len(pattern.turns)
        rows.append(
            [
                pattern.name,
                str(len(pattern.turns)),
                f"{baseline(pattern):,}",
                f"{open_:,}",
                f"{guarded:,}",
                f"{guarded / open_:.2f}",
                f"{per_turn:+.0f}",
            ]
        )
    return Section(
        "The size guard's cost (issue 37)",
        f"`{COMMAND}`. Edit bodies of every shared trace and edit pattern through the relay's "
        "`Editor`: size-guarded (the default: each new segment compressed alone, as a zstd "
        "frame or, in edits of version 5, a brotli stream, whichever is smaller, so that a "
        "text repeating a secret of the conversation costs what any other does; "
        'docs/reliability.md, "Sizes") and unguarded (`--no-size-guard`: compressed against '
        "the conversation). Request heads are the same either way and left out.",
        [
            "conversation",
            "turns",
            "baseline (zstd vs previous body)",
            "unguarded",
            "guarded",
            "guarded / unguarded",
            "bytes per turn",
        ],
        rows,
        figures={"guard cost max": max(ratios), "guard cost min": min(ratios)},
        plotted=False,
    )


def main() -> int:
    found = traces.load()
    if not found:
        print(f"size_guard: no shared traces at {traces.TRACES}: patterns only", file=sys.stderr)
    print(run(found).markdown())
    return 0


if __name__ == "__main__":
    from loadtests.report import usage

    usage(__doc__, "size_guard")
    raise SystemExit(main())
