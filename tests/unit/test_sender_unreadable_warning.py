"""Found in review (leftovers of stop 57): a 400 `malformed-body` to an edit is read as "the
receiver was rolled back to an older edits version": the request goes again as it is, the
version steps down, and with none lower, edits pause. The app's request never fails, so a
genuine bug in the sender (bytes its receiver cannot read) went unseen. Now each step is
logged once per endpoint, as a warning naming the endpoint, the version refused, the
version now written and what to do."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from toolref.edits.wire import MEDIA_TYPE
from toolref.sending.said import RECENT
from toolref.sending.transport import Transport

URL = "https://llm.test/v1/chat/completions"
ENDPOINT = "https://llm.test/v1/chat/completions"  # as JS shows it: no empty port
JSON = {"content-type": "application/json"}
LOGGER = "toolref.sending.sender"
ADVICE = "if the backend was not rolled back, report this with the request id"


def body(turn: int) -> bytes:
    messages = [{"role": "user", "content": f"turn {i} " * 40} for i in range(turn)]
    return json.dumps({"model": "m", "messages": messages}).encode()


class Refusing:
    """Says it reads edits of version 4, but refuses every edit 400 `malformed-body` (as a
    sender writing bytes no receiver reads would see), each with its own request id."""

    def __init__(self, detail: str = "the edit could not be read") -> None:
        self.kinds: list[str] = []
        self.detail = detail

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.headers.get("content-type") == MEDIA_TYPE:
            self.kinds.append("edit")
            problem = {
                "type": "urn:toolref:problem:malformed-body",
                "title": "malformed body",
                "status": 400,
                "detail": self.detail,
            }
            headers = {
                "content-type": "application/problem+json",
                "x-request-id": f"req-{self.kinds.count('edit')}",
            }
            return httpx.Response(400, json=problem, headers=headers)
        self.kinds.append("as it is")
        return httpx.Response(200, json={"id": "r"}, headers={**JSON, "toolref-edits": "4"})


def test_each_step_down_on_malformed_body_is_logged_once_per_endpoint(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [1000.0]
    receiver = Refusing()
    transport = Transport(httpx.MockTransport(receiver))
    transport.manager.sender.clock = lambda: now[0]
    caplog.set_level(logging.WARNING, logger=LOGGER)
    with httpx.Client(transport=transport) as client:
        for turn in range(1, 7):
            assert client.post(URL, content=body(turn), headers=JSON).status_code == 200
        # 4, 3, 2 and 1 refused, each then sent as it is; then paused: as it is
        assert receiver.kinds.count("edit") == 4
        warnings = [r for r in caplog.records if r.name == LOGGER]
        assert [r.levelno for r in warnings] == [logging.WARNING] * 4
        first, last = warnings[0].getMessage(), warnings[-1].getMessage()
        assert ENDPOINT in first
        assert "edits version 4" in first
        assert "now written for version 3" in first
        assert ADVICE in first
        assert "req-1" in first  # the refusal's X-Request-Id
        assert "edits version 2" in warnings[2].getMessage()
        assert "edits version 1" in last
        assert "edits paused" in last
        assert ADVICE in last
        # rolled forward (4 said alone for RECENT): refused again at 4, the same step
        now[0] += RECENT + 600
        before = len(receiver.kinds)
        assert client.post(URL, content=body(7), headers=JSON).status_code == 200
        assert client.post(URL, content=body(8), headers=JSON).status_code == 200
        assert "edit" in receiver.kinds[before:]
    assert len([r for r in caplog.records if r.name == LOGGER]) == 4


def test_a_receiver_refusing_every_edit_costs_a_few_refused_edits_an_hour_not_one_a_turn() -> None:
    """Found in review (the relearning code, second pass): with no lower version, edits
    paused as after a 415 (1 s, at most 30 s), and the refused versions expired after
    `RECENT`: a receiver (a proxy rewriting bodies) refusing every edit was sent one, refused
    and resent, on every turn a minute apart, for ever. Now such a pause is 5 minutes,
    doubled, at most an hour."""
    now = [1000.0]
    receiver = Refusing()
    transport = Transport(httpx.MockTransport(receiver))
    transport.manager.sender.clock = lambda: now[0]
    edits_at: list[int] = []  # the turns on which an edit went (and was refused)
    with httpx.Client(transport=transport) as client:
        for turn in range(1, 4 * 60 + 1):  # four hours, a turn a minute
            before = receiver.kinds.count("edit")
            assert client.post(URL, content=body(2 + turn % 3), headers=JSON).status_code == 200
            if receiver.kinds.count("edit") > before:
                edits_at.append(turn)
            now[0] += 60.0
    assert receiver.kinds.count("edit") == len(edits_at)  # one refused edit a turn at most
    # Each step down is 4 to 1, a refused edit on each of four turns; the last begins a pause
    # of 5 minutes, doubled, at most an hour (a turn a minute: the next edit `pause` turns
    # later, 4 said again by the answers as they are). Before: an edit on every turn, 240.
    expected: list[int] = []
    start, pause = 2, 5  # turn 1 learns the version
    while start <= 4 * 60:
        expected += range(start, start + 4)
        start, pause = start + 3 + pause, min(pause * 2, 60)
    assert edits_at == expected


def test_the_warning_shows_the_receiver_s_text_escaped_and_cut(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The problem's detail is the receiver's text: a hostile or broken one could write
    characters a terminal acts on (clearing the screen, moving the cursor) or megabytes into
    the app's log. It is shown as `toolref.wire.redaction.printable` shows a peer's text:
    escaped, at most 200 characters."""
    receiver = Refusing(detail="\x1b[2J\x1b[Hall clear" + "x" * 10_000)
    transport = Transport(httpx.MockTransport(receiver))
    caplog.set_level(logging.WARNING, logger=LOGGER)
    with httpx.Client(transport=transport) as client:
        for turn in range(1, 4):
            assert client.post(URL, content=body(turn), headers=JSON).status_code == 200
    said = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert said, "no warning"
    assert "\x1b" not in said[0]
    assert "\\x1b[2J" in said[0]  # as its escape
    assert len(said[0]) < 1_000
