"""Benchmark: a client's preparation of each turn as its conversation grows, as an edit.

The longest shared trace is replayed turn by turn (one request per model call, the history
so far in each, as `bandwidth` sends them) through an `Editor` alone (the relay's and the
SDK's): no network, each edit confirmed at once, so every turn after the first is an edit of
the one before. What is timed is the editor's own work for the turn: the cut of the request
into segments (a scan of the whole body), the base's choice, the diff, the records (each
new segment compressed alone, or unguarded against the conversation) and keeping the recipe.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable

from loadtests.bandwidth import turns_of
from loadtests.report import Section
from loadtests.traces import Trace, load
from toolref.sending.editor import Editor

EDGE = 20  # turns averaged at each end of the conversation
MODES = {"size-guarded": True, "unguarded": False}  # name -> Editor(size_guard=)


def bodies(trace: Trace) -> list[bytes]:
    """Each request's body, one growing conversation as a chat client holds it."""
    _, messages, cuts = turns_of(trace)
    return [json.dumps({"model": "m", "messages": messages[:cut]}).encode() for cut in cuts]


def replay(
    conversation: list[bytes], guarded: bool, clock: Callable[[], float] = time.perf_counter
) -> list[float]:
    """Seconds of each turn's preparation and confirmation, through a new editor."""
    editor = Editor(size_guard=guarded)
    seconds = []
    for body in conversation:
        start = clock()
        edit = editor.prepare([], body, "messages")
        assert edit is not None
        editor.confirm(edit, edit.ref)
        seconds.append(clock() - start)
    return seconds


def run(traces: list[Trace], rounds: int = 3) -> Section:
    trace = max(traces, key=lambda t: t.size)
    conversation = bodies(trace)
    samples: dict[str, list[list[float]]] = {name: [] for name in MODES}
    for _ in range(rounds):  # alternately, so drift affects every mode alike
        for name, guarded in MODES.items():
            samples[name].append(replay(conversation, guarded))
    per_turn = {
        name: [statistics.median(turn) for turn in zip(*runs, strict=True)]
        for name, runs in samples.items()
    }
    edge = min(EDGE, len(conversation) // 2)
    first = {name: statistics.fmean(times[:edge]) for name, times in per_turn.items()}
    last = {name: statistics.fmean(times[-edge:]) for name, times in per_turn.items()}
    rows = [
        [
            name,
            f"{first[name] * 1e3:.2f}",
            f"{last[name] * 1e3:.2f}",
            f"{last[name] / first[name]:.2f}",
        ]
        for name in MODES
    ]
    sizes = [len(conversation[n]) for n in (edge - 1, -1)]
    return Section(
        title="Client turn preparation",
        intro=(
            f"The longest shared trace ({trace.name}: {len(trace.messages)} messages, "
            f"{trace.size:,} bytes) replayed as {len(conversation)} requests, one per model "
            "call, through an `Editor` alone (`prepare`, then `confirm`; no network): mean "
            f"milliseconds over the first and the last {edge} turns (median of {rounds} "
            "replays per turn). The cut scans the whole body every turn (issue 40 cuts only "
            "what differs from the previous body)."
        ),
        header=["editor", f"first {edge} turns ms", f"last {edge} turns ms", "last / first"],
        rows=rows,
        figures={f"{name}_growth": last[name] / first[name] for name in MODES},
        verdicts=[
            f"the body is {sizes[0]:,} bytes at turn {edge} and {sizes[1]:,} at the last: a "
            f"guarded turn's preparation grows {last['size-guarded'] / first['size-guarded']:.2f}x "
            "from the first turns to the last",
        ],
    )


def main() -> None:  # pragma: no cover - manual runs
    found = load()
    if not found:
        raise SystemExit("preparation: the shared traces are not there")
    print(run(found).markdown())


if __name__ == "__main__":
    from loadtests.report import usage

    usage(__doc__, "preparation")
    main()
