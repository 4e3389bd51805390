"""The gateway: `/llm/{name}/{path}` of the service, hydrating and forwarding to upstreams.

Over real sockets: the service (registry and gateway in one app, on the test engine) and
upstreams served by uvicorn: the scripted LLM backend of examples/llm_backend.py without
toolref (a provider), and small recording apps. The clients are the official SDKs with
`toolref.AsyncTransport` / `Transport` (what the relay runs) or plain httpx.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anthropic
import httpx
import openai
import pytest
from examples.llm_backend import create_backend
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.servers import serve, serve_all
from toolref import ToolReferenceManager
from toolref_server.app import create_app
from toolref_server.settings import LOCAL_TENANT, Settings
from toolref_server.storage import keys

from ..conftest import key_names
from .test_sdk_transport import (
    CLIENTS,
    Client,
    Run,
    assert_later_requests_were_edits,
    assert_received_what_the_sdk_sent,
    assert_the_model_read_every_result,
)

KEY = "gateway-test-key"


@dataclass
class Recorder:
    """An upstream that records what it was sent and answers as told."""

    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def app(self) -> Starlette:
        async def record(request: Request) -> Response:
            body = await request.body()
            query = request.url.query
            self.requests.append((request.url.path, query, dict(request.headers), body))
            if request.url.path.endswith("/slow"):
                return StreamingResponse(self._slow(), media_type="text/event-stream")
            if request.url.path.endswith("/broken"):
                return StreamingResponse(self._broken(), media_type="text/event-stream")
            return JSONResponse(
                {"path": request.url.path, "query": query},
                status_code=int(request.headers.get("x-status", "200")),
                headers={"x-upstream": "yes"},
            )

        return Starlette(routes=[Route("/{path:path}", record, methods=["GET", "POST"])])

    async def _slow(self) -> AsyncIterator[bytes]:
        yield b"event: first\ndata: {}\n\n"
        try:
            await self.release.wait()
            yield b"event: last\ndata: {}\n\n"
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    async def _broken(self) -> AsyncIterator[bytes]:
        yield b"event: first\ndata: {}\n\n"
        raise RuntimeError("the upstream failed mid-answer")


@dataclass
class Stack:
    gateway: str  # the service's base URL
    provider: Starlette  # the scripted LLM upstream, as a provider (no toolref)
    recorder: Recorder


@pytest.fixture
async def stack(redis: Redis) -> AsyncIterator[Stack]:
    provider, recorder = create_backend(None, delay=0.001), Recorder()
    async with serve_all(provider, recorder.app()) as [provider_url, recorder_url]:
        upstreams = f"up={provider_url},rec={recorder_url}/base,down=http://127.0.0.1:9"
        service = create_app(Settings(redis_url="unused", upstreams=upstreams), redis=redis)
        async with serve(service) as url:
            yield Stack(url, provider, recorder)


@pytest.mark.parametrize("client", CLIENTS.values(), ids=CLIENTS.keys())
async def test_each_sdk_reaches_the_provider_through_the_gateway_unchanged(
    stack: Stack, client: Client
) -> None:
    run = await client(stack.gateway + "/llm/up", Run(ToolReferenceManager()))
    # The provider received exactly what the SDK built (byte for byte), turn after turn,
    # while every turn after the first travelled as an edit.
    assert_received_what_the_sdk_sent(run, stack.provider)
    assert_the_model_read_every_result(run)
    assert_later_requests_were_edits(run)
    for arrival in stack.provider.state.provider.requests:  # the offer is not forwarded
        assert not any(name.lower().startswith("toolref-") for name, _ in arrival.headers)


async def test_bodies_worked_on_in_worker_threads_arrive_the_same(redis: Redis) -> None:
    """With TOOLREF_OFFLOAD_BYTES=0 every inflate, parse and splice of the gateway runs off
    the event loop: the provider still receives exactly what the SDK built."""
    provider = create_backend(None, delay=0.001)
    async with serve(provider) as provider_url:
        settings = Settings(redis_url="unused", upstreams=f"up={provider_url}", offload_bytes=0)
        async with serve(create_app(settings, redis=redis)) as url:
            run = await CLIENTS["anthropic.AsyncAnthropic"](
                url + "/llm/up", Run(ToolReferenceManager())
            )
    assert_received_what_the_sdk_sent(run, provider)
    assert_later_requests_were_edits(run)


async def test_answers_tell_the_bytes_saved_and_metrics_count_them(stack: Stack) -> None:
    run = await CLIENTS["openai.AsyncOpenAI"](
        stack.gateway + "/llm/up", Run(ToolReferenceManager())
    )
    async with httpx.AsyncClient(base_url=stack.gateway) as client:
        metrics = (await client.get("/metrics")).text
    counted = {
        line.split('"')[1]: float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("toolref_upload_bytes_total{")
    }
    assert counted["raw"] == sum(map(len, run.sdk))
    assert counted["wire"] == sum(len(r.read()) for r in run.wire)
    assert counted["raw"] > 2 * counted["wire"]


async def test_savings_header_and_passthrough_of_everything_else(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.gateway) as client:
        body = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"n":1.0}'
        answer = await client.post(
            "/llm/rec/v1/chat/completions?beta=true",
            content=body,
            headers={
                "content-type": "application/json",
                "authorization": "Bearer provider-secret",
                "x-api-key": "provider-key",
                "x-status": "201",
                "toolref-protocol": "2",
            },
        )
        other = await client.get("/llm/rec/v1/models?limit=2")
    assert answer.status_code == 201  # the upstream's status, headers and body
    assert answer.headers["x-upstream"] == "yes"
    assert answer.json() == {"path": "/base/v1/chat/completions", "query": "beta=true"}
    assert answer.headers["toolref-savings"] == f"raw={len(body)}, wire={len(body)}, ratio=1.0"
    path, query, headers, received = stack.recorder.requests[0]
    assert (path, query) == ("/base/v1/chat/completions", "beta=true")
    assert received == body  # nothing to hydrate: as sent, byte for byte
    assert headers["authorization"] == "Bearer provider-secret"  # credentials untouched
    assert headers["x-api-key"] == "provider-key"
    assert not any(name.startswith("toolref-") for name in headers)
    assert other.status_code == 200
    assert other.json() == {"path": "/base/v1/models", "query": "limit=2"}


async def test_streams_arrive_as_the_upstream_sends_and_cancel_both_ways(stack: Stack) -> None:
    async with (
        httpx.AsyncClient(base_url=stack.gateway, timeout=10) as client,
        client.stream("POST", "/llm/rec/slow", content=b"{}") as answer,
    ):
        # The first event arrives while the upstream still holds its stream open.
        first = await anext(answer.aiter_raw())
        assert b"event: first" in first
        assert not stack.recorder.release.is_set()
    # The client left: the upstream's stream was cancelled.
    await asyncio.wait_for(stack.recorder.cancelled.wait(), 10)


async def test_an_upstream_failing_mid_stream_aborts_the_answer(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.gateway, timeout=10) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await _drain(client, "/llm/rec/broken")


async def test_unknown_and_unreachable_upstreams_are_problems(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.gateway) as client:
        unknown = await client.post("/llm/nope/v1/messages", content=b"{}")
        down = await client.post("/llm/down/v1/messages", content=b"{}")
    assert unknown.status_code == 404
    assert "TOOLREF_UPSTREAMS" in unknown.json()["detail"]
    assert "rec, up" in unknown.json()["detail"] or "down, rec, up" in unknown.json()["detail"]
    assert down.status_code == 502
    assert down.json()["type"].endswith("upstream-unreachable")
    assert "'down'" in down.json()["detail"]


async def test_a_gateway_with_keys_wants_the_tenants_key_in_its_own_header(
    redis: Redis,
) -> None:
    recorder = Recorder()
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    async with serve(recorder.app()) as upstream:
        settings = Settings(redis_url="unused", upstreams=f"rec={upstream}", api_keys=f"t={digest}")
        async with (
            serve(create_app(settings, redis=redis)) as url,
            httpx.AsyncClient(base_url=url) as client,
        ):
            body = b'{"messages":[{"role":"user","content":"hi"}]}'
            json_headers = {"content-type": "application/json", "toolref-protocol": "2"}
            without = await client.post(
                "/llm/rec/v1/messages",
                content=body,
                headers={**json_headers, "authorization": "Bearer " + KEY},
            )
            wrong = await client.post(
                "/llm/rec/v1/messages", content=body, headers={**json_headers, "toolref-key": "x"}
            )
            right = await client.post(
                "/llm/rec/v1/messages", content=body, headers={**json_headers, "toolref-key": KEY}
            )
    assert without.status_code == 401  # the provider's Authorization is not the tenant's key
    assert "Toolref-Key" in without.json()["detail"]
    assert wrong.status_code == 401
    assert right.status_code == 200
    assert right.headers["toolref-protocol"] == "2"
    assert len(recorder.requests) == 1  # the refused requests reached no upstream
    assert recorder.requests[0][3] == body


def _openai_refusal(base_url: str, toolref_key: str | None) -> openai.AuthenticationError:
    """What a plain official `openai` client (no toolref) raises through the gateway."""
    headers = {"Toolref-Key": toolref_key} if toolref_key is not None else None
    with (
        openai.OpenAI(
            base_url=base_url,
            api_key="sk-the-providers-own",
            default_headers=headers,
            max_retries=0,
        ) as client,
        pytest.raises(openai.AuthenticationError) as raised,
    ):
        client.chat.completions.create(model="any", messages=[{"role": "user", "content": "hi"}])
    return raised.value


def _anthropic_refusal(base_url: str, toolref_key: str) -> anthropic.AuthenticationError:
    with (
        anthropic.Anthropic(
            base_url=base_url,
            api_key="sk-ant-the-providers-own",
            default_headers={"Toolref-Key": toolref_key},
            max_retries=0,
        ) as client,
        pytest.raises(anthropic.AuthenticationError) as raised,
    ):
        client.messages.create(
            model="any", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    return raised.value


async def test_an_official_sdk_with_a_wrong_toolref_key_is_told_the_header_and_the_fix(
    redis: Redis,
) -> None:
    """A plain `openai` client shows a 401 as "Error code: 401" and the `message` of the
    body's `error`, nothing else: the gateway's refusal carries its detail there too, naming
    `Toolref-Key`, what to send in it and `toolref-server keygen`; and its challenge is the
    header's, not a Bearer one (the client's Authorization is the provider's, and right)."""
    recorder = Recorder()
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    async with serve(recorder.app()) as upstream:
        settings = Settings(redis_url="unused", upstreams=f"rec={upstream}", api_keys=f"t={digest}")
        async with serve(create_app(settings, redis=redis)) as url:
            wrong = await asyncio.to_thread(_openai_refusal, f"{url}/llm/rec/v1", "trk_wrong")
            missing = await asyncio.to_thread(_openai_refusal, f"{url}/llm/rec/v1", None)
            claude = await asyncio.to_thread(_anthropic_refusal, f"{url}/llm/rec", "trk_wrong")
    for refusal in (wrong, missing, claude):
        text = str(refusal)
        assert text.startswith("Error code: 401 - ")
        for words in ("Toolref-Key", "`Toolref-Key: <key>`", "toolref-server keygen"):
            assert words in text, text
        challenge = refusal.response.headers["www-authenticate"]
        assert challenge.startswith('Toolref-Key realm="toolref"'), challenge
        assert 'error_description="send a toolref API key in the Toolref-Key header' in challenge
        problem = refusal.response.json()  # still an RFC 9457 problem for toolref's clients
        assert problem["type"] == "urn:toolref:problem:unauthorized"
        assert f"toolref gateway: {problem['detail']}" == problem["error"]["message"]
    assert "is not known to this toolref gateway" in str(wrong)
    assert 'error="invalid_token"' in wrong.response.headers["www-authenticate"]
    assert "no Toolref-Key header" in str(missing)
    assert recorder.requests == []  # refused before anything reached the upstream


async def _drain(client: httpx.AsyncClient, path: str) -> bytes:
    async with client.stream("POST", path, content=b"{}") as answer:
        return b"".join([piece async for piece in answer.aiter_raw()])


async def test_body_limits_hold_on_the_wire_and_once_inflated(redis: Redis) -> None:
    """The wire limit is checked as the body arrives, the inflated one after gzip/zstd, both
    before hydration: a refused request reaches no upstream and stores nothing."""
    recorder = Recorder()
    async with serve(recorder.app()) as upstream:
        settings = Settings(
            redis_url="unused",
            upstreams=f"rec={upstream}",
            max_body_bytes=4096,
            max_decompressed_bytes=65536,
        )
        async with (
            serve(create_app(settings, redis=redis)) as url,
            httpx.AsyncClient(base_url=url) as client,
        ):
            headers = {"content-type": "application/json", "toolref-protocol": "2"}
            text = '{"messages":[{"role":"user","content":"%s"}]}'
            big = (text % ("x" * 5000)).encode()
            bomb = gzip.compress((text % ("x" * 100_000)).encode())
            over_wire = await client.post("/llm/rec/v1/messages", content=big, headers=headers)
            over_inflated = await client.post(
                "/llm/rec/v1/messages",
                content=bomb,
                headers={**headers, "content-encoding": "gzip"},
            )
    assert len(bomb) < 4096
    assert over_wire.status_code == 413
    assert "4096" in over_wire.json()["detail"]
    assert over_inflated.status_code == 413
    assert "65536" in over_inflated.json()["detail"]
    assert recorder.requests == []
    # Nothing stored but the gateway's usage counters of the minute (two at a minute's
    # turn), which count the two requests as /metrics does.
    held = [keys.parse(name) for name in await key_names(redis)]
    assert 1 <= len(held) <= 2
    assert {(found.tenant, found.kind) for found in held if found} == {(LOCAL_TENANT, keys.USAGE)}


async def test_a_switched_conversation_reaches_the_new_upstream_with_its_tool_context(
    stack: Stack,
) -> None:
    """`Toolref-Switched-From` (the relay's `--switch`): ids mapped, opaque fields of the
    previous backend dropped, the handoff block in front; without it, the body as sent."""
    messages = [
        {"role": "user", "content": "read it"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "t", "signature": "SIG-OF-A"},
                {
                    "type": "tool_use",
                    "id": "fn.read:0",
                    "name": "Read",
                    "input": {"file_path": "/a"},
                },
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "fn.read:0", "content": "A-TEXT"}],
        },
        {"role": "user", "content": "go on"},
    ]
    body = json.dumps({"model": "m", "messages": messages}).encode()
    headers = {"content-type": "application/json", "toolref-protocol": "2"}
    async with httpx.AsyncClient(base_url=stack.gateway) as client:
        switched = await client.post(
            "/llm/rec/v1/messages",
            content=body,
            headers={**headers, "toolref-switched-from": "up; at=3"},
        )
        plain = await client.post("/llm/rec/v1/messages", content=body, headers=headers)
        # As the relay sends it after a 415 (no protocol 2, the body as it is): rewritten too.
        as_it_is = await client.post(
            "/llm/rec/v1/messages",
            content=body,
            headers={"content-type": "application/json", "toolref-switched-from": "up; at=3"},
        )
    assert switched.status_code == plain.status_code == as_it_is.status_code == 200
    assert stack.recorder.requests[2][3] == stack.recorder.requests[0][3]
    sent = json.loads(stack.recorder.requests[0][3])
    text = json.dumps(sent)
    assert "SIG-OF-A" not in text
    assert "fn.read:0" not in text
    assert "[CONTEXT FROM PREVIOUS SESSION]" in text
    assert "A-TEXT" in json.dumps(sent["messages"][0])
    # Without the header: the body as sent, up to the serializer's whitespace.
    assert json.dumps(json.loads(stack.recorder.requests[1][3])) == json.dumps(json.loads(body))
    assert int(switched.headers["toolref-savings"].split(",")[0].removeprefix("raw=")) == len(
        stack.recorder.requests[0][3]
    )


async def test_a_browser_page_on_another_origin_is_told_the_toolref_headers(stack: Stack) -> None:
    """A request with an `Origin` (a page on another origin, calling the gateway with
    `toolrefFetch`) is answered with its toolref headers named in
    `Access-Control-Expose-Headers`, after the upstream's own names: unexposed, the page
    read no `Toolref-History` and confirmed no edit. Never a CORS allow header (the
    upstream's to say); a request without an `Origin` gets none."""
    body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
    headers = {"content-type": "application/json", "toolref-protocol": "2"}
    async with httpx.AsyncClient(base_url=stack.gateway) as client:
        page = await client.post(
            "/llm/rec/v1/chat/completions",
            content=body,
            headers={**headers, "origin": "https://app.example"},
        )
        plain = await client.post("/llm/rec/v1/chat/completions", content=body, headers=headers)
    assert page.status_code == plain.status_code == 200
    named = {n.strip().lower() for n in page.headers["access-control-expose-headers"].split(",")}
    ours = {name for name in page.headers if name.startswith("toolref-")}
    assert ours
    assert ours <= named
    assert "access-control-allow-origin" not in page.headers
    assert "access-control-expose-headers" not in plain.headers
