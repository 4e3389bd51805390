"""`toolref_server.http.hosts.KeylessHosts` alone (no engine, no app behind it): without
API keys, only a loopback `Host` reaches the app, but for the probes; with keys, every
request does. tests/adversarial/test_server_hosts.py holds the whole service to it."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from toolref_server.http.hosts import KeylessHosts, own_address
from toolref_server.settings import Settings

KEYLESS = Settings(redis_url="unused")
KEYED = Settings(redis_url="unused", api_keys=f"a={hashlib.sha256(b'k').hexdigest()}")
LOOPBACK = ("localhost", "LOCALHOST:1", "127.0.0.1:8750", "127.9.9.9", "[::1]:8750", "[::1]")
FOREIGN = ("rebind.example", "localhost.example:8750", "10.0.0.1", "[::2]", "::1", "", "a b")


async def passed(settings: Settings, path: str, hosts: list[bytes], kind: str = "http") -> Any:
    """Whether the request reached the app behind the middleware, and what it was sent."""
    reached: list[str] = []
    sent: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])

    async def receive() -> Any:
        return {"type": "websocket.connect"} if kind == "websocket" else {"type": "http.request"}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {
        "type": kind,
        "method": "GET",
        "path": path,
        "headers": [(b"host", host) for host in hosts],
        "server": ("127.0.0.1", 8750),
        "extensions": {"websocket.http.response": {}},
    }
    await KeylessHosts(app, settings)(scope, receive, send)
    return bool(reached), sent


@pytest.mark.parametrize("host", LOOPBACK)
async def test_a_loopback_host_reaches_the_app(host: str) -> None:
    for kind in ("http", "websocket"):
        assert (await passed(KEYLESS, "/v1/invocations", [host.encode()], kind))[0], host


@pytest.mark.parametrize("host", FOREIGN)
async def test_any_other_host_is_refused_and_never_reaches_the_app(host: str) -> None:
    reached, sent = await passed(KEYLESS, "/v1/invocations", [host.encode()])
    assert not reached
    assert sent[0]["status"] == 403
    problem = json.loads(sent[1]["body"])
    assert problem["type"] == "urn:toolref:problem:forbidden"
    assert f"Host {host!r}" in problem["detail"]
    assert "error" not in problem  # REST: problem+json alone
    reached, sent = await passed(KEYLESS, "/llm/x/v1/messages", [host.encode()], "websocket")
    assert not reached
    assert (sent[0]["type"], sent[0]["status"]) == ("websocket.http.response.start", 403)
    assert (b"content-type", b"application/problem+json") in sent[0]["headers"]
    # The gateway's refusals carry the LLM SDKs' `error.message` too.
    assert "DNS rebinding" in json.loads(sent[1]["body"])["error"]["message"]


async def test_no_host_or_several_are_refused() -> None:
    assert not (await passed(KEYLESS, "/", []))[0]
    assert not (await passed(KEYLESS, "/", [b"localhost", b"localhost"]))[0]


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
async def test_the_probes_answer_any_host(path: str) -> None:
    assert (await passed(KEYLESS, path, [b"10.0.0.7:8750"]))[0]
    assert not (await passed(KEYLESS, path + "/", [b"10.0.0.7:8750"]))[0]


async def test_with_api_keys_every_host_reaches_the_app() -> None:
    for host in (*FOREIGN, *LOOPBACK):
        for kind in ("http", "websocket"):
            assert (await passed(KEYED, "/v1/invocations", [host.encode()], kind))[0], host
    assert (await passed(KEYED, "/v1/invocations", []))[0]


@pytest.mark.parametrize(
    ("server", "url"),
    [
        (("127.0.0.1", 8750), "http://127.0.0.1:8750"),
        (("127.0.0.2", 9000), "http://127.0.0.2:9000"),
        (("::1", 8750), "http://[::1]:8750"),  # bound to ::1: 127.0.0.1 would not reach it
        (("localhost", 8750), "http://127.0.0.1:8750"),
        (("10.0.0.1", 8750), "http://127.0.0.1:8750"),
        (("/run/toolref.sock", None), "http://127.0.0.1:PORT"),
        (None, "http://127.0.0.1:PORT"),
    ],
)
def test_the_refusal_names_the_service_s_own_loopback_address(server: Any, url: str) -> None:
    assert own_address({"server": server}) == url
