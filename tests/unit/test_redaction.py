"""`toolref.wire.redaction`: a URL's credentials masked wherever a URL is shown (the service's
logs and messages, the relay's lines and error replies), the rest of it kept."""

from __future__ import annotations

import io
import logging
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolref.wire import redaction
from toolref.wire.errors import ConfigurationError
from toolref.wire.redaction import MASK, LogRedactor, targets_in, url, urls_in
from toolref_relay.config import RelayConfig
from toolref_server.logs import redact
from toolref_server.settings.upstreams import parse_upstreams


@pytest.mark.parametrize(
    ("given_url", "shown"),
    [
        # userinfo, masked whole (the user may be the key: `sk_live_...:@`)
        ("redis://:pw1@cache:6379/0", "redis://[redacted]@cache:6379/0"),
        ("redis://default:pw1@cache", "redis://[redacted]@cache"),
        ("rediss://u:pw1@cache.example:6380", "rediss://[redacted]@cache.example:6380"),
        ("https://sk_live_pw1:@api.example.com/v1", "https://[redacted]@api.example.com/v1"),
        ("https://pw1@api.example.com", "https://[redacted]@api.example.com"),
        # a password the URL did not escape is masked whole, never cut at its `/`, `?`, `#`
        ("redis://:p/w1@cache", "redis://[redacted]@cache"),
        ("redis://:p?w1@cache", "redis://[redacted]@cache"),
        ("redis://:p#w1@cache", "redis://[redacted]@cache"),
        # query values (names kept, to say what was there) and fragments
        (
            "https://generativelanguage.googleapis.com/v1beta?key=pw1&alt=sse",
            "https://generativelanguage.googleapis.com/v1beta?key=[redacted]&alt=[redacted]",
        ),
        ("unix:///run/valkey.sock?password=pw1", "unix:///run/valkey.sock?password=[redacted]"),
        ("https://h/x?pw1", "https://h/x?[redacted]"),
        ("https://h/x#pw1", "https://h/x#[redacted]"),
        # nothing to mask: as it was
        ("https://api.anthropic.com", "https://api.anthropic.com"),
        ("unix:///tmp/toolref/valkey.sock", "unix:///tmp/toolref/valkey.sock"),
        (
            "http://[::1]:8750/llm/anthropic/v1/messages",
            "http://[::1]:8750/llm/anthropic/v1/messages",
        ),
        ("https://h/x?", "https://h/x?"),
        ("no URL at all: pw1", "no URL at all: pw1"),
    ],
)
def test_a_url_is_shown_without_its_credentials(given_url: str, shown: str) -> None:
    assert url(given_url) == shown


@given(
    password=st.text(st.characters(codec="ascii", exclude_characters="\r\n"), min_size=1),
    path=st.sampled_from(["", "/", "/0", "/v1/models"]),
)
def test_no_password_survives_whatever_it_holds(password: str, path: str) -> None:
    """Whatever characters a password holds (escaped or not), none of it is shown, and the
    host still is."""
    marked = f"SECRET{password}SECRET"
    shown = url(f"redis://user:{marked}@cache.internal:6379{path}")
    assert "SECRET" not in shown
    assert shown.endswith(f"@cache.internal:6379{path}")


def test_every_url_in_a_text_is_masked_and_the_text_kept() -> None:
    text = (
        "store: redis://:pw1@cache:6379 failed; upstream 'https://u:pw2@api.example.com/v1' "
        "and (https://g.example/v1?key=pw3). Retry."
    )
    assert urls_in(text) == (
        "store: redis://[redacted]@cache:6379 failed; upstream "
        "'https://[redacted]@api.example.com/v1' and (https://g.example/v1?key=[redacted] "
        "Retry."
    )  # what ends a URL in a sentence may end the secret too: masked with it
    assert urls_in("nothing here: pw1") == "nothing here: pw1"


def test_the_service_log_redaction_masks_urls_too() -> None:
    masked = redact("connect redis://:pw1@cache:6379 with Authorization: Bearer pw2")
    assert "pw1" not in masked
    assert "pw2" not in masked
    assert "cache:6379" in masked


def test_a_handler_with_the_redactor_writes_no_url_credentials() -> None:
    """What the relay installs on its log handler: httpx logs each request's URL, query
    included, at INFO (`HTTP Request: POST https://...?key=... "HTTP/1.1 200 OK"`)."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(LogRedactor())
    logger = logging.getLogger("test_redaction.httpx")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning(
            'HTTP Request: %s %s "%s"', "POST", "https://g.example/v1?key=pw1", "HTTP/1.1 200"
        )
        logger.warning("plain %s", "line")
    finally:
        logger.removeHandler(handler)
    written = out.getvalue()
    assert "pw1" not in written
    assert f"https://g.example/v1?key={MASK}" in written
    assert "plain line" in written


@pytest.mark.parametrize(
    "entry",
    [
        "g=https://generativelanguage.googleapis.com/v1beta?key=pw1",  # refused: a query
        "g=https://u:pw1@host/%zz",  # refused: a broken escape
        "g https://u:pw1@host",  # refused: no `=`
    ],
)
def test_an_upstream_refused_at_start_is_named_without_its_credentials(entry: str) -> None:
    with pytest.raises(ConfigurationError, match="TOOLREF_UPSTREAMS") as caught:
        parse_upstreams(entry)
    assert "pw1" not in str(caught.value)
    assert MASK in str(caught.value)


def test_an_upstream_is_logged_with_its_credentials_masked() -> None:
    found = parse_upstreams("up=https://user:pw1@api.example.com/v1,open=https://api.example.com")
    assert found["up"].logged == "https://[redacted]@api.example.com/v1"
    assert found["open"].logged == "https://api.example.com"
    assert "pw1" not in repr(found["up"])  # nor in its repr (the Basic header is kept apart)


@pytest.mark.parametrize("option", ["gateway", "fallback"])
def test_a_relay_url_refused_is_named_without_its_credentials(option: str) -> None:
    given_url = "http://user:pw1@127.0.0.1:8750/?token=pw2"
    urls = {"gateway": "http://127.0.0.1:8750", option: given_url}
    with pytest.raises(ValueError, match=f"--{option}") as caught:
        RelayConfig(gateway=urls["gateway"], fallback=urls.get("fallback"))
    assert "pw1" not in str(caught.value)
    assert "pw2" not in str(caught.value)


# Found in review (linear and bounded): a run of scheme characters with no `://` after it
# (`a+a+a+...`), or a path holding `(`s with no query (`(/(/(/...`), was scanned again from
# each start within it (after a `+`, `.`, `-` or `(`) to fail alike: quadratic, 40 KB of text
# took 2.7 s of a log record. Each is taken by one match now, and left as it is.
@pytest.mark.parametrize(
    ("masking", "text", "pattern", "run"),
    [
        (urls_in, "a+" * 2000 + " ://", redaction._URL, (0, 4000)),
        (urls_in, "x.y-z" * 800 + ":// no", redaction._URL, (0, 4000)),
        (targets_in, "(/" * 2000 + " ?", redaction._TARGET, (1, 4000)),
        (targets_in, "/a(/b" * 800 + "#?", redaction._TARGET, (0, 4000)),
    ],
)
def test_a_run_that_is_no_url_is_read_once(
    masking: Any, text: str, pattern: Any, run: tuple[int, int]
) -> None:
    assert masking(text) == text
    # taken by one match from its first start: no start within it is tried again
    assert [found.span() for found in pattern.finditer(text)] == [run]


_OLD_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
_OLD_TARGET = re.compile(r"(?<![^\s'\"(])(/[^\s'\"<>`?#]*)\?([^\s'\"<>`#]*)")


def _old_target(found: re.Match[str]) -> str:
    query = found.group(2)
    return found.group(1) + "?" + "&".join(redaction._masked(pair) for pair in query.split("&"))


@given(st.text(alphabet="a1+.-:/?#&=@( '\"<`\n", max_size=24))
def test_urls_and_targets_are_masked_as_by_the_plain_patterns(text: str) -> None:
    """The linear patterns mask what the plain (quadratic) ones did, no more, no less."""
    assert urls_in(text) == _OLD_URL.sub(lambda found: url(found.group()), text)
    assert targets_in(text) == _OLD_TARGET.sub(_old_target, text)


def test_a_handler_with_the_redactor_writes_no_escape_sequence() -> None:
    """The relay's handler writes plain `name: message` lines on its terminal; httpx logs
    the reason phrase a server sent (`HTTP/1.1 200 <phrase>`), which may hold ESC: the
    sequence ran on the operator's terminal. Shown as its escape now, and bounded."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(LogRedactor())
    logger = logging.getLogger("test_redaction.phrase")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning('HTTP Request: %s %s "%s"', "POST", "http://g/x", "HTTP/1.1 200 \x1b[2J")
        logger.warning("%s", "n" * 100_000)
    finally:
        logger.removeHandler(handler)
    written = out.getvalue()
    assert "\x1b" not in written
    assert "HTTP/1.1 200 \\x1b[2J" in written
    assert len(written) < 10_000
