"""The pure parts of the relay's start and errors (issue 31): what answered in place of a
gateway, each agent's set-up line, the provider error shapes."""

from __future__ import annotations

import json
import socket
import ssl

import httpx
import pytest

from toolref.wire.shapes import error_reply, provider_of
from toolref_relay.agents import AGENTS, set_up_lines, upstream_for
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
