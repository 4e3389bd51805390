"""Where the extractive summarizer runs: in place for a small invocation (a thread's hop
cost a small summary more than it took), in a worker thread for a large one, or one whose
size it would take more than a bounded look on the event loop to count
(`summarizers.sized`)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from tests.support.threads import threads_of
from toolref.asgi.workers import CONTAINER_BYTES, Workers
from toolref.kit import extractive
from toolref.kit.kinds import KindTable
from toolref_server.registry.summarizers import (
    LINE_BYTES,
    SIZED_VALUES,
    ExtractiveSummarizer,
    sized,
)

THRESHOLD = 64 << 10
SMALL = {"name": "read_file", "args": {"path": "a.py"}, "result": "line\n" * 200}
LARGE = {"name": "read_file", "args": {"path": "a.py"}, "result": "line\n" * 20_000}
WIDE = {"name": "ls", "args": {}, "result": [0] * SIZED_VALUES}  # small, but past the look
LINES = {"name": "grep", "args": {}, "result": "x.py:1\n" * 9_000}  # 63 KB, 9,000 lines
JSON = {"name": "ls", "args": {}, "result": "[" + "[]," * 400 + "[]]"}  # 1.2 KB of JSON
DEEP: dict[str, Any] = {"name": "tree", "args": {}, "result": "leaf"}
for _ in range(SIZED_VALUES):
    DEEP = {"name": "tree", "args": {}, "result": DEEP}


def test_sized_counts_strings_keys_and_containers_within_a_bounded_look() -> None:
    small = sized(SMALL, THRESHOLD)
    keys = len("name") + len("args") + len("result") + len("path")
    lines = 200 * LINE_BYTES
    strings = len(SMALL["result"]) + len("read_file") + len("a.py") + keys
    assert small == strings + lines + 2 * CONTAINER_BYTES
    assert sized(LARGE, THRESHOLD) == THRESHOLD  # past it: a thread's
    assert sized(WIDE, THRESHOLD) == THRESHOLD  # more values than it looks at
    assert len(str(WIDE)) < THRESHOLD  # (counted whole, it is small)
    assert len(LINES["result"]) < THRESHOLD <= sized(LINES, THRESHOLD)  # its lines too
    assert len(JSON["result"]) < THRESHOLD <= sized(JSON, THRESHOLD)  # JSON as text too
    assert sized(DEEP, 1 << 40) == 1 << 40  # as many, one inside the other
    assert sized(SMALL, None) == 0  # no threshold: every size runs in place


@pytest.mark.parametrize(
    ("invocation", "in_place"),
    [(SMALL, True), (LARGE, False), (WIDE, False), (DEEP, False), (LINES, False), (JSON, False)],
    ids=["small", "large", "wide", "deep", "lines", "json-as-text"],
)
def test_a_small_invocation_is_summarized_in_place_and_a_large_in_a_thread(
    monkeypatch: pytest.MonkeyPatch, invocation: dict[str, Any], in_place: bool
) -> None:
    threads = threads_of(monkeypatch, extractive, "summarize")
    workers = Workers(1, THRESHOLD)
    summarizer = ExtractiveSummarizer(KindTable.parse(""), workers)
    try:
        text = asyncio.run(summarizer.summarize(invocation, 200))
    finally:
        workers.close()
    assert text == extractive.summarize(invocation, 200, KindTable.parse(""))
    assert len(threads) == 2  # the summarizer's and the comparison's
    here = threading.main_thread().name
    assert (threads[0] == here) is in_place, threads
