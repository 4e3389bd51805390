"""The headers of an answer the gateway passes on, against a real `toolref-server serve`
process over a raw socket: the provider's `Date` and `Server`, once each. uvicorn adds its
own `server: uvicorn` and `date` to every answer, so a provider's answer reached the client
with two `Date` lines (RFC 9110 allows one) and two `Server` lines. The service's own
answers keep uvicorn's."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.processes import Service

from .wire import head, post, start_service

pytestmark = [pytest.mark.engine, pytest.mark.slow]

PROVIDER_DATE = "Mon, 30 Nov 2026 00:00:00 GMT"
PROVIDER_SERVER = "a-provider/1.0"


class _Provider(BaseHTTPRequestHandler):
    """An LLM provider: a small JSON answer with its own `Date` and `Server`."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        body = b'{"ok": true}'
        self.send_response_only(200)
        self.send_header("Date", PROVIDER_DATE)
        self.send_header("Server", PROVIDER_SERVER)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    provider = ThreadingHTTPServer(("127.0.0.1", 0), _Provider)
    threading.Thread(target=provider.serve_forever, daemon=True).start()
    upstream = f"up=http://127.0.0.1:{provider.server_address[1]}"
    running = start_service(
        request, tmp_path_factory.mktemp("answer-headers") / "data", TOOLREF_UPSTREAMS=upstream
    )
    yield running
    running.stop()
    provider.shutdown()


def _head_lines(service: Service, raw: bytes) -> list[tuple[str, str]]:
    """The answer's header lines as sent (the request asks to close the connection)."""
    with socket.create_connection(("127.0.0.1", service.port), timeout=10) as sock:
        sock.sendall(raw)
        data = b""
        while b"\r\n\r\n" not in data:
            piece = sock.recv(65536)
            assert piece, data
            data += piece
    lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")[1:]
    return [(name.lower(), value.strip()) for name, _, value in (s.partition(":") for s in lines)]


def test_a_providers_answer_has_its_own_date_and_server_once(service: Service) -> None:
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    lines = _head_lines(service, post("/llm/up/v1/chat/completions", body))
    assert [v for n, v in lines if n == "date"] == [PROVIDER_DATE]
    assert [v for n, v in lines if n == "server"] == [PROVIDER_SERVER]


def test_the_services_own_answers_keep_a_date(service: Service) -> None:
    lines = _head_lines(service, head("/healthz"))
    dates = [v for n, v in lines if n == "date"]
    assert len(dates) == 1
    assert re.fullmatch(r"\w{3}, \d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2} GMT", dates[0])
