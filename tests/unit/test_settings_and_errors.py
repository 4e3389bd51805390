"""Settings parsing, protocol negotiation and the exception tree."""

from __future__ import annotations

import hashlib

import pydantic
import pytest

import toolref
from toolref.wire import errors
from toolref.wire.errors import ConfigurationError, MissingRefsError, ToolrefError, error_class_for
from toolref.wire.protocol import negotiate
from toolref_server.settings import Settings, parse_api_keys
from toolref_server.settings.environment import unknown_variables

H1 = hashlib.sha256(b"k1").hexdigest()
H2 = hashlib.sha256(b"k2").hexdigest()
MiB = 2**20


def test_api_keys_parse_to_hash_tenant_pairs() -> None:
    assert parse_api_keys(f" acme={H1} , globex={H2.upper()},") == {
        H1: "acme",
        H2: "globex",
    }
    assert parse_api_keys("") == {}
    assert parse_api_keys(f"acme={H1},acme={H2}") == {H1: "acme", H2: "acme"}


@pytest.mark.parametrize(
    "text",
    ["acme", f"acme:{H1}", "acme=abc", f"bad tenant={H1}", f"={H1}", f"a={H1},b={H1}"],
)
def test_bad_api_keys_say_what_is_wrong(text: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_api_keys(text)
    assert "TOOLREF_API_KEYS" in info.value.detail


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLREF_TTL_SECONDS", "60")
    monkeypatch.setenv("TOOLREF_API_KEYS", f"acme={H1}")
    monkeypatch.setenv("TOOLREF_REDIS_URL", "redis://example:6379/0")
    settings = Settings()
    assert settings.ttl_seconds == 60
    assert settings.key_hashes == {H1: "acme"}
    assert settings.redis_url == "redis://example:6379/0"


def test_settings_refuse_bad_keys_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLREF_API_KEYS", "nonsense")
    with pytest.raises(ConfigurationError):
        Settings()


def test_unknown_variables_are_named_with_the_nearest_setting() -> None:
    """Issue 31: a misspelt `TOOLREF_*` variable was read by nobody, without a word."""
    environ = {
        "TOOLREF_UPSTREAM": "a=http://x",
        "toolref_max_body_byte": "1",  # read in any case, as the settings are
        "TOOLREF_NONSENSE": "1",
        "TOOLREF_API_KEY": "acme=0",  # the API keys, one letter short
        "TOOLREF_UPSTREAMS": "a=http://x",
        "TOOLREF_KEY": "k",  # the relay's
        "TOOLREF_TEST_REDIS_URL": "redis://x",  # the test suite's
        "PATH": "/bin",
    }
    assert unknown_variables(environ, Settings.variables()) == [
        "unknown variable TOOLREF_API_KEY; did you mean TOOLREF_API_KEYS?",
        "unknown variable TOOLREF_NONSENSE",
        "unknown variable TOOLREF_UPSTREAM; did you mean TOOLREF_UPSTREAMS?",
        "unknown variable toolref_max_body_byte; did you mean TOOLREF_MAX_BODY_BYTES?",
    ]


def test_settings_from_the_environment_refuse_an_unknown_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TOOLREF_GATEWAY_TIMEOUT", "5")
    with pytest.raises(ConfigurationError) as info:
        Settings.from_environment()
    assert "did you mean TOOLREF_GATEWAY_READ_TIMEOUT?" in info.value.detail
    assert "docs/operations.md" in info.value.detail
    monkeypatch.delenv("TOOLREF_GATEWAY_TIMEOUT")
    monkeypatch.setenv("TOOLREF_GATEWAY_READ_TIMEOUT", "5")
    assert Settings.from_environment().gateway_read_timeout == 5


def test_log_level_is_checked_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLREF_LOG_LEVEL", "WARNING")
    assert Settings().log_level == "warning"
    monkeypatch.setenv("TOOLREF_LOG_LEVEL", "verbose")
    with pytest.raises(pydantic.ValidationError, match="critical, error, warning, info"):
        Settings()


def test_the_event_loop_is_checked_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().event_loop == "auto"
    monkeypatch.setenv("TOOLREF_EVENT_LOOP", "Auto")
    assert Settings().event_loop == "auto"
    monkeypatch.setenv("TOOLREF_EVENT_LOOP", "trio")
    with pytest.raises(pydantic.ValidationError, match="auto, uvloop, asyncio"):
        Settings()


@pytest.mark.parametrize(("header", "version"), [(None, 1), ("1", 1), (" 2 ", 2), ("7", 2)])
def test_negotiate(header: str | None, version: int) -> None:
    assert negotiate(header) == version


@pytest.mark.parametrize("header", ["", "0", "-1", "2.0", "two", "1,2"])
def test_negotiate_refuses_non_versions(header: str) -> None:
    with pytest.raises(errors.InvalidProtocolError):
        negotiate(header)


def test_every_error_maps_back_from_its_problem_type() -> None:
    seen = set()
    for name in dir(errors):
        cls = getattr(errors, name)
        if isinstance(cls, type) and issubclass(cls, ToolrefError):
            assert error_class_for(cls.problem_type()) is cls
            assert 400 <= cls.status < 600
            seen.add(cls.slug)
    assert len(seen) == len([n for n in dir(errors) if n.endswith("Error")])  # slugs unique
    assert error_class_for("urn:toolref:problem:nonexistent") is ToolrefError


def test_problem_object_and_headers() -> None:
    missing = MissingRefsError("resend these", ["tr_" + "a" * 26])
    assert missing.to_problem() == {
        "type": "urn:toolref:problem:missing-refs",
        "title": "Unknown refs",
        "status": 409,
        "detail": "resend these",
        "missingRefs": ["tr_" + "a" * 26],
    }
    unavailable = errors.StoreUnavailableError("down", retry_after=4)
    assert unavailable.http_headers() == {"Retry-After": "4"}
    assert isinstance(unavailable, errors.ServiceUnavailableError)
    assert errors.AuthenticationError("x", invalid_token=True).http_headers() == {
        "WWW-Authenticate": 'Bearer realm="toolref", error="invalid_token"'
    }
    # A key sent alone in its own header (the gateway's): the challenge names the header.
    assert errors.AuthenticationError("x", key_header="Toolref-Key").http_headers() == {
        "WWW-Authenticate": 'Toolref-Key realm="toolref", error_description="send a toolref '
        'API key in the Toolref-Key header (toolref-server keygen makes one)"'
    }
    assert errors.MethodNotAllowedError("x", allow=["GET", "HEAD"]).http_headers() == {
        "Allow": "GET, HEAD"
    }
    rebuilt = errors.error_from_problem(
        {"type": "urn:toolref:problem:method-not-allowed", "detail": "x"},
        405,
        {"allow": "GET, HEAD"},
    )
    assert isinstance(rebuilt, errors.MethodNotAllowedError)
    assert rebuilt.allow == ("GET", "HEAD")


def test_public_api_is_exported_sorted() -> None:
    assert toolref.__all__ == sorted(toolref.__all__, key=_ruff_sort_key)
    for name in toolref.__all__:
        assert hasattr(toolref, name), name
    exported_errors = {n for n in toolref.__all__ if n.endswith("Error")}
    defined_errors = {
        n
        for n in dir(errors)
        if n.endswith("Error") and issubclass(getattr(errors, n), ToolrefError)
    }
    assert exported_errors == defined_errors


def _ruff_sort_key(name: str) -> tuple[int, str]:
    """isort-style order (ruff RUF022): CONSTANTS, then Classes, then the rest."""
    if name.isupper():
        return (0, name)
    if name[0].isupper():
        return (1, name)
    return (2, name)


def test_format_names_agree_between_models_and_formats() -> None:
    from typing import get_args

    from toolref import formats
    from toolref.wire.models import FormatName

    assert get_args(FormatName) == formats.NAMES


def test_a_refused_value_is_told_with_the_value_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review: `toolref-server serve` printed pydantic's words alone (`TOOLREF_MAX_BODY_BYTES:
    Input should be greater than or equal to 1024`: no value, no fix), and a check across
    settings under a variable of no name (`TOOLREF_: Value error, ...`)."""
    from toolref_server import cli

    monkeypatch.setenv("TOOLREF_MAX_BODY_BYTES", "-1")
    monkeypatch.setenv("TOOLREF_LLM_API_KEY", "sk-secret-never-shown")
    monkeypatch.setenv("TOOLREF_METRICS_KEY", "sk-secret-never-shown-either")
    assert cli.main(["serve"]) == 2
    said = capsys.readouterr().err.splitlines()
    assert (
        "toolref-server: TOOLREF_MAX_BODY_BYTES: Input should be greater than or equal to "
        f"1024; given '-1': fix it, or unset TOOLREF_MAX_BODY_BYTES for its default ({32 * MiB})"
    ) in said
    [metrics] = [line for line in said if "TOOLREF_METRICS_KEY:" in line]
    assert "not the 64 hex digits" in metrics
    assert "given (a secret: not shown)" in metrics
    assert "sk-secret" not in "\n".join(said)
    monkeypatch.delenv("TOOLREF_MAX_BODY_BYTES")
    monkeypatch.delenv("TOOLREF_METRICS_KEY")
    monkeypatch.setenv("TOOLREF_MAX_INFLATED_IN_FLIGHT", "2000")
    assert cli.main(["serve"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("toolref-server: TOOLREF_MAX_INFLATED_IN_FLIGHT (2000) is below")
    assert "TOOLREF_:" not in line
    assert "Value error" not in line


@pytest.mark.parametrize(
    "variable",
    ["TOOLREF_GATEWAY_READ_TIMEOUT", "TOOLREF_CONTEXT_REWRITE_WEIGHT", "TOOLREF_LLM_TIMEOUT"],
)
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "Infinity"])
def test_no_setting_takes_nan_or_infinity(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    """Review: `inf` passed every `gt=0` (a timeout of `inf` overflows a socket's)."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(pydantic.ValidationError, match="finite number"):
        Settings.from_environment()


@pytest.mark.parametrize("url", ["api.openai.com/v1", "localhost:8080", "ftp://x/v1", "http:///v1"])
def test_an_llm_base_url_without_scheme_or_host_is_refused(url: str) -> None:
    """Review: taken as it was, every summary then fell back to extractive."""
    with pytest.raises(pydantic.ValidationError, match=r"https://api\.openai\.com/v1"):
        Settings(llm_base_url=url)
    assert Settings(llm_base_url="http://127.0.0.1:9/v1").llm_base_url == "http://127.0.0.1:9/v1"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("localhost:6379", "'localhost:6379'"),
        (":pw1@cache:6379/0", "'[redacted]@cache:6379/0'"),
        ("http://cache:6379", "'http://cache:6379'"),
    ],
)
def test_a_store_url_the_client_cannot_open_is_refused_before_anything_starts(
    url: str, shown: str
) -> None:
    """Review: `TOOLREF_REDIS_URL=localhost:6379` was taken; the service then died on a
    traceback (`Redis URL must specify one of the following schemes`) naming no setting."""
    with pytest.raises(ConfigurationError) as refused:
        Settings(redis_url=url).check_store_url()
    assert refused.value.detail.startswith(f"TOOLREF_REDIS_URL is {shown}, not a Redis URL")
    assert "redis://localhost:6379/0" in refused.value.detail
    for fine in (
        None,
        "redis://:pw@cache:6379/0",
        "unix:///run/valkey.sock",
        "rediss+cluster://c:1",
    ):
        Settings(redis_url=fine).check_store_url()


@pytest.mark.parametrize(
    ("text", "secret", "named"),
    [
        (f"globex={H2},acme=supersecretkeyvalue123", "supersecret", ("acme", "entry 2")),
        ("acme=short", "short", ("acme", "entry 1")),
        (f"acme={H1},trk_rawkeygivenalone0123", "trk_rawkey", ("entry 2",)),
        (f"acme={H1}, sk live key=abc", "sk live", ("entry 2",)),
        ("acme=" + "f" * 63, "f" * 11, ("acme", "entry 1")),
    ],
)
def test_a_bad_api_keys_entry_never_shows_its_value(
    text: str, secret: str, named: tuple[str, ...]
) -> None:
    """A raw key given for its hash was quoted back (its first 11 characters, or all of a
    short one): the refusal names the entry and the fix, never the value."""
    with pytest.raises(ConfigurationError) as info:
        parse_api_keys(text)
    detail = info.value.detail
    assert secret not in detail
    assert secret[:4] not in detail.replace("TOOLREF_API_KEYS", "")
    for part in named:
        assert part in detail
    assert "toolref-server hash-key" in detail


def test_a_bad_tenant_name_beside_a_hash_is_named_and_the_hash_is_not() -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_api_keys(f"acme={H1},bad tenant={H2}")
    detail = info.value.detail
    assert "entry 2 of 2 names the tenant 'bad tenant'" in detail
    assert "A-Z a-z 0-9 _ . -" in detail
    assert H2 not in detail
    assert H2[:8] not in detail


@pytest.mark.parametrize("name", [".", ".."])
def test_an_upstream_named_by_a_dot_segment_is_refused(name: str) -> None:
    """An upstream becomes the path /llm/{name}/...: named `..`, its requests would name
    another path of the service (the registry's API, with the tenant's key)."""
    from toolref_server.settings.upstreams import parse_upstreams

    with pytest.raises(ConfigurationError, match=r"not \. or \.\."):
        parse_upstreams(f"{name}=https://api.example.com")
    assert set(parse_upstreams("a.b=https://api.example.com,..x=https://b.example.com")) == {
        "a.b",
        "..x",
    }


@pytest.mark.parametrize("lock", ["8.5", "9"])
def test_the_summary_lock_must_outlast_the_whole_computation(
    monkeypatch: pytest.MonkeyPatch, lock: str
) -> None:
    """Found in review: the lock only had to outlast TOOLREF_LLM_TIMEOUT, but a computation
    is cut off at the timeout + 0.5 s, counted from after a quota round trip, and its value
    kept a round trip later: a lock of 8.5 s or 9 s with the 8 s timeout expired while its
    holder could still be waiting for the model, and a second request called it too. The
    lock must exceed the timeout + 1 s; the error says the values and the fix."""
    monkeypatch.setenv("TOOLREF_LLM_TIMEOUT", "8")
    monkeypatch.setenv("TOOLREF_SUMMARY_LOCK_SECONDS", lock)
    with pytest.raises(pydantic.ValidationError) as info:
        Settings()
    text = str(info.value)
    assert f"TOOLREF_SUMMARY_LOCK_SECONDS ({float(lock)})" in text
    assert "TOOLREF_LLM_TIMEOUT (8.0) + 1.0 s" in text
    assert "raise TOOLREF_SUMMARY_LOCK_SECONDS above 9.0" in text
    monkeypatch.setenv("TOOLREF_SUMMARY_LOCK_SECONDS", "9.5")
    settings = Settings()
    assert settings.summary_lock_seconds > settings.summary_compute_seconds + 0.5
    assert settings.summary_wait_seconds == 9.0
