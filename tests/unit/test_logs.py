"""Structured JSON logs: fields, request ids and redaction."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from toolref_server.logs import MASK, REQUEST_ID, JsonFormatter, configure, redact


def line(message: str, *args: object, exc: bool = False, **extra: object) -> dict[str, object]:
    info = sys.exc_info() if exc else None
    record = logging.LogRecord(
        "toolref_server.x", logging.WARNING, __file__, 1, message, args, info
    )
    record.__dict__.update(extra)
    parsed: dict[str, object] = json.loads(JsonFormatter().format(record))
    return parsed


@pytest.mark.parametrize(
    ("text", "leaked"),
    [
        ("Authorization: Bearer abc.def-123", "abc.def-123"),
        ("authorization=Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
        ("upstream said: bearer sk-live-XYZ/123= is invalid", "sk-live-XYZ/123="),
        ("key trk_AbCdEf-123_456 refused", "trk_AbCdEf-123_456"),
        ("{'authorization': 'Bearer zzz'}", "zzz"),
    ],
)
def test_redact_masks_credentials(text: str, leaked: str) -> None:
    masked = redact(text)
    assert leaked not in masked
    assert MASK in masked


def test_redact_keeps_ordinary_text() -> None:
    text = "store resolve failed: ConnectionError: Error 111 connecting to 127.0.0.1:6379"
    assert redact(text) == text


def test_a_line_is_one_json_object_with_the_fields() -> None:
    parsed = line("store %s failed", "resolve", route="/v1/x", status=503)
    assert parsed["level"] == "warning"
    assert parsed["logger"] == "toolref_server.x"
    assert parsed["message"] == "store resolve failed"
    assert parsed["route"] == "/v1/x"
    assert parsed["status"] == 503
    assert str(parsed["time"]).endswith("Z")
    assert "requestId" not in parsed


def test_the_request_id_of_the_running_request_is_on_every_line() -> None:
    token = REQUEST_ID.set("req-77")
    try:
        assert line("anything")["requestId"] == "req-77"
    finally:
        REQUEST_ID.reset(token)
    assert "requestId" not in line("anything")


def test_secret_fields_and_secret_values_are_masked() -> None:
    parsed = line(
        "sent %s",
        "Authorization: Bearer hunter2",
        authorization="Bearer hunter2",
        body={"result": "payload"},
        note="token bearer hunter2",
    )
    assert "hunter2" not in json.dumps(parsed)
    assert "payload" not in json.dumps(parsed)
    assert parsed["authorization"] == parsed["body"] == MASK


def test_tracebacks_are_kept_and_redacted() -> None:
    try:
        raise ValueError("Authorization: Bearer in-traceback")
    except ValueError:
        parsed = line("failed", exc=True)
    assert "ValueError" in str(parsed["error"])
    assert "in-traceback" not in str(parsed["error"])


def test_configure_routes_every_logger_through_json(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        config = configure("info")
        logging.getLogger("toolref_server.storage.store").info("hello %s", "there")
        logging.getLogger("uvicorn.error").info(
            "Started server process", extra={"color_message": "Started \x1b[36mserver\x1b[0m"}
        )
        logging.getLogger("uvicorn.access").info("GET / 200")  # ours replaces it
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    lines = [json.loads(text) for text in capsys.readouterr().err.splitlines()]
    assert [entry["message"] for entry in lines] == ["hello there", "Started server process"]
    assert "color_message" not in lines[1]  # uvicorn's coloured copy of the message
    assert config["formatters"]["json"]["()"] is JsonFormatter


def test_a_request_target_s_query_key_is_masked() -> None:
    """uvicorn logs each WebSocket upgrade at INFO with its path and query (`"WebSocket
    /llm/gemini/...?key=AIza..." [accepted]`), through the service's handler: Gemini's Live
    API takes its key in the query. Before, the key was written whole."""
    parsed = line(
        '%s - "WebSocket %s" [accepted]',
        "127.0.0.1:50000",
        "/llm/gemini/ws/BidiGenerateContent?alt=sse&key=AIzaSy-secret-42",
    )
    assert "AIzaSy-secret-42" not in json.dumps(parsed)
    assert f"/llm/gemini/ws/BidiGenerateContent?alt={MASK}&key={MASK}" in str(parsed["message"])


def test_a_line_holds_no_character_a_terminal_acts_on() -> None:
    """JSON escapes C0 controls, but a line was written with `ensure_ascii=False`: DEL, C1
    controls (U+009B is a CSI of its own) and U+2028 from a WebSocket path the gateway logs
    decoded (`%C2%9B`), a bidirectional override, reached `tail -f` or `kubectl logs` as they
    came. Each is its `\\u` escape now; the line reads back the same."""
    path = "/v1/x\x7f\u009b2J\u2028\u202e\x1b[31m"
    record = logging.LogRecord("toolref_server.x", logging.INFO, __file__, 1, "%s", (path,), None)
    written = JsonFormatter().format(record)
    for character in ("\x7f", "\u009b", "\u2028", "\u202e", "\x1b"):
        assert character not in written
    assert json.loads(written)["message"] == path
    assert "é" in JsonFormatter().format(
        logging.LogRecord("x", logging.INFO, __file__, 1, "café", (), None)
    )  # other text stays as it is
