"""What the answer dictionary and the long window add to a turn's CPU (issue 39), per end:
every shared trace and edit pattern sent turn by turn through the relay's `Editor`
(sans-I/O, every recipe confirmed, each turn's answer the one the conversation's next turn
writes back, streamed as the bench's upstream streams it: `loadtests.scripted`), three
ways: neither (version 2), the long window alone, and both (what is sent). A sender's turn
is its cut, diff and records (`Editor.prepare`) plus, with the answer, the tap reading the
stream (`AnswerTap`); a receiver's is its tap and the records read back
(`wire.read` + `wire.inline`), the same work as the gateway's. Best of `ROUNDS` passes in
one process (CPU time of this thread), so the figures are ratios within the run.

    python -m loadtests.turn_costs

Profile: `py-spy record -o turn_costs.svg -- python -m loadtests.turn_costs`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from loadtests import scripted, traces
from loadtests.edits_baseline import AGENT_HEADERS
from loadtests.edits_bench import from_trace
from loadtests.patterns import PATTERNS, Pattern, encode
from loadtests.report import Section, shown
from loadtests.traces import Trace
from toolref.edits import wire
from toolref.edits.answer import AnswerTap
from toolref.sending.editor import Editor

COMMAND: Final = "make bench (this section alone: python -m loadtests.turn_costs)"
ROUNDS: Final = 5
MODES: Final = {"neither": (False, False), "window": (True, False), "both": (True, True)}


@dataclass(frozen=True)
class Costs:
    """Seconds per turn, sender and receiver, and bytes sent, in one mode."""

    sender: float
    receiver: float
    sent: int


def _tap(fmt: str, stream: bytes) -> bytes | None:
    tap = AnswerTap("anthropic" if fmt == "anthropic" else "openai-chat")
    return tap.answer if tap.feed(stream) else None


def measure(pattern: Pattern, window: bool, answers: bool) -> Costs:
    """One pass of `pattern` through an editor in this mode (see the module docstring)."""
    editor = Editor(long_window=window)
    headers = list(AGENT_HEADERS[pattern.fmt])
    streams = [
        scripted.stream(pattern.fmt, found) if (found := scripted.next_answer(pattern.turns, n))
        else None
        for n in range(len(pattern.turns))
    ]  # fmt: skip
    bodies = [encode(turn.body) for turn in pattern.turns]
    sender = receiver = 0.0
    sent = 0
    held: dict[str, bytes] = {}  # the receiver's answers, by recipe
    for body, stream in zip(bodies, streams, strict=True):
        start = time.thread_time()
        edit = editor.prepare(headers, body, "messages")
        sender += time.thread_time() - start
        assert edit is not None
        sent += len(edit.body)
        start = time.thread_time()
        header, blob = wire.read(edit.body, 1 << 30, 1 << 30)
        answer = held.get(header.base or "") if header.answer is not None else None
        wire.inline(header, blob, b"", None, answer)
        receiver += time.thread_time() - start
        editor.confirm(edit, edit.ref)
        if answers and stream is not None:
            start = time.thread_time()
            made = _tap(pattern.fmt, stream)
            tapped = time.thread_time() - start
            editor.answered(edit.ref, made)
            if made is not None:
                held[edit.ref] = made
            sender, receiver = sender + tapped, receiver + tapped  # each end reads it
    turns = len(bodies)
    return Costs(sender / turns, receiver / turns, sent)


def best(pattern: Pattern, window: bool, answers: bool) -> Costs:
    found = [measure(pattern, window, answers) for _ in range(ROUNDS)]
    return Costs(min(c.sender for c in found), min(c.receiver for c in found), found[0].sent)


def run(found: Sequence[Trace], turns: int = 80) -> Section:
    chosen = [p for p in (from_trace(t, None) for t in found) if p is not None]
    chosen += [make(turns, 0) for make in PATTERNS.values()]
    rows: list[list[str]] = []
    added: list[float] = []
    for pattern in chosen:
        costs = {name: best(pattern, *mode) for name, mode in MODES.items()}
        plain, window, both = costs["neither"], costs["window"], costs["both"]
        added.append(both.sender / plain.sender)
        rows.append(
            [
                pattern.name,
                str(len(pattern.turns)),
                f"{plain.sender * 1e3:.2f}",
                f"{(window.sender - plain.sender) * 1e3:+.2f}",
                f"{(both.sender - window.sender) * 1e3:+.2f}",
                f"{both.sender / plain.sender:.2f}",
                f"{plain.receiver * 1e3:.2f}",
                f"{(both.receiver - plain.receiver) * 1e3:+.2f}",
                f"{plain.sent / max(1, both.sent):.2f}",
            ]
        )
    worst = max(added)
    return Section(
        "What the answer dictionary and the long window cost a turn (issue 39)",
        f"`{COMMAND}`. Every shared trace and edit pattern through the relay's `Editor`, "
        "each turn answered with the assistant message its conversation's next turn writes "
        "back: with neither (version-2 records), with the long window alone, with both (what "
        "relay, SDKs and gateway do). Sender: the cut, diff and records of a turn, and the tap "
        "reading its answer; receiver: the records read back and the tap, as the gateway "
        f"does. Milliseconds of CPU per turn, best of {ROUNDS} passes in one process; "
        "`bytes: neither ÷ both` is what the two save on the edit bodies. Profile: "
        "`py-spy record -o turn_costs.svg -- python -m loadtests.turn_costs`.",
        [
            "conversation",
            "turns",
            "sender ms/turn, neither",
            "+ long window",
            "+ answer (tap, frames)",
            "sender both ÷ neither",
            "receiver ms/turn, neither",
            "+ both",
            "bytes: neither ÷ both",
        ],
        rows,
        {"worst sender ratio": worst},
        [f"the sender's CPU per turn with both over neither: at most {worst:.2f} (no target)"],
        plotted=False,
    )


def main() -> int:
    found = traces.load()
    shown(run(found), sys.argv[1:])
    return 0 if found else 2


if __name__ == "__main__":
    from loadtests.report import usage

    usage(__doc__, "turn_costs", write=True)
    sys.exit(main())
