"""The pure parts of the relay's start and errors (issue 31): what answered in place of a
gateway, each agent's set-up line, the provider error shapes."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl

import httpx
import pytest

from toolref.wire.shapes import error_reply, provider_of
from toolref_relay import Relay, RelayConfig
from toolref_relay.agents import AGENTS, set_up_lines, upstream_for
from toolref_relay.cli import _shown_host, main, parser
from toolref_relay.preflight import what_failed, who_answered


@pytest.mark.parametrize(
    ("body", "who"),
    [
        ({"type": "error", "error": {"type": "not_found_error", "message": "x"}}, "Anthropic"),
        ({"error": {"message": "x", "type": "invalid_request_error"}}, "OpenAI"),
        ({"error": {"code": 404, "message": "x", "status": "NOT_FOUND"}}, "Gemini"),
    ],
)
def test_what_answered_is_told_by_its_error_shape(body: object, who: str) -> None:
    assert who in who_answered(httpx.Response(404, json=body))


def test_anything_else_is_named_by_its_server_header() -> None:
    answer = httpx.Response(404, text="<html>", headers={"server": "nginx"})
    assert who_answered(answer) == "another server (nginx)"
    assert who_answered(httpx.Response(404, text="")) == "another server"


def _caused(error: httpx.HTTPError, cause: BaseException) -> httpx.HTTPError:
    error.__cause__ = cause  # as httpx chains what the socket raised
    return error


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (
            _caused(httpx.ConnectError("All connection attempts failed"), ConnectionRefusedError()),
            "connection refused (nothing listens on that port)",
        ),
        (
            _caused(httpx.ConnectError("x"), socket.gaierror(-2, "Name or service not known")),
            "its host name is not known (Name or service not known)",
        ),
        (httpx.ConnectTimeout("timed out"), "nothing came back within 5 s (ConnectTimeout)"),
        (httpx.ReadTimeout("timed out"), "nothing came back within 5 s (ReadTimeout)"),
        (
            httpx.RemoteProtocolError("illegal status line"),  # a port of Redis, say
            "what listens there does not speak HTTP (illegal status line)",
        ),
        (
            _caused(httpx.ConnectError("x"), ssl.SSLError(1, "WRONG_VERSION_NUMBER")),
            "TLS failed",
        ),
        (httpx.ConnectError("something else"), "ConnectError: something else"),
    ],
)
def test_a_gateway_that_gives_no_answer_is_told_what_happened(
    error: httpx.HTTPError, said: str
) -> None:
    assert what_failed(error, 5.0).startswith(said)


def test_each_agent_gets_the_upstream_its_api_is_named_by() -> None:
    upstreams = ("claude-main", "gpt-proxy", "vertex-gemini")
    assert upstream_for("anthropic", upstreams) == "claude-main"
    assert upstream_for("openai", upstreams) == "gpt-proxy"
    assert upstream_for("gemini", upstreams) == "vertex-gemini"
    assert upstream_for("gemini", ("kimi",)) is None
    assert upstream_for("openai", None) is None
    lines = set_up_lines("http://127.0.0.1:8760", upstreams)
    assert len(lines) == 1 + len(AGENTS) + 1  # heading, each agent, any SDK
    assert "ANTHROPIC_BASE_URL=http://127.0.0.1:8760/llm/claude-main claude" in lines[1]
    assert "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8760/llm/vertex-gemini gemini" in "\n".join(
        lines
    )
    assert "NAME:" not in "\n".join(lines[1:-1])  # every agent found its upstream


def test_an_agent_without_an_upstream_gets_name_and_the_names_there_are() -> None:
    lines = set_up_lines("http://127.0.0.1:8760", ("kimi",))
    claude = next(line for line in lines if "Claude Code" in line)
    assert "http://127.0.0.1:8760/llm/NAME claude" in claude
    assert "it has kimi" in claude


@pytest.mark.parametrize(
    ("status", "canonical"),
    [
        (400, "INVALID_ARGUMENT"),
        (429, "RESOURCE_EXHAUSTED"),
        (502, "UNAVAILABLE"),
        (500, "INTERNAL"),
    ],
)
def test_gemini_errors_are_in_googles_shape(status: int, canonical: str) -> None:
    reply = error_reply("gemini", status, "the fix", "toolref_x")
    assert json.loads(reply.body) == {
        "error": {"code": status, "message": "the fix", "status": canonical}
    }


def test_gemini_is_known_by_its_paths_and_key_header() -> None:
    assert provider_of("/v1beta/models/g:generateContent", []) == "gemini"
    assert provider_of("/v1/models/g:streamGenerateContent", []) == "gemini"
    assert provider_of("/anything", [("X-Goog-Api-Key", "k")]) == "gemini"
    assert provider_of("/v1/messages", []) == "anthropic"
    assert provider_of("/v1/chat/completions", []) == "openai"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:99999",  # past 65535: httpx raised at the first request
        "http://127.0.0.1:abc",  # a traceback (httpx.InvalidURL) at the gateway check
        "http://127.0.0.1:0",
        "http://[::1",  # was "toolref relay: Invalid IPv6 URL", naming neither option nor fix
        "http://127.0.0.1:8750/#frag",  # every path was then appended after the fragment
        "http://127.0.0.1:8750#",
        "http://:8750",
    ],
)
@pytest.mark.parametrize("option", ["gateway", "fallback"])
def test_a_gateway_or_fallback_that_is_no_base_url_is_refused_naming_the_fix(
    url: str, option: str
) -> None:
    urls = {"gateway": "http://127.0.0.1:8750", option: url}
    with pytest.raises(ValueError, match=f"--{option} is .*a port of 1-65535"):
        RelayConfig(gateway=urls["gateway"], fallback=urls.get("fallback"))


def test_base_urls_with_ipv6_paths_and_slashes_are_kept() -> None:
    config = RelayConfig("http://[::1]:8750/toolref/", fallback="https://api.example.com/")
    assert config.gateway == "http://[::1]:8750/toolref"
    assert config.fallback == "https://api.example.com"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["relay", "--gateway", "http://g", "--port", "70000"], "'70000' is not a TCP port"),
        (["relay", "--gateway", "http://g", "--port", "-1"], "give 0-65535"),
        (["doctor", "--timeout", "0"], "above 0"),  # every hop then timed out at once
        (["doctor", "--timeout", "-3"], "above 0"),
        (["doctor", "--timeout", "nan"], "above 0"),
    ],
)
def test_a_port_or_timeout_that_cannot_work_is_refused_by_the_parser(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review: `--port 70000` ended in an OverflowError traceback after the port check, and
    `doctor --timeout 0` reported every hop as not answering."""
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(argv)
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


def test_an_ipv6_host_is_taken_with_or_without_brackets() -> None:
    assert parser().parse_args(["relay", "--gateway", "http://g", "--host", "[::1]"]).host == "::1"
    assert parser().parse_args(["relay", "--gateway", "http://g", "--host", "::1"]).host == "::1"


def test_a_relay_bound_to_a_wildcard_tells_agents_a_loopback_address() -> None:
    """Review: bound to 0.0.0.0 it printed http://0.0.0.0:PORT/llm/... for each agent, a
    Host it then refused (403: it serves its own address only)."""
    assert _shown_host("0.0.0.0") == "127.0.0.1"
    assert _shown_host("::") == "[::1]"
    assert _shown_host("::1") == "[::1]"
    assert _shown_host("localhost") == "localhost"


def test_doctor_refuses_a_relay_address_that_is_no_url() -> None:
    """Review: `--relay 127.0.0.1:8760` read the token of port 80 and said no relay answers;
    a port past 65535 ended in a traceback."""
    for relay in ("127.0.0.1:8760", "http://127.0.0.1:99999"):
        with pytest.raises(SystemExit) as exited:
            main(["doctor", "--relay", relay])
        assert isinstance(exited.value.code, str)
        assert exited.value.code.startswith(f"toolref doctor: --relay is {relay!r}")


def test_a_path_outside_llm_is_refused_in_the_agent_s_shape() -> None:
    """Review: an agent whose base URL lacked /llm/NAME got `{"error": "..."}` with a 404,
    no provider's shape: the Anthropic SDK showed no message, Claude Code "There's an issue
    with the selected model"."""

    async def run() -> list[httpx.Response]:
        relay = Relay(RelayConfig("http://127.0.0.1:9"), report=lambda _: None)
        transport = httpx.ASGITransport(app=relay)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8760") as c:
            return [
                await c.post("/v1/messages", json={}, headers={"anthropic-version": "1"}),
                await c.post("/v1/chat/completions", json={}),
                await c.post("/v1beta/models/g:generateContent", json={}),
            ]

    anthropic, openai, gemini = asyncio.run(run())
    assert anthropic.status_code == openai.status_code == gemini.status_code == 400
    assert anthropic.json()["type"] == "error"
    assert anthropic.json()["error"]["type"] == "invalid_request_error"
    assert "/llm/anthropic" in anthropic.json()["error"]["message"]
    assert openai.json()["error"]["code"] == "toolref_not_served"
    assert gemini.json()["error"]["status"] == "INVALID_ARGUMENT"
