"""`toolref relay` as a person runs it: the console script, its help, one turn, what it
prints at exit (SIGTERM), never the key; its control token in a file only the user can
read, never printed (what `nohup` or a supervisor keeps of its output stays free of it)."""

from __future__ import annotations

import http.server
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.support.processes import Process, clean_env

TOOLREF = str(Path(sys.executable).with_name("toolref"))
KEY = "tenant-key-that-must-not-show"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_help_names_every_option() -> None:
    done = subprocess.run([TOOLREF, "relay", "--help"], capture_output=True, text=True, check=True)
    for option in ("--gateway", "--port", "--host", "--key", "--fallback", "--switch"):
        assert option in done.stdout
    for option in ("--max-clients", "--token-file"):
        assert option in done.stdout
    assert "--max-inflated-bytes" in done.stdout


def test_a_bad_option_is_refused_with_the_fix() -> None:
    done = subprocess.run(
        [TOOLREF, "relay", "--gateway", "localhost:8750"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "http(s) base URL" in done.stderr


def test_a_turn_is_told_and_the_session_summed_up_at_exit(tmp_path: Path) -> None:
    """Also: the control token is written to the file the line names, 0600, removed at
    exit (issue 28: there was no token), and the line shows how to use it without it."""
    port, gateway = free_port(), f"http://127.0.0.1:{free_port()}"  # no gateway there
    token_file = tmp_path / "private" / "relay.token"
    args = [TOOLREF, "relay", "--gateway", gateway, "--port", str(port), "--switch", "a,b"]
    args += ["--log-level", "info", "--token-file", str(token_file), "--no-gateway-check"]
    env = clean_env(TOOLREF_KEY=KEY)
    relay = Process(args, f"http://127.0.0.1:{port}", "/toolref/switch", env, ready_status=401)
    try:
        token = token_file.read_text().strip()
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
        printed = re.search(
            r'curl -H "Authorization: Bearer \$\(cat ([^)]+)\)" (\S+)/metrics', relay.output()
        )
        assert printed is not None, relay.output()
        assert printed[1] == str(token_file)
        assert printed[2] == relay.url
        assert token not in relay.output()
        control = {"authorization": f"Bearer {token}"}
        assert httpx.get(f"{relay.url}/metrics", headers=control).status_code == 200
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        answer = httpx.post(
            f"{relay.url}/llm/a/v1/chat/completions",
            json=body,
            headers={"authorization": "Bearer sk-provider-secret"},
        )
        assert answer.status_code == 502
        assert gateway in answer.json()["error"]["message"]
        os.kill(relay.process.pid, signal.SIGUSR1)  # the next upstream
        switched = httpx.get(f"{relay.url}/toolref/switch", headers=control).json()
        assert switched == {"upstreams": ["a", "b"], "selected": "b"}
        relay.process.send_signal(signal.SIGTERM)
        # uvicorn shuts down, then raises the signal again: the exit says what stopped it
        assert relay.process.wait(30) in (0, -signal.SIGTERM)
        output = relay.output()
    finally:
        relay.stop()
    assert "does not answer" in output
    assert "started anyway (--no-gateway-check)" in output
    assert token not in output
    assert "toolref relay: python-httpx -> a turn 1  502  agent sent " in output
    assert "refused by the relay, not counted" in output
    assert "switched from a to b (SIGUSR1)" in output
    assert any(
        line.startswith(
            "toolref relay: python-httpx -> a, every conversation since the relay started: "
            "agent sent 0 B, sent 0 B, nothing sent over 0 answered turns, 1 failed"
        )
        for line in output.splitlines()
    )
    assert "POST /llm/a/v1/chat/completions -> a 502" in output  # --log-level info
    assert KEY not in output
    assert "sk-provider-secret" not in output
    assert not token_file.exists()  # this start's token is gone with it


class _Gateway(http.server.BaseHTTPRequestHandler):
    """A gateway stand-in: any GET answered 200, with the `Server` and `Date` headers a
    provider's answer carries (http.server writes both)."""

    def do_GET(self) -> None:
        body = b'{"data": []}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _relay(tmp_path: Path, gateway: str, *more: str) -> Process:
    port = free_port()
    args = [TOOLREF, "relay", "--gateway", gateway, "--port", str(port), "--no-gateway-check"]
    args += ["--token-file", str(tmp_path / "relay.token"), *more]
    return Process(args, f"http://127.0.0.1:{port}", "/metrics", clean_env(), ready_status=401)


def test_an_answer_reaches_the_agent_with_no_header_of_the_relay_s_own(tmp_path: Path) -> None:
    """Review: uvicorn's own `server` and `date` were added to every answer, so the agent
    read two of each (the provider's and `server: uvicorn`)."""
    gateway = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Gateway)
    threading.Thread(target=gateway.serve_forever, daemon=True).start()
    relay = _relay(tmp_path, f"http://127.0.0.1:{gateway.server_address[1]}")
    try:
        answer = httpx.get(f"{relay.url}/llm/a/v1/models")
        refused = httpx.get(f"{relay.url}/v1/models")  # the relay's own answer
    finally:
        relay.stop()
        gateway.shutdown()
    assert answer.status_code == 200
    assert answer.headers.get_list("server") == [
        _Gateway.server_version + " " + _Gateway.sys_version
    ]
    assert len(answer.headers.get_list("date")) == 1
    assert refused.status_code == 400
    assert "server" not in refused.headers


def test_a_websocket_s_query_is_never_logged(tmp_path: Path) -> None:
    """Review: at --log-level info, uvicorn logged each WebSocket upgrade as
    `"WebSocket /llm/gemini/...?key=<the provider key>" 426`, query and all."""
    relay = _relay(tmp_path, f"http://127.0.0.1:{free_port()}", "--log-level", "info")
    secret = "AIzaSy-provider-key-in-the-query"
    try:
        with socket.create_connection(("127.0.0.1", int(relay.url.rsplit(":", 1)[1]))) as sock:
            sock.sendall(
                f"GET /llm/gemini/ws/live?key={secret}&alt=sse HTTP/1.1\r\n"
                f"Host: {relay.url.removeprefix('http://')}\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n".encode()
            )
            head = sock.recv(65536)
        assert head.startswith(b"HTTP/1.1 426 "), head  # no gateway: HTTP for this session
        relay.process.send_signal(signal.SIGTERM)
        relay.process.wait(30)
        output = relay.output()
    finally:
        relay.stop()
    assert "/llm/gemini/ws/live?key=[redacted]&alt=[redacted]" in output  # the line is there
    assert secret not in output


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A gateway stand-in that answers a POST 200 and keeps each request's path and body."""

    seen: list[tuple[str, bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.seen.append((self.path, body))
        answer = b'{"id": "msg_1"}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


def test_a_post_asking_for_a_websocket_is_relayed_as_the_request_it_is(tmp_path: Path) -> None:
    """Review (relay and start-up edges): a POST with `Upgrade: websocket` and `Connection:
    Upgrade` was handed to uvicorn's WebSocket protocol, whose handshake answered an empty
    400; a WebSocket handshake is a GET, so the relay now forwards it as any POST. A GET
    asking for one still reaches the relay's WebSocket mode (426: no gateway channel)."""
    gateway = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=gateway.serve_forever, daemon=True).start()
    _Recorder.seen = []
    url = f"http://127.0.0.1:{gateway.server_address[1]}"
    relay = _relay(tmp_path, url, "--no-channel", "--no-edits")
    port = int(relay.url.rsplit(":", 1)[1])
    body = b'{"model": "m", "max_tokens": 8, "messages": []}'
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(
                b"POST /llm/a/v1/messages HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (port, len(body), body)
            )
            posted = _answer(sock)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(
                b"GET /llm/a/v1/realtime HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n" % port
            )
            upgraded = sock.recv(65536)
    finally:
        relay.stop()
        gateway.shutdown()
    assert posted.startswith(b"HTTP/1.1 200 "), posted
    assert posted.endswith(b'{"id": "msg_1"}'), posted
    assert _Recorder.seen == [("/llm/a/v1/messages", body)]
    assert upgraded.startswith(b"HTTP/1.1 426 "), upgraded


def _answer(sock: socket.socket) -> bytes:
    """An answer read whole: its head, then the body its Content-Length declares."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    found = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    length = int(found[1]) if found else 0
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return head + b"\r\n\r\n" + rest


class _Cutting(http.server.BaseHTTPRequestHandler):
    """A gateway stand-in whose streamed answer to a POST breaks off: a chunk, then the
    connection closed with no last chunk."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.wfile.write(b"5\r\nhello\r\n")
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


def test_an_answer_the_upstream_cuts_is_cut_for_the_agent_and_said_in_one_line(
    tmp_path: Path,
) -> None:
    """Review (stop 58): an answer that broke off mid-stream (a gateway stopped, an upstream
    gone) is cut for the agent as it must be (no last chunk: a cut never looks whole), and
    said in one warning; before, uvicorn printed it as "Exception in ASGI application" with
    two tracebacks in the agent's terminal, once per cut."""
    gateway = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Cutting)
    threading.Thread(target=gateway.serve_forever, daemon=True).start()
    relay = _relay(tmp_path, f"http://127.0.0.1:{gateway.server_address[1]}", "--no-channel")
    try:
        with (
            pytest.raises(httpx.RemoteProtocolError),
            httpx.stream("POST", f"{relay.url}/llm/a/v1/messages", content=b"{}") as answer,
        ):
            answer.read()
        relay.process.send_signal(signal.SIGTERM)
        relay.process.wait(30)
        output = relay.output()
    finally:
        relay.stop()
        gateway.shutdown()
    assert "Traceback" not in output, output
    cut = [line for line in output.splitlines() if "an answer to the agent was cut" in line]
    assert len(cut) == 1, output
    assert "broke off after 5 bytes" in cut[0]
