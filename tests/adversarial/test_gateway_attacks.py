"""Attacks on the gateway (`/llm/{name}/{path}`), over real sockets: a tenant reading
another's answer through the shared upstream pool, a tenant starving the others, upstream
credentials shown, paths leaving the upstream's base, and requests that made it answer 500.

Each test failed on the gateway before issue 28's fixes (its docstring says how); the
service runs in process with the HTTP layer of `toolref-server serve`, on the test engine,
and the upstreams are raw HTTP/1.1 servers (`gateway_wire.RawUpstream`).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from toolref import ToolReferenceManager
from toolref.edits.wire import described

from ..conftest import snapshot
from .gateway_wire import (
    Link,
    RawUpstream,
    Received,
    echo,
    exchange,
    gateway,
    opened,
    request_bytes,
    response,
)

pytestmark = pytest.mark.engine

KEY_A, KEY_B = "tenant-a-key", "tenant-b-key"
KEYS = ",".join(
    f"{tenant}={hashlib.sha256(key.encode()).hexdigest()}"
    for tenant, key in (("a", KEY_A), ("b", KEY_B))
)
AS_A, AS_B = [("Toolref-Key", KEY_A)], [("Toolref-Key", KEY_B)]
PROBLEM = "application/problem+json"
CHAT = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
PROTOCOL_2 = [("Content-Type", "application/json"), ("Toolref-Protocol", "2")]


def get(target: str, headers: list[tuple[str, str]] = AS_A) -> bytes:
    return request_bytes("GET", target, headers)


def post(target: str, body: bytes, headers: list[tuple[str, str]] = AS_A) -> bytes:
    return request_bytes("POST", target, [*headers, ("Content-Type", "application/json")], body)


def assert_problem(reply: Any, status: int, *words: str) -> dict[str, Any]:
    assert reply.status == status, reply.body
    assert reply.header("content-type") == PROBLEM
    problem: dict[str, Any] = reply.json()
    for word in words:
        assert word in problem["detail"], problem
    return problem


# --- 4: an answer's extra bytes never answer the next request -----------------------------


PLANTED = response(b'{"planted":"by tenant a"}')


async def plants(link: Link, request: Received) -> bool:
    """An upstream whose answers to `/plant` carry a whole second answer past their
    `Content-Length`, in the same write (what a tenant could make a sloppy upstream send)."""
    if request.target.endswith("/plant"):
        await link.write(response(b'{"for":"a"}') + PLANTED)
        return True
    return await echo(link, request)


async def test_bytes_past_an_answer_never_answer_another_tenants_request(redis: Redis) -> None:
    """Before: the pooled connection kept the planted answer in h11's buffer and gave it to
    the next request on it, whoever sent it (tenant b read tenant a's planted answer)."""
    async with (
        RawUpstream(plants) as upstream,
        gateway(redis, upstreams=f"up={upstream.url}", api_keys=KEYS) as url,
    ):
        for _ in range(12):
            a = await exchange(url, get("/llm/up/v1/plant", AS_A))
            b = await exchange(url, get("/llm/up/v1/models", AS_B))
            assert a.status == b.status == 200
            assert a.json() == {"for": "a"}
            assert b.json() == {"target": "/v1/models", "bytes": 0}
    # A connection that carried extra bytes was never used again.
    targets = [[r.target for r in link.requests] for link in upstream.links]
    assert sum(t.count("/v1/plant") for t in targets) == 12
    assert all("/v1/plant" not in t[:-1] for t in targets)


# --- 5: a client that leaves cancels its upstream request; tenants have their own share ---


async def holds(link: Link, request: Received) -> bool:
    """`/hold`: no answer until the gateway hangs up; `/stream`: an answer's first piece,
    then the same; anything else: `echo`."""
    if request.target.endswith("/stream"):
        head = "HTTP/1.1 200 X\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked"
        await link.write(f"{head}\r\n\r\n".encode() + b"d\r\nevent: first\n\r\n")
    if request.target.endswith(("/hold", "/stream")):
        await link.until_closed()
        return False
    return await echo(link, request)


@pytest.mark.parametrize("stage", ["sending the body", "waiting for the head", "streaming"])
async def test_a_client_hanging_up_cancels_its_upstream_request(
    redis: Redis, stage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """As many clients as the pool has connections hang up at `stage`; each upstream
    request is closed, and another tenant is served. Before: a client hanging up while
    the gateway waited for the answer's head left the upstream request running for the
    read timeout, holding a pooled connection (the other tenant got 504 once the pool's
    wait ran out), and one leaving mid-body was logged as an error. (Streaming was already
    cancelled: that stage passed before too, and stays so that all three are held.)"""
    pool = 2
    async with (
        RawUpstream(holds) as upstream,
        gateway(
            redis,
            upstreams=f"up={upstream.url}",
            api_keys=KEYS,
            gateway_max_connections=pool,
            gateway_connect_timeout=3,
        ) as url,
    ):
        for count in range(1, pool + 1):
            reader, writer = await opened(url)
            if stage == "sending the body":  # 100 of 10,000 bytes, the rest never sent
                head = request_bytes("POST", "/llm/up/v1/upload", AS_A, length=False)
                writer.write(head[:-2] + b"Content-Length: 10000\r\n\r\n" + b"x" * 100)
            else:
                path = "/llm/up/v1/hold" if stage == "waiting for the head" else "/llm/up/v1/stream"
                writer.write(post(path, b"{}", AS_A))
            await upstream.wait_for_requests(count)
            if stage == "streaming":
                await reader.readuntil(b"event: first")
            writer.close()
        await asyncio.wait_for(asyncio.gather(*(link.closed.wait() for link in upstream.links)), 10)
        other = await exchange(url, get("/llm/up/v1/models", AS_B))
    assert other.status == 200, other.body
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_one_tenant_cannot_take_every_upstream_request(redis: Redis) -> None:
    """TOOLREF_GATEWAY_TENANT_REQUESTS_IN_FLIGHT: a tenant at its limit is refused (429,
    before anything reaches the upstream) while another is served; a slot comes back when
    its request ends. Before: no per-tenant limit (the third request reached the upstream
    and was held there)."""
    async with (
        RawUpstream(holds) as upstream,
        gateway(
            redis,
            upstreams=f"up={upstream.url}",
            api_keys=KEYS,
            gateway_tenant_requests_in_flight=2,
        ) as url,
    ):
        holders = [await opened(url) for _ in range(2)]
        for count, (_, writer) in enumerate(holders, 1):
            writer.write(post("/llm/up/v1/hold", b"{}", AS_A))
            await upstream.wait_for_requests(count)
        refused = await exchange(url, get("/llm/up/v1/models", AS_A), seconds=5)
        served = await exchange(url, get("/llm/up/v1/models", AS_B))
        for _, writer in holders:
            writer.close()
        held = [x for x in upstream.links if x.requests[0].target == "/v1/hold"]
        await asyncio.wait_for(asyncio.gather(*(x.closed.wait() for x in held)), 10)
        again = await exchange(url, get("/llm/up/v1/models", AS_A))
    problem = assert_problem(refused, 429, "TOOLREF_GATEWAY_TENANT_REQUESTS_IN_FLIGHT")
    assert problem["limit"] == 2
    assert refused.header("retry-after") is not None
    assert served.status == again.status == 200
    assert [r.target for r in upstream.requests].count("/v1/models") == 2


async def test_a_request_that_finds_every_upstream_connection_busy_is_told_so(
    redis: Redis,
) -> None:
    """Past TOOLREF_GATEWAY_CONNECT_TIMEOUT waiting for a pooled connection: 503
    `overloaded` naming TOOLREF_GATEWAY_MAX_CONNECTIONS. Before: 504 `upstream-timeout`,
    saying the upstream did not answer (it was never asked)."""
    async with (
        RawUpstream(holds) as upstream,
        gateway(
            redis,
            upstreams=f"up={upstream.url}",
            api_keys=KEYS,
            gateway_max_connections=1,
            gateway_connect_timeout=0.5,
        ) as url,
    ):
        _, writer = await opened(url)
        writer.write(post("/llm/up/v1/hold", b"{}", AS_A))
        await upstream.wait_for_requests(1)
        busy = await exchange(url, get("/llm/up/v1/models", AS_B))
        writer.close()
    problem = assert_problem(busy, 503, "TOOLREF_GATEWAY_MAX_CONNECTIONS=1")
    assert problem["type"].endswith(":overloaded")
    assert busy.header("retry-after") is not None
    assert len(upstream.requests) == 1


# --- 7: credentials in logs and answers ---------------------------------------------------


async def test_upstream_credentials_and_names_are_never_shown(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: httpx logged each upstream URL with its query and userinfo at INFO, a 502's
    detail showed the upstream's password, and `/llm/nope/...` without a key listed every
    upstream name."""
    caplog.set_level(logging.DEBUG)
    async with RawUpstream() as upstream:
        base = upstream.url.replace("http://", "http://gwuser:UP-PASSWORD@")
        upstreams = f"alpha-up={base}/api,beta-down=http://gwuser:DOWN-PASSWORD@127.0.0.1:9"
        async with gateway(redis, upstreams=upstreams, api_keys=KEYS) as url:
            served = await exchange(url, get("/llm/alpha-up/v1/models?key=QUERY-SECRET"))
            down = await exchange(url, get("/llm/beta-down/v1/models?key=QUERY-SECRET"))
            anonymous = await exchange(url, get("/llm/nope/v1/models", []))
            wrong_key = await exchange(url, get("/llm/nope/v1/models", [("Toolref-Key", "x")]))
            unknown = await exchange(url, get("/llm/nope/v1/models"))
            metrics = await exchange(url, get("/metrics", []))
    assert served.status == 200
    sent = upstream.requests[0]
    assert sent.target == "/api/v1/models?key=QUERY-SECRET"  # the query is the client's
    assert sent.header("authorization") == "Basic " + base64.b64encode(
        b"gwuser:UP-PASSWORD"
    ).decode("ascii")
    assert_problem(down, 502, "'beta-down'", "http://127.0.0.1:9")
    assert_problem(anonymous, 401, "Toolref-Key")
    assert_problem(wrong_key, 401)
    assert_problem(unknown, 404, "alpha-up, beta-down")  # with a valid key: fine
    shown = [down, anonymous, wrong_key, unknown, metrics]
    text = "\n".join(
        [r.getMessage() for r in caplog.records]
        + [str(r.headers) + r.body.decode("latin-1") for r in shown]
    )
    for secret in ("UP-PASSWORD", "DOWN-PASSWORD", "QUERY-SECRET", "gwuser"):
        assert secret not in text
    for reply in (anonymous, wrong_key):
        assert "alpha-up" not in reply.body.decode()
        assert "beta-down" not in reply.body.decode()


@pytest.mark.parametrize("method", ["TRACE", "CONNECT", "FOO"])
async def test_methods_no_llm_api_uses_are_not_forwarded(redis: Redis, method: str) -> None:
    """TRACE would echo the request back, the `Authorization` the gateway adds from the
    base URL's credentials included; CONNECT would open a tunnel. Before: forwarded (a
    CONNECT answered 2xx left the client's connection switched to a tunnel)."""
    async with RawUpstream() as upstream:
        base = upstream.url.replace("http://", "http://gwuser:UP-PASSWORD@")
        async with gateway(redis, upstreams=f"up={base}", api_keys=KEYS) as url:
            reply = await exchange(url, request_bytes(method, "/llm/up/v1/models", AS_A))
    assert_problem(reply, 405, "GET, HEAD, OPTIONS, PATCH, POST, PUT")
    assert reply.header("allow") == "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"
    assert upstream.requests == []


# --- 8: paths stay under the upstream's base ---------------------------------------------


ESCAPES = [
    "/llm/up/../secret",
    "/llm/up/%2e%2e/secret",
    "/llm/up/%2E%2E/secret",
    "/llm/up/..%2fsecret",
    "/llm/up/%2e%2e%2f%2e%2e%2fsecret",
    "/llm/up/v1/..%2F..%2Fsecret",
    "/llm/up/v1/./models",
    "/llm/up/v1/%2e/models",
    "/llm/up/v1/.%2E/.%2e/secret",
    "/llm/up/v1/models%2f..%2fsecret",
    "/llm/up/v1/..%5c..%5csecret",
    "/llm/up/v1\\..\\secret",
    "/llm/up/v1/a%00b",
    "/llm/up/v1/a%0d%0aX-Injected:%20yes",
    "/llm/up/v1/a%7fb",
    "/llm/up/v1/a%zzb",
]


@pytest.mark.parametrize("path", ESCAPES)
async def test_paths_that_could_leave_the_upstreams_base_are_refused(
    redis: Redis, path: str
) -> None:
    """Dot segments, encoded separators, control characters and broken escapes: 400
    problem+json, nothing sent upstream. Before: `..` (plain or encoded) reached `/secret`
    on an upstream whose base is `/api`, and `%00` or `%0d%0a` were 500s."""
    async with (
        RawUpstream() as upstream,
        gateway(redis, upstreams=f"up={upstream.url}/api", api_keys=KEYS) as url,
    ):
        reply = await exchange(url, get(path))
        body = await exchange(url, post(path.replace("/v1", "/v1/messages"), CHAT))
    assert_problem(reply, 400, "path")
    assert_problem(body, 400, "path")
    assert upstream.requests == []


async def test_the_path_and_query_travel_as_the_client_wrote_them(redis: Redis) -> None:
    """The raw path bytes are forwarded. Before: the decoded path was re-encoded, so `%3F`
    became the start of a query and `%23` a fragment the upstream never saw."""
    paths = [
        "/v1/files/a%20b%3Fc%23d+e",
        "/v1/caf%C3%A9/x%2By?q=%2F&r=a+b&s",
        "/v1/models",
        "/v1/models/",
    ]
    async with (
        RawUpstream() as upstream,
        gateway(redis, upstreams=f"up={upstream.url}/api", api_keys=KEYS) as url,
    ):
        replies = [await exchange(url, get("/llm/up" + path)) for path in paths]
    assert [r.status for r in replies] == [200] * len(paths)
    assert [r.target for r in upstream.requests] == ["/api" + path for path in paths]


# --- Low: answers that were 500s ----------------------------------------------------------


async def test_a_content_length_that_does_not_describe_the_body_is_never_forwarded(
    redis: Redis,
) -> None:
    """`Transfer-Encoding: chunked` with a `Content-Length` (the chunks win): the upstream
    gets the body with a length that describes it. Before: the client's Content-Length was
    forwarded, then h11 refused to send more bytes than it said (500)."""
    chunked = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    async with (
        RawUpstream() as upstream,
        gateway(redis, upstreams=f"up={upstream.url}", api_keys=KEYS) as url,
    ):
        replies = []
        for declared in ("3", "500", "11"):
            headers = [*AS_A, ("Transfer-Encoding", "chunked"), ("Content-Length", declared)]
            data = request_bytes("POST", "/llm/up/v1/upload", headers, length=False)
            replies.append(await exchange(url, data + chunked))
    assert [r.status for r in replies] == [200, 200, 200]
    for sent in upstream.requests:
        assert sent.body == b"hello world"
        assert sent.header("content-length") in (None, "11")


@pytest.mark.parametrize(
    "value", ["up; at=" + "9" * 5000, "up; at=1234567890", "up; at=\u0661", "up; at=-1", "up; at="]
)
async def test_a_switch_header_that_is_not_a_small_number_is_refused_before_anything_is_kept(
    redis: Redis, value: str
) -> None:
    """`Toolref-Switched-From: up; at=<n>`: `n` is 1-9 ASCII digits, else 400 before the
    body is read or anything stored. Before: 5,000 digits were a 500 raised after the
    history had been kept."""
    async with (
        RawUpstream() as upstream,
        gateway(redis, upstreams=f"up={upstream.url}", api_keys=KEYS) as url,
    ):
        before = await snapshot(redis)
        headers = [*AS_A, *PROTOCOL_2, ("Toolref-Switched-From", value)]
        reply = await exchange(url, request_bytes("POST", "/llm/up/v1/messages", headers, CHAT))
        after = await snapshot(redis)
    assert_problem(reply, 400, "Toolref-Switched-From", "at=")
    assert after == before
    assert upstream.requests == []


async def test_a_switch_over_a_body_it_cannot_rewrite_forwards_it_as_sent(redis: Redis) -> None:
    """Content blocks whose `type` is no string, messages in no known shape: the switch
    passes what it cannot rewrite. Before: a 500 after the history had been kept."""
    bodies = [
        {"model": "m", "messages": [{"role": "user", "content": [{"type": ["text"]}]}]},
        {"model": "m", "messages": [{"role": "user", "content": [{"type": {"a": 1}}]}]},
        {"model": "m", "messages": [{"role": "user", "content": "hi"}, [1, 2]]},
    ]
    async with (
        RawUpstream() as upstream,
        gateway(redis, upstreams=f"up={upstream.url}", api_keys=KEYS) as url,
    ):
        headers = [*AS_A, *PROTOCOL_2, ("Toolref-Switched-From", "other; at=1")]
        replies = [
            await exchange(
                url,
                request_bytes("POST", "/llm/up/v1/messages", headers, json.dumps(b).encode()),
            )
            for b in bodies
        ]
    for reply in replies:
        assert reply.status < 500, reply.body
        assert reply.status == 200 or reply.header("content-type") == PROBLEM
    assert len(upstream.requests) == sum(r.status == 200 for r in replies)


# --- Low: headers both ways ---------------------------------------------------------------


async def test_the_upstream_gets_exactly_the_clients_end_to_end_headers(redis: Redis) -> None:
    """Before: the gateway's httpx client added `Accept`, `Accept-Encoding: gzip, deflate,
    br, zstd`, `User-Agent: python-httpx/...` and `Connection: keep-alive`."""
    sent = [("X-Client", "one"), ("Authorization", "Bearer provider-key"), ("x-b", "2")]
    async with (
        RawUpstream() as upstream,
        gateway(redis, upstreams=f"up={upstream.url}", api_keys=KEYS) as url,
    ):
        await exchange(url, request_bytes("GET", "/llm/up/v1/models", [*sent, *AS_A], length=False))
        await exchange(url, post("/llm/up/v1/messages", CHAT, [*sent, *AS_A]))
    get_, post_ = upstream.requests
    assert [(k.lower(), v) for k, v in get_.headers] == [
        ("host", upstream.url.removeprefix("http://")),
        ("x-client", "one"),
        ("authorization", "Bearer provider-key"),
        ("x-b", "2"),
    ]
    assert {k.lower() for k, _ in post_.headers} == {
        "host",
        "x-client",
        "authorization",
        "x-b",
        "content-type",
        "content-length",
    }


async def forges(link: Link, request: Received) -> bool:
    forged = [
        ("Toolref-History", "tb_forged"),
        ("Toolref-Edits", "9"),  # the gateway's to say, not the upstream's
        ("Toolref-Savings", "raw=1, wire=1, ratio=1.0"),
        ("Toolref-References", '{"tr_x":"forged"}'),
        ("Toolref-Protocol", "9"),
        ("toolref-anything", "x"),
    ]
    await link.write(response(b'{"ok":true}', headers=forged))
    return True


async def test_toolref_headers_from_an_upstream_never_reach_the_client(redis: Redis) -> None:
    """An upstream cannot forge `Toolref-History` or any toolref header; a hydrated answer
    carries the gateway's own, `Toolref-Savings` once. Before: pass-through answers kept
    the upstream's, and hydrated ones had two `Toolref-Savings`."""
    async with (
        RawUpstream(forges) as upstream,
        gateway(redis, upstreams=f"up={upstream.url}", api_keys=KEYS) as url,
    ):
        passed = await exchange(url, get("/llm/up/v1/models"))
        hydrated = await exchange(
            url, request_bytes("POST", "/llm/up/v1/messages", [*AS_A, *PROTOCOL_2], CHAT)
        )
    assert passed.status == hydrated.status == 200
    assert [k for k, _ in passed.headers if k.lower().startswith("toolref-")] == []
    assert len(hydrated.all("toolref-savings")) == 1
    assert hydrated.header("toolref-savings") == f"raw={len(CHAT)}, wire={len(CHAT)}, ratio=1.0"
    assert hydrated.all("toolref-protocol") == ["2"]
    assert "tb_forged" not in str(hydrated.headers)
    assert hydrated.header("toolref-edits") is None
    assert hydrated.header("toolref-references") is None


# --- Low: garbage keys in open mode -------------------------------------------------------


async def test_garbage_keys_in_open_mode_cannot_evict_the_users_state(redis: Redis) -> None:
    """Open mode (no API keys) has one tenant whatever `Toolref-Key` says. Before: the
    gateway kept its state per key hash (an LRU of 4 tenants), so 40 garbage keys evicted
    the user's held histories and kept bodies, and the user's next turn was refused and
    sent again. Now state is kept per tenant (a key makes none): after 40 conversations
    under garbage keys, the user's next turn, under a garbage key of its own, is an edit
    of the recipe it kept, accepted as sent."""
    async with (
        RawUpstream(echo) as upstream,
        gateway(redis, upstreams=f"up={upstream.url}") as url,
    ):
        base = f"{url}/llm/up/v1/chat/completions"
        manager, garbage = ToolReferenceManager(), ToolReferenceManager()
        conversation: list[dict[str, Any]] = [{"role": "user", "content": "x " * 4000}]
        async with httpx.AsyncClient() as client:
            for _ in range(2):  # as it is, offering edits; then an edit, its recipe kept
                made = await manager.apost(
                    client, base, json={"model": "m", "messages": conversation}
                )
                assert made.status_code == 200
                conversation += [{"role": "assistant", "content": "ok"}]
            recipe = made.headers["toolref-history"]
            assert recipe.startswith("tb_")
            for n in range(40):
                text = f"other {n}: " + "why " * 16  # worth an edit (a tiny one goes as it is)
                other = {"model": "m", "messages": [{"role": "user", "content": text}]}
                key = {"Toolref-Key": f"garbage-{n}"}
                for _ in range(2):
                    made = await garbage.apost(client, base, json=other, headers=key)
                    assert made.status_code == 200
            assert garbage.savings.edits == 79  # the other conversations kept recipes too
            conversation += [{"role": "user", "content": "y " * 4000}]
            again = await manager.apost(
                client,
                base,
                json={"model": "m", "messages": conversation},
                headers={"Toolref-Key": "garbage-user"},
            )
        assert again.status_code == 200
        header = described(again.request.content)
        assert header["b"] == recipe  # an edit of the user's recipe ...
        assert manager.savings.resends == 0  # ... held: nothing sent again
