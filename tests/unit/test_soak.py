"""The soak's judgement (slopes, log lines, durations) and its traffic's bookkeeping, on
samples and conversations the tests make (the soak itself runs in `make soak` and CI)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import time
from typing import Any

import pytest
from loadtests import soak, soak_memory, workload
from loadtests.soak_memory import MIB, Limit, Sample, Sampler, growth, timeline
from loadtests.soak_traffic import Conversations

LIMIT = Limit(soak.LIMIT_MIB, soak.FLOOR_MIB)


def _samples(leak_per_request: float, noise: int, count: int = 600) -> list[Sample]:
    """A service at 100 MiB that keeps `leak_per_request` bytes per request, sampled once a
    second at 20 requests a second, each sample off by up to `noise` bytes."""
    rng = random.Random(7)
    found = []
    for second in range(count):
        requests = 20 * second
        rss = 100 * MIB + leak_per_request * requests + rng.randint(-noise, noise)
        found.append(Sample(float(second), requests, {"service": int(rss), "engine": 8 * MIB}))
    return found


def test_a_leak_is_its_slope_and_fails() -> None:
    """50 KB per request (about what each zstd body kept before issue 28's fix)."""
    [engine, service] = sorted(
        growth(_samples(50_000, 2 * MIB), warmup=60), key=lambda g: g.process
    )
    assert service.per_request == pytest.approx(50_000, rel=0.01)
    assert service.per_10k_mib == pytest.approx(50_000 * 10_000 / MIB, rel=0.01)
    assert not service.passes(LIMIT)
    assert engine.per_request == 0
    assert engine.passes(LIMIT)


def test_noise_without_a_leak_passes_where_the_endpoints_would_not() -> None:
    """Samples scattered by 4 MiB: the two ends may differ by up to 8 MiB over 10,800
    requests, the least-squares slope stays near zero."""
    samples = _samples(0, 4 * MIB)
    [_, service] = sorted(growth(samples, warmup=60), key=lambda g: g.process)
    assert abs(service.per_10k_mib) < 0.5
    assert service.passes(LIMIT)
    judged = [s for s in samples if s.at >= 60]
    assert service.first == judged[0].rss["service"]
    assert service.last == judged[-1].rss["service"]


def test_warm_up_is_left_out() -> None:
    """A process that grows by 200 MiB in its first minute, then stays: flat after warm-up."""
    samples = [
        Sample(
            s.at, s.requests, {"service": s.rss["service"] + int(min(s.at, 60)) * 200 * MIB // 60}
        )
        for s in _samples(0, 0)
    ]
    [service] = growth(samples, warmup=60)
    assert service.per_request == 0
    assert service.peak == service.last
    assert not growth(samples, warmup=0)[0].passes(LIMIT)  # warm-up judged: fails


def test_a_short_run_is_allowed_its_floor_and_a_long_one_its_rate() -> None:
    """A step of 3 MiB (the allocator keeping an arena) over the 2,000 requests of a short
    run is a slope of 15 MiB per 10k, within the floor; over a long run the rate decides."""
    step = [
        Sample(float(t), 20 * t, {"service": 100 * MIB + (3 * MIB if t >= 50 else 0)})
        for t in range(100)
    ]
    [short] = growth(step, warmup=0)
    assert short.per_10k_mib > 10
    assert short.requests == 1980
    assert short.fitted_mib < soak.FLOOR_MIB
    assert short.passes(LIMIT)
    for per_10k, passes in ((3.0, True), (5.0, False)):
        leak = [
            Sample(float(t), 100 * t, {"service": 100 * MIB + int(per_10k * MIB * t / 100)})
            for t in range(1001)
        ]
        [long] = growth(leak, warmup=0)
        assert long.per_10k_mib == pytest.approx(per_10k, rel=0.01)
        assert long.passes(LIMIT) is passes
        assert LIMIT.allowed_mib(long.requests) == pytest.approx(soak.LIMIT_MIB * 10)


def test_too_few_samples_after_warm_up_judge_nothing() -> None:
    assert growth(_samples(0, 0, count=10), warmup=60) == []


def test_a_process_and_its_children_are_sampled_not_their_children() -> None:
    """Two children of one name are told apart; a grandchild (the engine's fork for a
    background save) is not sampled under its parent's name."""
    shell = subprocess.Popen(
        ["sh", "-c", "sleep 30 & sleep 30 & sh -c 'sleep 30; :' & wait"], start_new_session=True
    )
    try:
        deadline = time.monotonic() + 10
        sampler = Sampler({"root": shell.pid}, lambda: 7, every=1.0)
        want = ["root", "root (sh)", "root (sleep)", "root (sleep) #2"]
        # A child forked but not yet exec'd still bears its parent's name: sample until the
        # shell has started all three (or the bound passes and the assert says what was seen).
        while sorted((found := sampler.sample()).rss) != want and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(found.rss) == want
        assert found.requests == 7
        assert all(size > 0 for size in found.rss.values())
    finally:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()


def test_the_timeline_spans_the_run() -> None:
    samples = _samples(0, 0)
    shown = timeline(samples, points=7)
    assert len(shown) == 7
    assert (shown[0], shown[-1]) == (samples[0], samples[-1])
    assert timeline(samples[:3]) == samples[:3]


def test_processes_are_shown_in_the_chain_order() -> None:
    labels = ["provider", "relay", "service (valkey-server)", "backend", "service"]
    assert sorted(labels, key=soak_memory._order) == [
        "service", "service (valkey-server)", "relay", "backend", "provider"
    ]  # fmt: skip


def test_error_lines_are_errors_and_tracebacks_not_warnings() -> None:
    log = "\n".join(
        [
            '{"time": "t", "level": "warning", "message": "client went away"}',
            '{"time": "t", "level": "error", "message": "boom"}',
            "toolref.relay: retrying",
            "ERROR:    Exception in ASGI application",
            "Traceback (most recent call last):",
            "  an ERROR inside a line is not one",
        ]
    )
    assert soak.error_lines(log) == [
        '{"time": "t", "level": "error", "message": "boom"}',
        "ERROR:    Exception in ASGI application",
        "Traceback (most recent call last):",
    ]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90.0), ("90s", 90.0), ("2m", 120.0), ("30m", 1800.0), ("1h", 3600.0)],
)
def test_durations(text: str, seconds: float) -> None:
    assert soak.seconds(text) == seconds


def test_a_duration_without_a_number_is_refused() -> None:
    with pytest.raises(Exception, match="not a duration"):
        soak.seconds("soon")


def test_an_anthropic_prefix_is_the_prefix_of_the_whole() -> None:
    """Each turn sends the conversation so far: converted, it must extend the turn before
    (or the relay could never continue a history)."""
    messages = workload.synthetic(3, turns=6, salt="s")
    system, whole = workload.anthropic(messages)
    assert system == "You are a coding agent."
    for cut in workload.cuts(messages):
        _, part = workload.anthropic(messages[:cut])
        assert part == whole[: len(part)]
        assert part[-1]["content"][0]["type"] == "tool_result"
    uses = [b for m in whole if m["role"] == "assistant" for b in m["content"]]
    results = [b for m in whole if m["role"] == "user" for b in m["content"] if "tool_use_id" in b]
    assert [u["id"] for u in uses] == [r["tool_use_id"] for r in results]
    assert len(uses) == 6


def test_a_salt_makes_new_payloads_of_the_same_conversation() -> None:
    plain, salted = workload.synthetic(1, turns=3), workload.synthetic(1, turns=3, salt="x")
    assert plain == workload.synthetic(1, turns=3)  # locust's conversations, unchanged
    assert [m["role"] for m in plain] == [m["role"] for m in salted]
    assert [m["content"] for m in plain if m["role"] == "tool"] != [
        m["content"] for m in salted if m["role"] == "tool"
    ]


async def test_turns_sent_at_once_go_in_order_and_conversations_move_on() -> None:
    """Many turns started together on 2 conversations of 3 turns: each conversation's
    turns are sent once each, in order, one at a time; then new ones start. (Turns that
    waited for a conversation that ended meanwhile once ran past its end.)"""
    conversations = Conversations("salt", width=2, turns=3)
    sent: list[tuple[str, int]] = []
    busy: set[str] = set()

    async def send(history: list[dict[str, Any]], turn: int) -> None:
        conversation = history[2]["tool_calls"][0]["id"].split("_")[1]
        assert conversation not in busy
        busy.add(conversation)
        await asyncio.sleep(0.001 * (turn + 1))
        sent.append((conversation, turn))
        busy.discard(conversation)

    await asyncio.gather(*(conversations.turn(send) for _ in range(30)))
    assert len(sent) == 30
    by_conversation: dict[str, list[int]] = {}
    for conversation, turn in sent:
        by_conversation.setdefault(conversation, []).append(turn)
    assert sorted(by_conversation) == [str(n) for n in range(10)]
    assert all(turns == [0, 1, 2] for turns in by_conversation.values())
