"""The pure parts of the relay's start and errors (issue 31): what answered in place of a
gateway, each agent's set-up line, the provider error shapes."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from toolref.wire.shapes import error_reply, provider_of
from toolref_relay import Relay, RelayConfig
from toolref_relay.agents import AGENTS, set_up_lines, upstream_for
from toolref_relay.cli import _shown_host, main, parser
from toolref_relay.preflight import what_failed, who_answered


@pytest.fixture(autouse=True)
def logging_as_it_was() -> Iterator[None]:
    """A relay start run here configures logging as the process it would be (uvicorn's
    loggers, the root's handlers); put back after each test, so a later test in this worker
    finds logging as it was."""
    manager = logging.Logger.manager
    loggers = [logging.getLogger(), *(logging.getLogger(n) for n in list(manager.loggerDict))]
    saved = [(x, x.handlers[:], x.level, x.propagate, x.disabled) for x in loggers]
    yield
    for logger, handlers, level, propagate, disabled in saved:
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate, logger.disabled = propagate, disabled


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


def test_doctor_refuses_a_relay_address_with_a_path_before_sending_the_token(
    tmp_path: Path,
) -> None:
    """Review: `--relay http://127.0.0.1:8760/llm/anthropic` (the agent's base URL) asked
    `/llm/anthropic/toolref/check` with the control token as `Authorization: Bearer`: the
    relay took it for an LLM path and sent the token on, to the gateway and the provider."""
    seen: list[tuple[str, str | None]] = []

    class Recorder(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append((self.path, self.headers.get("authorization")))
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    token_file = tmp_path / "relay.token"
    token_file.write_text("t" * 43 + "\n")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    relay = f"http://127.0.0.1:{server.server_address[1]}/llm/anthropic"
    try:
        with pytest.raises(SystemExit) as exited:
            main(["doctor", "--relay", relay, "--token-file", str(token_file)])
    finally:
        server.shutdown()
        server.server_close()
    assert seen == []
    assert isinstance(exited.value.code, str)
    assert f"--relay is {relay!r}" in exited.value.code
    assert f"give the relay's address alone: http://127.0.0.1:{server.server_address[1]}" in (
        exited.value.code
    )


def test_a_start_that_fails_after_writing_the_token_removes_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: the app deletes the token file at its shutdown, which a start that fails
    once the file is written never reaches (uvicorn failing to load, an interrupt during
    start-up): the file was left behind."""
    import uvicorn

    def fails(self: object, sockets: object = None) -> None:
        raise RuntimeError("uvicorn could not start")

    monkeypatch.setattr(uvicorn.Server, "run", fails)
    token_file = tmp_path / "relay.token"
    gateway = "http://127.0.0.1:9"  # nothing there: started anyway
    argv = ["relay", "--gateway", gateway, "--no-gateway-check", "--port", "0"]
    with pytest.raises(RuntimeError, match="could not start"):
        main([*argv, "--token-file", str(token_file)])
    assert not token_file.exists()


def test_event_loop_uvloop_without_uvloop_stops_the_start_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: `--event-loop uvloop` where uvloop is not installed (Windows, or an
    environment without the relay extra) started, wrote the token file, then ended in
    uvicorn's ModuleNotFoundError traceback."""
    import uvicorn

    def served(self: object, sockets: object = None) -> None:
        raise AssertionError("served")

    monkeypatch.setattr(uvicorn.Server, "run", served)
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop: ImportError
    token_file = tmp_path / "relay.token"
    argv = ["relay", "--gateway", "http://127.0.0.1:9", "--no-gateway-check", "--port", "0"]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--event-loop", "uvloop", "--token-file", str(token_file)])
    assert isinstance(exited.value.code, str)
    assert "--event-loop uvloop, but uvloop is not installed" in exited.value.code
    assert "--event-loop auto" in exited.value.code
    assert not token_file.exists()


@pytest.mark.parametrize("host", ["127.0.0.1:8760", "localhost:8760", "[::1]:8760"])
def test_a_host_with_a_port_is_refused_by_the_parser(
    host: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review: `--host 127.0.0.1:8760` was taken, then failed to bind saying `cannot
    listen on 127.0.0.1:8760:8760 (Name or service not known)`, naming no fix."""
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(["relay", "--gateway", "http://g", "--host", host])
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert f"{host!r} has a port" in said
    assert "--port 8760" in said
    assert parser().parse_args(["relay", "--gateway", "http://g", "--host", "fe80::1"]).host == (
        "fe80::1"
    )


def _gateway_answering(status: int, body: bytes, content_type: str) -> ThreadingHTTPServer:
    """A server at the relay's `--gateway` answering every GET with `body`."""

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


_CAPABILITIES: dict[str, object] = {
    "protocol": {"low": 1, "high": 2},
    "ref_scheme": {
        "prefix": "tr_",
        "length": 36,
        "digest": "sha256",
        "digest_bytes": 20,
        "encoding": "base32",
        "canonicalization": "jcs",
    },
    "encodings": ["application/json"],
    "compressors": [],
    "limits": {
        "max_body_bytes": 1,
        "max_decompressed_bytes": 1,
        "max_depth": 1,
        "max_batch": 1,
        "max_messages": 1,
    },
    "ttl_seconds": 1,
    "formats": [],
    "summarizers": [],
}
_FORGED = "toolref relay: gateway http://127.0.0.1:1 is toolref 9.9, key accepted"


def test_what_a_gateway_names_reaches_the_terminal_escaped_and_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review: the relay printed the upstream names a gateway's capabilities list as they
    came: an escape sequence (`ESC ]0;...BEL` retitles the terminal, `ESC [2J` clears it)
    reached the operator's terminal, a CR LF forged a line of the relay's own, and a name
    of 100,000 characters was printed whole, three times."""
    import uvicorn

    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)
    names = ["anthropic", "\x1b]0;owned\x07\x1b[2Jx", f"a\r\n{_FORGED}\u009b31m", "n" * 100_000]
    body = json.dumps({**_CAPABILITIES, "upstreams": names}).encode()
    server = _gateway_answering(200, body, "application/json")
    gateway = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        main(["relay", "--gateway", gateway, "--port", "0", "--token-file", str(tmp_path / "t")])
    finally:
        server.shutdown()
        server.server_close()
    said = capsys.readouterr().err
    for control in ("\x1b", "\x07", "\r", "\u009b"):
        assert control not in said
    assert not any(line.startswith(_FORGED) for line in said.splitlines())
    assert "\\x1b]0;owned\\x07\\x1b[2Jx" in said  # shown, as its escapes
    assert "n" * 100_000 not in said
    assert max(len(line) for line in said.splitlines()) < 5_000


def test_a_content_type_a_gateway_sends_is_printed_escaped(tmp_path: Path) -> None:
    """Review: a `--gateway` that is no toolref gateway stopped the start with a message
    quoting its `Content-Type` as it came: an escape sequence in it reached the terminal."""
    server = _gateway_answering(404, b"{}", "text/html\x1b[2J\x1b]0;owned\x07")
    gateway = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(SystemExit) as exited:
            main(["relay", "--gateway", gateway, "--port", "0", "--token-file", str(tmp_path)])
    finally:
        server.shutdown()
        server.server_close()
    said = exited.value.code
    assert isinstance(said, str)
    assert "is not a toolref gateway" in said
    assert "\x1b" not in said
    assert "\x07" not in said
    assert "text/html\\x1b[2J" in said


@pytest.mark.parametrize("given", ["0", "-1", "nan", "inf"])
def test_a_send_timeout_that_cannot_work_is_one_line_at_start(given: str) -> None:
    """Review (relay and start-up edges): the relay's WebSocket send timeout was a constant
    30 s; `--send-timeout` sets it, and one that is not a positive, finite number of
    seconds stops the start in one line naming the option, the value and the fix."""
    from toolref_relay.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["relay", "--gateway", "http://127.0.0.1:9", "--send-timeout", given])
    message = str(stopped.value.code)
    assert "\n" not in message
    assert message.startswith(f"toolref relay: --send-timeout is {float(given)}")
    assert "give a number of seconds above 0, such as 30 (the default)" in message


def test_the_send_timeout_reaches_both_of_the_relays_websocket_limits() -> None:
    """`--send-timeout` is the served protocol's (an agent that reads nothing, pings
    included) and the bridge's (a side that takes nothing of a message); 30 s by default."""
    from toolref.asgi.paced import PacedWebSocket, with_send_timeout
    from toolref_relay.cli import config_of

    args = ["relay", "--gateway", "http://g"]
    assert config_of(parser().parse_args(args)).send_timeout == 30.0
    config = config_of(parser().parse_args([*args, "--send-timeout", "2.5"]))
    assert config.send_timeout == 2.5
    served = with_send_timeout(config.send_timeout)
    assert issubclass(served, PacedWebSocket)
    assert served.send_timeout == 2.5
