"""The headers the app behind `ToolRefMiddleware` sees for a restored edit
(`toolref.receiving.restoring.merged_headers`): segment 0's, as the app's SDK wrote them,
but what the network says wins where the client's body must not speak for it."""

from __future__ import annotations

from toolref.receiving.restoring import merged_headers

SEGMENT = [  # segment 0 as the SDK wrote it, credentials filled
    ("content-type", "application/json"),
    ("user-agent", "OpenAI/Python 2.1"),
    ("accept", "application/json"),
    ("x-remote-user", "admin"),  # forged inside the body
    ("x-forwarded-for", "127.0.0.1"),
    ("authorization", "Bearer real"),
    ("x-trace", "a"),
    ("x-trace", "b"),
]


def test_a_header_a_proxy_set_wins_over_the_one_in_the_body() -> None:
    real = [
        ("content-type", "application/vnd.toolref.edit"),
        ("x-remote-user", "alice"),  # an auth proxy in front sets it
        ("x-forwarded-for", "203.0.113.9"),
        ("x-trace", "proxy"),
    ]
    merged = merged_headers(SEGMENT, real)
    assert ("x-remote-user", "alice") in merged
    assert ("x-remote-user", "admin") not in merged
    assert [v for k, v in merged if k == "x-forwarded-for"] == ["203.0.113.9"]
    assert [v for k, v in merged if k == "x-trace"] == ["proxy"]  # all its lines, once
    assert [k for k, _ in merged][:3] == ["content-type", "user-agent", "accept"]  # in place


def test_the_http_stacks_defaults_and_credentials_stay_as_the_sdk_wrote_them() -> None:
    real = [
        ("user-agent", "node"),  # fetch's defaults on the edit request itself
        ("accept", "*/*"),
        ("accept-language", "*"),
        ("authorization", "Bearer real"),
        ("cookie", "session=1"),  # a browser's, not in segment 0: added
    ]
    merged = merged_headers(SEGMENT, real)
    assert ("user-agent", "OpenAI/Python 2.1") in merged
    assert ("accept", "application/json") in merged
    assert ("accept-language", "*") in merged  # not in segment 0: the real one, added
    assert merged.count(("authorization", "Bearer real")) == 1
    assert merged[-2:] == [("accept-language", "*"), ("cookie", "session=1")]


def test_headers_that_describe_a_hop_never_come_from_the_body() -> None:
    segment = [("host", "admin.internal"), ("content-length", "3"), ("x-a", "1")]
    real = [("host", "backend.example"), ("content-length", "99")]
    merged = merged_headers(segment, real)
    assert merged == [("x-a", "1"), ("host", "backend.example")]  # framing is set after


def test_with_nothing_real_named_twice_segment_0_comes_first_then_the_rest() -> None:
    merged = merged_headers(SEGMENT[:2], [("origin", "https://app.example")])
    assert merged == [*SEGMENT[:2], ("origin", "https://app.example")]
