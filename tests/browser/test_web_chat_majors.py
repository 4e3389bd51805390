"""The one-line integration on every current AI SDK major, in a real browser.

The page (examples/web-chat/majors/page) writes docs/js.md's line inline in its component,
`new DefaultChatTransport({ api: "/api/chat", fetch: toolrefFetch() })`, so every render
builds a new transport and a new `toolrefFetch()`. It is built once per major (majors/ai5,
ai6, ai7: each its own package-lock) and driven in Debian's Chromium by the demo's driver
(examples/web-chat/test/conversation.mjs) through a few turns with tool calls, against the
demo's backend (ToolRefMiddleware, a scripted model) and a real registry on loopback.

Fails before the fix for AI SDK 6 and 7 (issue 32): each `toolrefFetch()` had its own
state, so what the backend said on one render was never used on the next and every turn went
whole (raw = wire). The first turn goes as it is, offering edits (`Toolref-Edits: 2`); the
backend's answer says it reads them, and every later turn is an edit.

Needs node, /usr/bin/chromium and `make web-build`; `make test` and `make browser-test`
install them. Locally their absence skips, saying why; under CI=true it fails.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from examples import web_chat_demo

from tests.conftest import need

TURNS = 4
EDIT = "application/vnd.toolref.edit"
ARTIFACTS = web_chat_demo.ROOT / ".toolref" / "browser-test-majors"

pytestmark = pytest.mark.slow


class Run:
    def __init__(self, record: dict[str, Any], received: list[str]) -> None:
        self.ai: str | None = record.get("ai")
        self.turns: list[dict[str, Any]] = record["turns"]
        self.requests: list[dict[str, Any]] = record["requests"]
        self.page_errors: list[str] = record["pageErrors"]
        self.received = received

    def wire(self, turn: int) -> int:
        """Bytes the turn's requests put on the wire, from the browser's own request events."""
        return sum(r["wireBytes"] for r in self.requests if r["turn"] == turn)

    def raw(self, turn: int) -> int:
        """What the turn's request weighs without toolref: the body the app received."""
        return len(self.received[turn - 1].encode())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, Run]]:
    lacking = web_chat_demo.missing()
    if lacking:
        need(lacking)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    data = tmp_path_factory.mktemp("registry") / "data"
    found: dict[int, Run] = {}
    page = web_chat_demo.MAJORS / "dist"
    with web_chat_demo.Stack(data, delay=0.001, page=page) as stack:
        for major in web_chat_demo.AI_MAJORS:
            before = len(stack.received())
            out = ARTIFACTS / f"ai{major}.json"
            record = web_chat_demo.drive(f"{stack.url}ai{major}/", out, TURNS, timeout=120)
            found[major] = Run(record, stack.received()[before:])
        yield found


@pytest.mark.parametrize("major", web_chat_demo.AI_MAJORS)
def test_every_turn_completes_on_this_major(runs: dict[int, Run], major: int) -> None:
    run = runs[major]
    assert run.ai is not None
    assert run.ai.startswith(f"{major}."), run.ai
    assert [t["turn"] for t in run.turns] == list(range(1, TURNS + 1))
    for turn in run.turns:
        assert (turn["status"], turn["error"], turn["shownError"]) == ("ready", None, None), turn
        answer = json.loads(turn["messages"])[-1]
        tools = [p for p in answer["parts"] if p["type"].startswith("tool-")]
        assert tools, answer
        assert all(p["state"] == "output-available" for p in tools), answer
    assert run.page_errors == []


@pytest.mark.parametrize("major", web_chat_demo.AI_MAJORS)
def test_the_backend_got_exactly_the_page_messages(runs: dict[int, Run], major: int) -> None:
    run = runs[major]
    assert len(run.received) == TURNS  # a resend is answered before the app runs
    for turn, body in zip(run.turns, run.received, strict=True):
        held = json.loads(turn["messages"])[:-1]
        got = json.loads(body)["messages"]
        dump = json.dumps
        assert dump(got, separators=(",", ":")) == dump(held, separators=(",", ":")), turn["turn"]


@pytest.mark.parametrize("major", web_chat_demo.AI_MAJORS)
def test_the_inline_one_liner_saves_from_the_second_turn(runs: dict[int, Run], major: int) -> None:
    run = runs[major]
    for n in range(2, TURNS + 1):
        requests = [r for r in run.requests if r["turn"] == n]
        assert [r["status"] for r in requests] == [200], requests  # no resend either
        assert requests[0]["contentType"] == EDIT  # the backend said it reads edits
        assert run.wire(n) * 3 < run.raw(n), (n, run.wire(n), run.raw(n))
    total_raw = sum(run.raw(n) for n in range(1, TURNS + 1))
    total_wire = sum(run.wire(n) for n in range(1, TURNS + 1))
    assert total_wire * 3 < total_raw, (total_wire, total_raw)
