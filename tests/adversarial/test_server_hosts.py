"""A service with no API keys (no TOOLREF_API_KEYS: bound to loopback, one local tenant, as
`make serve` runs it) answers only requests that name this machine's loopback: a `Host` of
`localhost` or a loopback address, any port. A web page the operator opens can point a name
of its own at 127.0.0.1 after it loaded (DNS rebinding): its browser's requests then reach
the service from loopback, for `Host: that.name`, and the page reads the answers. Before,
every endpoint answered any `Host`: such a page could register and resolve refs, read
payloads, make summaries on the operator's LLM key and use the gateway's upstreams.
`/healthz` and `/readyz` (no data: the process is up, the store answers) stay open to a
probe, whatever it names the service by. With API keys set, the key decides, as before."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette

from tests.integration.relay_gateway import Scripted, gateway
from toolref.wire.canonical import digest_of
from toolref.wire.headers import KEY_HEADER
from toolref_server.app import create_app
from toolref_server.settings import Settings

from ..conftest import Api, snapshot

pytestmark = pytest.mark.engine

KEY = "tenant-key"
API_KEYS = f"acme={hashlib.sha256(KEY.encode()).hexdigest()}"
READ = {"name": "read", "args": {"path": "a.py"}, "result": "secret payload\n" * 20}
REF = str(digest_of(READ).ref)
MESSAGES = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}

# Every kind of endpoint but the probes: (method, path, JSON body or None).
REQUESTS: tuple[tuple[str, str, Any], ...] = (
    ("POST", "/v1/invocations", {"invocations": [READ]}),
    ("POST", "/v1/invocations:resolve", {"refs": [REF]}),
    ("POST", "/v1/invocations:findMissing", {"refs": [REF]}),
    ("GET", f"/v1/invocations/{REF}", None),
    ("GET", f"/v1/invocations/{REF}/summary", None),
    ("POST", "/v1/messages:hydrate", {"format": "anthropic", "messages": []}),
    ("POST", "/v1/edits:apply", {}),
    ("GET", "/v1/capabilities", None),
    ("GET", "/openapi.json", None),
    ("GET", "/metrics", None),
    ("GET", "/v1/savings", None),
    ("GET", "/savings", None),
    ("GET", "/", None),
    ("GET", "/docs", None),
    ("GET", "/no/such/path", None),
    ("POST", "/llm/up/v1/messages", MESSAGES),
    ("GET", "/llm/up/v1/models", None),
)
WEBSOCKETS = ("/v1/channel", "/llm/up/v1/responses")
PROBES = ("/healthz", "/readyz")


def foreign_hosts(port: int) -> tuple[str, ...]:
    """Names a rebinding page's requests carry: its own, with the service's port or none;
    one that starts like a loopback name; an address that is not loopback."""
    return (
        f"rebind.example:{port}",
        "rebind.example",
        f"localhost.rebind.example:{port}",
        f"127.0.0.1.rebind.example:{port}",
        f"10.1.2.3:{port}",
        f"[2001:db8::1]:{port}",
    )


def assert_refused(response: httpx.Response, host: str, port: int | str) -> None:
    where = (response.request.method, response.request.url.path, host)
    assert response.status_code == 403, (*where, response.text)
    assert response.headers["content-type"] == "application/problem+json", where
    problem = response.json()
    assert problem["type"] == "urn:toolref:problem:forbidden", where
    assert_detail(problem["detail"], repr(host), port)
    assert "secret payload" not in response.text, where


def assert_detail(detail: str, shown: str, port: int | str) -> None:
    """The refusal names the Host (`shown`, as quoted), why, and the two ways on."""
    assert f"Host {shown}" in detail, detail
    for said in ("DNS rebinding", f"http://127.0.0.1:{port}", "localhost", "TOOLREF_API_KEYS"):
        assert said in detail, (said, detail)


async def upgrade(port: int, path: str, host: str) -> tuple[int, bytes]:
    """A WebSocket upgrade for `path` naming `host`, over a socket of its own: the status
    and body of the answer (no body after a 101)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            (
                f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        status = int(head.split()[1])
        length = 0
        for line in head.decode("latin-1").split("\r\n")[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        body = await asyncio.wait_for(reader.readexactly(length), 10) if status != 101 else b""
        return status, body
    finally:
        writer.close()


async def test_over_a_socket_a_keyless_service_answers_no_other_host(redis: Redis) -> None:
    """uvicorn on a real socket, as `make serve` runs the service: every request and
    WebSocket upgrade for a name of a rebinding page is refused before anything is read,
    stored or sent upstream; the same requests for 127.0.0.1 or localhost are served."""
    upstream = Scripted()
    async with (
        gateway(redis, {"up": upstream.app()}, keys=False) as service,
        httpx.AsyncClient(base_url=service.url, headers={"Toolref-Protocol": "2"}) as client,
    ):
        port = httpx.URL(service.url).port
        assert port is not None
        held = await client.post("/v1/invocations", json={"invocations": [READ]})
        assert held.status_code == 200, held.text
        before = await snapshot(redis)
        for host in foreign_hosts(port):
            for method, path, body in REQUESTS:
                response = await client.request(method, path, json=body, headers={"Host": host})
                assert_refused(response, host, port)
            for path in WEBSOCKETS:
                status, answer = await upgrade(port, path, host)
                assert status == 403, (path, host, answer)
                problem = json.loads(answer)
                assert problem["type"] == "urn:toolref:problem:forbidden"
                assert_detail(problem["detail"], repr(host), port)
            for path in PROBES:  # a probe may name the service as it likes
                assert (await client.get(path, headers={"Host": host})).status_code == 200
        assert upstream.received == []
        assert await snapshot(redis) == before
        # By its loopback names, the same requests are served.
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}"):
            resolved = await client.post(
                "/v1/invocations:resolve", json={"refs": [REF]}, headers={"Host": host}
            )
            assert resolved.status_code == 200, (host, resolved.text)
            assert "secret payload" in resolved.text
            forwarded = await client.post(
                "/llm/up/v1/messages", json=MESSAGES, headers={"Host": host}
            )
            assert forwarded.status_code == 200, (host, forwarded.text)
            assert (await client.get("/v1/capabilities", headers={"Host": host})).status_code == 200
            assert (await upgrade(port, "/v1/channel", host))[0] == 101, host
        assert len(upstream.received) == 4


@asynccontextmanager
async def started(redis: Redis, **settings: Any) -> AsyncIterator[Starlette]:
    """The app on the test engine, its lifespan run, for scopes sent to it by hand."""
    app = create_app(
        Settings(redis_url="unused", upstreams="up=http://127.0.0.1:9", **settings), redis=redis
    )
    async with app.router.lifespan_context(app):
        yield app


async def socket_answer(
    app: Starlette, path: str, host: str | None, *, extended: bool
) -> list[Any]:
    """What the app sends for a WebSocket upgrade of `path` naming `host` (None: no Host);
    `extended`: the server can answer it with an HTTP response (ASGI's
    `websocket.http.response`), else only close it (a server answers 403 then)."""
    headers = [(b"host", host.encode())] if host is not None else []
    scope = {
        "type": "websocket",
        "asgi": {"version": "3.0"},
        "scheme": "ws",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8750),
        "subprotocols": [],
        "extensions": {"websocket.http.response": {}} if extended else {},
        "state": {},
    }
    sent: list[Any] = []
    inbox = [{"type": "websocket.connect"}]
    answered = asyncio.Event()

    async def receive() -> Any:
        if inbox:
            return inbox.pop()
        await asyncio.Event().wait()  # the socket stays open until the test cancels it
        return {"type": "websocket.disconnect", "code": 1000}

    async def send(message: Any) -> None:
        sent.append(message)
        answered.set()

    task = asyncio.create_task(app(scope, receive, send))
    await asyncio.wait_for(answered.wait(), 10)  # the upgrade answered
    await asyncio.sleep(0)  # and its body, when there is one
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return sent


@pytest.mark.parametrize(
    "host", ["rebind.example:8750", "rebind.example", "registry", "toolref.test", "10.0.0.1", ""]
)
async def test_in_process_a_keyless_app_answers_no_other_host(
    make_api: Api, redis: Redis, host: str
) -> None:
    """The same rule in process (httpx's ASGI transport; `host` as a test client's base URL
    would name it): every endpoint but the probes 403, nothing stored."""
    api = await make_api(upstreams="up=http://127.0.0.1:9")
    before = await snapshot(redis)
    for method, path, body in REQUESTS:
        response = await api.request(method, path, json=body, headers={"Host": host})
        assert_refused(response, host, 8750)
    for path in PROBES:
        assert (await api.get(path, headers={"Host": host})).status_code == 200
    assert await snapshot(redis) == before
    registered = await api.post("/v1/invocations", json={"invocations": [READ]})
    assert registered.status_code == 200, registered.text


async def test_in_process_a_request_with_several_hosts_is_refused(make_api: Api) -> None:
    api = await make_api()
    response = await api.get(
        "/v1/capabilities", headers=[("Host", "localhost"), ("Host", "rebind.example")]
    )
    assert_refused(response, "localhost, rebind.example", 8750)


@pytest.mark.parametrize("path", WEBSOCKETS)
async def test_in_process_a_keyless_app_refuses_an_upgrade_for_another_host(
    redis: Redis, path: str
) -> None:
    async with started(redis) as app:
        for host in ("rebind.example:8750", None):
            start, body = await socket_answer(app, path, host, extended=True)
            assert start["type"] == "websocket.http.response.start", start
            assert start["status"] == 403
            assert (b"content-type", b"application/problem+json") in start["headers"]
            problem = json.loads(body["body"])
            assert problem["type"] == "urn:toolref:problem:forbidden"
            assert_detail(problem["detail"], repr(host) if host else "(none)", 8750)
            # A server that cannot answer an upgrade with a body: closed, never accepted.
            (closed,) = await socket_answer(app, path, host, extended=False)
            assert closed["type"] == "websocket.close", closed
        (accepted, *_) = await socket_answer(app, "/v1/channel", "127.0.0.1:8750", extended=True)
        assert accepted["type"] == "websocket.accept"


async def test_with_api_keys_the_key_decides_whatever_the_host(make_api: Api) -> None:
    """Keys set (a service others reach, by any name): nothing about the Host changes."""
    api = await make_api(api_keys=API_KEYS, headers={"Authorization": f"Bearer {KEY}"})
    for host in ("toolref.example.com", "rebind.example:8750", "10.1.2.3"):
        registered = await api.post(
            "/v1/invocations", json={"invocations": [READ]}, headers={"Host": host}
        )
        assert registered.status_code == 200, registered.text
        resolved = await api.post(
            "/v1/invocations:resolve", json={"refs": [REF]}, headers={"Host": host}
        )
        assert resolved.status_code == 200
        assert (await api.get("/v1/capabilities", headers={"Host": host})).status_code == 200
        anonymous = await api.post(
            "/v1/invocations:resolve",
            json={"refs": [REF]},
            headers={"Host": host, "Authorization": ""},
        )
        assert anonymous.status_code == 401
    # The gateway's own key header, too: admitted by the key (then its unreachable upstream).
    answer = await api.post(
        "/llm/none/v1/messages", json=MESSAGES, headers={"Host": "rebind.example", KEY_HEADER: KEY}
    )
    assert answer.status_code == 404  # no such upstream: the key was taken, the Host ignored


async def test_the_api_document_tells_the_rule_only_without_keys(make_api: Api) -> None:
    keyless = (await (await make_api()).get("/openapi.json")).json()
    assert "DNS rebinding" in keyless["info"]["description"]
    keyed = await make_api(api_keys=API_KEYS)
    assert "DNS rebinding" not in (await keyed.get("/openapi.json")).json()["info"]["description"]
