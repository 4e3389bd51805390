"""`toolref_server.gateway.upstreams`: `TOOLREF_UPSTREAMS` parsed, and a gateway path's route."""

from __future__ import annotations

import base64
from urllib.parse import unquote, unquote_to_bytes

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolref.wire.errors import BadRequestError, ConfigurationError
from toolref_server.gateway.upstreams import route
from toolref_server.settings.upstreams import Upstream, parse_upstreams

UPSTREAMS = parse_upstreams("up=https://api.example.com/api/,local=http://127.0.0.1:8080")


def test_entries_are_parsed_with_their_credentials_apart() -> None:
    found = parse_upstreams(
        "a=https://api.example.com, b=http://us%40r:p%3Ass@[::1]:8443/v/,c=https://xn--bcher-kva.example:443"
    )
    assert found["a"] == Upstream("a", "https", "api.example.com", 443, "")
    b = found["b"]
    assert (b.host, b.port, b.base_path, b.host_header) == ("::1", 8443, "/v", "[::1]:8443")
    assert b.authorization == "Basic " + base64.b64encode(b"us@r:p:ss").decode()
    assert b.shown == "http://[::1]:8443/v"  # never the credentials
    assert found["c"].host_header == "xn--bcher-kva.example"


@pytest.mark.parametrize(
    "text",
    [
        "a=ftp://host",
        "a=https://host?x=1",
        "a=https://host/#f",
        "a=https://host:99999",
        "a=https://host/a/../b",
        "a=https://host/a b",
        "a=https://u:SECRET@host/%zz",
        "bad name=https://host",
        "a=https://x,a=https://y",
    ],
)
def test_a_wrong_entry_says_what_is_wrong_and_never_shows_credentials(text: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_upstreams(text)
    assert "TOOLREF_UPSTREAMS" in str(caught.value)
    assert "SECRET" not in str(caught.value)


def test_the_raw_path_and_query_are_forwarded_as_the_client_encoded_them() -> None:
    found = route(UPSTREAMS, "/llm/up/v1/a b?c#d", b"/llm/up/v1/a%20b%3Fc%23d?x=%2F")
    assert found is not None
    assert found.path == "/v1/a b?c#d"  # decoded, to match endpoints
    assert found.target(b"x=%2F") == b"/api/v1/a%20b%3Fc%23d?x=%2F"
    assert route(UPSTREAMS, "/llm/nope/v1", b"/llm/nope/v1") is None


@pytest.mark.parametrize(
    ("path", "raw"),
    [
        ("/llm/up/../x", b"/llm/up/../x"),
        ("/llm/up/../x", b"/llm/up/%2e%2e/x"),
        ("/llm/up/v1/../../x", b"/llm/up/v1/..%2f..%2fx"),
        ("/llm/up/..;/x", b"/llm/up/..;/x"),
        ("/llm/up/a\\b", b"/llm/up/a\\b"),
        ("/llm/up/a\x00", b"/llm/up/a%00"),
        ("/llm/up/%zz", b"/llm/up/%zz"),
        ("/llm/up/v1", b"/ll%6d/up/v1"),
        ("/llm/up/./v1", None),
    ],
)
def test_paths_that_could_leave_the_base_are_refused(path: str, raw: bytes | None) -> None:
    with pytest.raises(BadRequestError) as caught:
        route(UPSTREAMS, path, raw)
    assert "gateway path" in str(caught.value)


SEGMENT = st.text(alphabet="a.%2eEfF/\\;:?#\x00 é5c", max_size=12)


@given(st.lists(SEGMENT, max_size=5))
def test_a_routed_path_never_leaves_the_upstreams_base(segments: list[str]) -> None:
    """Whatever the client sends: refused with `BadRequestError`, or a target under the
    base path whose segments, decoded, hold no dot segment and no separator."""
    raw = ("/llm/up/" + "/".join(segments)).encode()
    try:
        found = route(UPSTREAMS, unquote(raw.decode()), raw)
    except BadRequestError:
        return
    assert found is not None
    target = found.target(b"")
    assert target.startswith(b"/api/")
    for piece in target.split(b"/"):
        assert unquote_to_bytes(piece) not in (b".", b"..")
        assert b"\\" not in unquote_to_bytes(piece)


def test_a_target_that_would_start_with_two_slashes_is_refused() -> None:
    """Under a base URL without a path, `//` after the name would make the target a
    network-path reference (`//host/...`): refused; under a base path it stays a path."""
    with pytest.raises(BadRequestError) as caught:
        route(UPSTREAMS, "/llm/local//evil.example/v1", b"/llm/local//evil.example/v1")
    assert "//" in str(caught.value)
    kept = route(UPSTREAMS, "/llm/up//v1", b"/llm/up//v1")
    assert kept is not None
    assert kept.target(b"") == b"/api//v1"
    inside = route(UPSTREAMS, "/llm/local/v1//x", b"/llm/local/v1//x")
    assert inside is not None
    assert inside.target(b"") == b"/v1//x"


@pytest.mark.parametrize("url", ["https://host//evil.example", "http://u:SECRET@host///a/b"])
def test_a_base_path_that_starts_with_two_slashes_is_refused_at_load(url: str) -> None:
    """A base path starting with `//` would start every target sent upstream with `//`
    (read as a host by a URL parser there): refused when the settings load, naming the
    upstream and the fix; trailing slashes, or `//` further in, stay a path."""
    with pytest.raises(ConfigurationError) as caught:
        parse_upstreams(f"up={url}")
    message = str(caught.value)
    assert "TOOLREF_UPSTREAMS" in message
    assert "'up'" in message
    assert "//" in message
    assert "one /" in message
    assert "SECRET" not in message
    assert parse_upstreams("up=https://host/a//b/")["up"].base_path == "/a//b"
    assert parse_upstreams("up=https://host//")["up"].base_path == ""
