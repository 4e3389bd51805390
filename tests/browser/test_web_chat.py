"""The web-chat demo in a real browser: Debian's Chromium, headless, driven by playwright-core.

One 30-turn conversation (examples/web-chat/test/conversation.mjs) against the demo's
backend and a real registry, all on loopback, each turn's tool results several KB. The
registry is killed mid-conversation: restarted on its data before turn 11, killed again
before turn 20 (which runs with no registry), and back on an empty data folder before turn
21. The person at the page must notice none of it, and refs must resume after it. The
tests below read that one run:

- every turn completes, with its tool parts and answer, and the page never shows an error;
- the backend's app received exactly the messages the page held, key order included;
- the bytes each request put on the wire, read from the browser's request events (not
  from the SDK's counters), are a small part of what the page's messages weigh, and the
  page's own table reports the same wire bytes;
- the answer streams through the middleware to the page.

Needs node, /usr/bin/chromium and `make web-build`; `make test` and `make browser-test`
install them. Locally their absence skips, saying why; under CI=true it fails.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest
from examples import web_chat_demo

from tests.conftest import need
from toolref import CircuitBreaker

TURNS = 30
DELAY = 0.01  # seconds between the answer's text events
ARTIFACTS = web_chat_demo.ROOT / ".toolref" / "browser-test"

pytestmark = pytest.mark.slow


def compact(messages: Any) -> str:
    """JSON text without whitespace, keys in their order (never sorted)."""
    return json.dumps(messages, separators=(",", ":"), ensure_ascii=False)


class Run:
    def __init__(self, record: dict[str, Any], received: list[str], log: list[str]) -> None:
        self.turns: list[dict[str, Any]] = record["turns"]
        self.requests: list[dict[str, Any]] = record["requests"]
        self.page_turns: list[dict[str, Any]] = record.get("pageTurns") or []
        self.page_errors: list[str] = record["pageErrors"]
        self.received = received
        self.log = log

    def wire(self, turn: int) -> int:
        return sum(r["wireBytes"] for r in self.requests if r["turn"] == turn)

    def raw(self, turn: int) -> int:
        """What the turn's request weighs without toolref: the body the app received."""
        return len(self.received[turn - 1].encode())


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    lacking = web_chat_demo.missing()
    if lacking:
        need(lacking)
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    data = tmp_path_factory.mktemp("registry") / "data"
    log: list[str] = []
    with web_chat_demo.Stack(data, delay=DELAY) as stack:

        def crash_and_restart() -> None:
            stack.kill_registry()
            stack.start_registry()
            log.append("registry killed and restarted on its data before turn 11")

        def crash() -> None:
            stack.kill_registry()
            log.append("registry killed before turn 20")

        def restart_empty() -> None:
            stack.start_registry(fresh=True)
            # The backend's registry client opened its circuit breaker while the registry
            # was down; it probes again after reset_timeout. A person typing takes as long.
            time.sleep(CircuitBreaker().reset_timeout + 1)
            log.append("registry started on an empty data folder before turn 21")

        pauses = {11: crash_and_restart, 20: crash, 21: restart_empty}
        record = web_chat_demo.drive(stack.url, ARTIFACTS / "run.json", TURNS, pauses=pauses)
        yield Run(record, stack.received(), log)


def test_every_turn_completes_without_an_error_shown(run: Run) -> None:
    assert len(run.log) == 3, run.log
    assert [t["turn"] for t in run.turns] == list(range(1, TURNS + 1))
    for turn in run.turns:
        assert (turn["status"], turn["error"], turn["shownError"]) == ("ready", None, None), turn
        messages = json.loads(turn["messages"])
        assert len(messages) == 2 * turn["turn"]
        answer = messages[-1]
        assert answer["role"] == "assistant"
        tools = [p for p in answer["parts"] if p["type"].startswith("tool-")]
        assert tools, f"turn {turn['turn']} called no tool"
        for part in tools:
            assert part["state"] == "output-available"
            assert len(json.dumps(part["output"])) > 1500  # several KB each
        text = "".join(p["text"] for p in answer["parts"] if p["type"] == "text")
        assert text.startswith(f"Turn {turn['turn']}: "), text
    assert run.page_errors == []


def test_backend_received_exactly_the_messages_the_page_held(run: Run) -> None:
    # A resend is answered by the middleware before the app runs: one body per turn.
    assert len(run.received) == TURNS
    for turn, body in zip(run.turns, run.received, strict=True):
        held = json.loads(turn["messages"])[:-1]  # what the page held when it sent the turn
        got = json.loads(body)["messages"]
        assert compact(got) == compact(held), f"turn {turn['turn']} differs"


def test_requests_put_few_bytes_on_the_wire(run: Run) -> None:
    raw = sum(run.raw(n) for n in range(1, TURNS + 1))
    wire = sum(run.wire(n) for n in range(1, TURNS + 1))
    assert raw > 2_000_000  # the conversation is heavy: tool results resent every turn
    assert wire * 10 < raw, f"{wire} bytes on the wire for {raw} bytes of messages"
    # After the registry came back empty, refs were rebuilt: the last turns are cheap again.
    for n in range(25, TURNS + 1):
        assert run.wire(n) * 10 < run.raw(n), (n, run.wire(n), run.raw(n))


def test_the_page_reports_the_bytes_the_browser_sent(run: Run) -> None:
    shown = {t["turn"]: t["wireBytes"] for t in run.page_turns}
    measured = {n: run.wire(n) for n in range(1, TURNS + 1)}
    assert shown == measured


def test_answers_stream_through_the_middleware(run: Run) -> None:
    answered = [r for r in run.requests if r["status"] == 200]
    assert len(answered) == TURNS
    # Eight or more text events DELAY apart: a buffered answer would arrive all at once.
    for request in answered:
        assert request["streamedMs"] > 8 * DELAY * 1000 * 0.8, request
    assert sum(1 for t in run.turns if t["partials"] > 0) >= TURNS // 2
