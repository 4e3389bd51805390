"""Benchmark: a client's preparation of each turn as its history grows, with the manager's
transcripts and without.

The longest shared trace is replayed turn by turn (one request per model call, the history
so far in each, as `bandwidth` sends them) through `ToolReferenceManager.exchange` alone: no
network, each request answered at once by a backend that confirms the conversation's head,
so every turn after the first continues a history, compressed against it. What is timed is
the exchange's own work for the turn: reading and rewriting the messages, the upload (body,
dictionary, zstd) and learning from the answer.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx

from loadtests.bandwidth import on_the_wire
from loadtests.report import Section
from loadtests.traces import Trace, load
from toolref import ToolReferenceManager, formats
from toolref.history import chain_form, heads, history_ref
from toolref.wire.encoding import dumps_json
from toolref.wire.headers import HISTORY_HEADER

EDGE = 20  # turns averaged at each end of the conversation

# name -> the manager's options
MODES: dict[str, dict[str, Any]] = {
    "from scratch": {"max_transcripts": 0},
    "transcripts": {},
    "transcripts, no zstd": {"compress": False},
}


def _build(content: bytes, headers: dict[str, str]) -> httpx.Request:
    return httpx.Request("POST", "http://chat.test/chat", content=content, headers=headers)


def turns(trace: Trace) -> list[tuple[list[dict[str, Any]], httpx.Response]]:
    """Each request's messages (one growing list, as a chat client holds it) and the answer
    confirming their head (computed here from scratch, outside the timing)."""
    fmt = formats.detect(trace.messages)
    messages = [on_the_wire(m, fmt.name) for m in trace.messages]
    cuts = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and i > 0]
    found = []
    for cut in cuts:
        head = history_ref(heads(chain_form(messages[:cut], fmt))[-1])
        answer = httpx.Response(
            200, json={}, headers={"Toolref-Protocol": "2", HISTORY_HEADER: head}
        )
        found.append((messages[:cut], answer))
    return found


def replay(
    conversation: list[tuple[list[dict[str, Any]], httpx.Response]],
    options: dict[str, Any],
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """Seconds of each turn's exchange, through a new manager with `options`."""
    manager = ToolReferenceManager(**options)
    history: list[dict[str, Any]] = []
    seconds = []
    for messages, answer in conversation:
        history.extend(messages[len(history) :])
        body = {"model": "m", "messages": history}
        start = clock()
        exchange = manager.exchange(_build, body)
        next(exchange)
        try:
            exchange.send(answer)
        except StopIteration:
            pass
        else:
            raise AssertionError("the exchange resent a confirmed turn")
        seconds.append(clock() - start)
    assert manager.savings.histories_used == len(conversation) - 1
    return seconds


def run(traces: list[Trace], rounds: int = 3) -> Section:
    trace = max(traces, key=lambda t: t.size)
    conversation = turns(trace)
    samples: dict[str, list[list[float]]] = {name: [] for name in MODES}
    for _ in range(rounds):  # alternately, so drift affects every mode alike
        for name, options in MODES.items():
            samples[name].append(replay(conversation, options))
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
    speedup = last["from scratch"] / last["transcripts"]
    sizes = [len(dumps_json(conversation[n][0])) for n in (edge - 1, -1)]
    return Section(
        title="Client turn preparation",
        intro=(
            f"The longest shared trace ({trace.name}: {len(trace.messages)} messages, "
            f"{trace.size:,} bytes) replayed as {len(conversation)} requests, one per model "
            "call, through `ToolReferenceManager.exchange` alone, each answered at once by a "
            "backend confirming the conversation's head (no network): mean milliseconds of "
            f"the exchange's own work over the first and the last {edge} turns (median of "
            f"{rounds} replays per turn). `from scratch` reads every message every turn "
            "(`max_transcripts=0`); `transcripts` keeps each conversation's transcript, so a "
            "turn reads, digests and writes only its new messages (every message is still "
            "written once with orjson to see what changed, and zstd still loads the history "
            "as its dictionary, up to 1 MiB); `no zstd` is the same without compression."
        ),
        header=["manager", f"first {edge} turns ms", f"last {edge} turns ms", "last / first"],
        rows=rows,
        figures={
            "from_scratch_growth": last["from scratch"] / first["from scratch"],
            "transcripts_growth": last["transcripts"] / first["transcripts"],
            "transcripts_no_zstd_growth": (
                last["transcripts, no zstd"] / first["transcripts, no zstd"]
            ),
            "from_scratch_over_transcripts_last": speedup,
        },
        verdicts=[
            f"over the last {edge} turns, from scratch takes {speedup:.1f}x as long as with "
            f"transcripts (the history is {sizes[0]:,} bytes at turn {edge}, {sizes[1]:,} at "
            "the last)",
        ],
    )


def main() -> None:  # pragma: no cover - manual runs
    found = load()
    if not found:
        raise SystemExit("preparation: the shared traces are not there")
    print(run(found).markdown())


if __name__ == "__main__":
    main()
