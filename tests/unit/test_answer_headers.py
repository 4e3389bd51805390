"""The upstream's answer headers as the gateway passes them on (`forwarder.answer_headers`):
an event stream gains `X-Accel-Buffering: no`, so an nginx in front (which buffers answers
by default, holding a stream's first events back until its buffers fill or it ends) passes
each event on as it comes; any other answer, or one whose upstream said, is left alone."""

from __future__ import annotations

from toolref_server.gateway.forwarder import answer_headers


def passed(*pairs: tuple[str, str]) -> list[tuple[str, str]]:
    raw = [(k.encode(), v.encode()) for k, v in pairs]
    return [(k.decode(), v.decode()) for k, v in answer_headers(raw)]


def test_an_event_stream_is_marked_unbuffered_for_nginx() -> None:
    assert passed(("Content-Type", "text/event-stream; charset=utf-8"), ("x-id", "1")) == [
        ("content-type", "text/event-stream; charset=utf-8"),
        ("x-id", "1"),
        ("x-accel-buffering", "no"),
    ]
    assert ("x-accel-buffering", "no") in passed(("content-type", "Text/Event-Stream"))


def test_the_upstreams_own_word_on_buffering_stands() -> None:
    assert passed(("content-type", "text/event-stream"), ("X-Accel-Buffering", "yes")) == [
        ("content-type", "text/event-stream"),
        ("x-accel-buffering", "yes"),
    ]


def test_other_answers_are_left_alone() -> None:
    for media in ("application/json", "text/plain", "application/x-ndjson"):
        assert passed(("content-type", media)) == [("content-type", media)]
    assert passed(("content-length", "2")) == [("content-length", "2")]
