"""A chat backend's clients speak edits (issue 38): the SDK (`ToolReferenceManager`,
`toolref.Transport` with the official SDKs) -> `ToolRefMiddleware` -> the registry's
`POST /v1/edits:apply`, on the test engine.

Each turn the app receives exactly the bytes the client's own SDK would have sent (its body
byte for byte; its headers, credentials filled by the middleware from the request's own);
from the second request on the client sends edits (negotiated: `Toolref-Edits`); a
registry emptied mid-conversation, or another middleware process, costs one resend and
nothing else; an edit the backend cannot apply (its registry unreachable) is sent as it is.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from toolref import (
    AsyncRegistryClient,
    AsyncTransport,
    CircuitBreaker,
    ToolReferenceManager,
    ToolRefMiddleware,
)
from toolref.edits.wire import MEDIA_TYPE
from toolref.registry.port import HttpRegistry
from toolref.wire.errors import StoreUnavailableError
from toolref_server.app import create_app
from toolref_server.settings import Settings

pytestmark = pytest.mark.engine


@dataclass
class Seen:
    """What the app received: each request's headers (lowercased names) and body."""

    bodies: list[bytes] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)


def app(seen: Seen) -> Starlette:
    async def chat(request: Request) -> Response:
        seen.bodies.append(await request.body())
        seen.headers.append({k.lower(): v for k, v in request.headers.items()})
        return JSONResponse({"reply": f"turn {len(seen.bodies)}"})

    async def stream(request: Request) -> Response:
        seen.bodies.append(await request.body())
        seen.headers.append({k.lower(): v for k, v in request.headers.items()})

        async def chunks() -> AsyncIterator[bytes]:
            for n in range(3):
                yield f"data: {n}\n\n".encode()

        return StreamingResponse(chunks(), media_type="text/event-stream")

    return Starlette(
        routes=[
            Route("/chat", chat, methods=["POST"]),
            Route("/v1/chat/completions", chat, methods=["POST"]),  # an LLM API's path
            Route("/stream", stream, methods=["POST"]),
        ]
    )


@asynccontextmanager
async def backend(redis: Redis, seen: Seen) -> AsyncIterator[tuple[httpx.AsyncClient, Starlette]]:
    # No edit cache: every turn read from the store, as another replica would.
    service = create_app(Settings(redis_url="unused", edit_cache_bytes=0), redis=redis)
    async with service.router.lifespan_context(service):
        registry = AsyncRegistryClient(
            "http://localhost:8750",
            transport=httpx.ASGITransport(app=service),
            retries=0,
            breaker=CircuitBreaker(failure_threshold=100),
        )
        wrapped = ToolRefMiddleware(app(seen), registry)
        transport = httpx.ASGITransport(app=wrapped)
        async with httpx.AsyncClient(transport=transport, base_url="http://backend") as http:
            yield http, service


def turns(count: int) -> list[dict[str, Any]]:
    """A growing conversation, tool results of a few KB, as an app keeps it."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You read files. " * 40}]
    bodies = []
    for n in range(count):
        messages.append({"role": "user", "content": f"read file {n}, then tell me"})
        bodies.append({"model": "m", "messages": list(messages)})
        call: dict[str, Any] = {"id": f"c{n}", "type": "function"}
        call["function"] = {"name": "read", "arguments": json.dumps({"path": f"src/{n}.py"})}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        content = "".join(f"line {i} of file {n}: value = {i * n}\n" for i in range(120))
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": content})
    return bodies


def sdk_bytes(body: dict[str, Any]) -> bytes:
    """What `httpx` sends for `json=body` (what the app would have received without toolref)."""
    return httpx.Request("POST", "http://x", json=body).content


async def test_each_turn_reaches_the_app_exactly_and_later_turns_are_edits(redis: Redis) -> None:
    seen = Seen()
    manager = ToolReferenceManager()
    sent: list[int] = []
    async with backend(redis, seen) as (http, _):
        for body in turns(12):
            before = manager.savings.sent_bytes
            answer = await manager.apost(
                http, "/chat", json=body, headers={"Authorization": "Bearer app-session"}
            )
            assert answer.status_code == 200, answer.text
            sent.append(manager.savings.sent_bytes - before)
    assert seen.bodies == [sdk_bytes(body) for body in turns(12)]
    for headers in seen.headers:
        assert headers["authorization"] == "Bearer app-session"
        assert headers["content-type"] == "application/json"
        assert not any(name.startswith("toolref-") for name in headers)
    savings = manager.savings
    assert savings.requests == 12
    assert savings.edits == 11  # the first offered edits; every later one was one
    assert savings.resends == 0
    raw = [len(sdk_bytes(body)) for body in turns(12)]
    assert all(s * 5 < r for s, r in zip(sent[4:], raw[4:], strict=True)), (sent, raw)


async def test_a_registry_emptied_mid_conversation_costs_one_resend(redis: Redis) -> None:
    seen = Seen()
    manager = ToolReferenceManager()
    bodies = turns(6)
    async with backend(redis, seen) as (http, _):
        for n, body in enumerate(bodies):
            if n == 4:
                await redis.flushall()
            answer = await manager.apost(http, "/chat", json=body)
            assert answer.status_code == 200, answer.text
    assert seen.bodies == [sdk_bytes(body) for body in bodies]
    assert manager.savings.resends == 1


async def test_a_recipe_the_registry_could_not_keep_costs_the_next_turn_one_resend(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """The registry keeps a recipe while its answer goes out: a keep that fails (the store
    gone for a moment) costs that turn nothing, is logged, and costs the next one a resend."""
    seen = Seen()
    manager = ToolReferenceManager()
    bodies = turns(6)
    async with backend(redis, seen) as (http, service):
        recipes = service.state.services.recipes
        keep = recipes.keep

        async def fails_once(*args: Any, **kwargs: Any) -> Any:
            recipes.keep = keep
            raise StoreUnavailableError("the store went away for a moment")

        for n, body in enumerate(bodies):
            if n == 3:
                recipes.keep = fails_once
            answer = await manager.apost(http, "/chat", json=body)
            assert answer.status_code == 200, answer.text
    assert seen.bodies == [sdk_bytes(body) for body in bodies]
    assert manager.savings.resends == 1
    assert manager.savings.edits == 5
    assert any("not kept" in r.getMessage() for r in caplog.records if r.name == "toolref.edits")


async def test_a_streamed_answer_stays_a_stream(redis: Redis) -> None:
    seen = Seen()
    manager = ToolReferenceManager()
    async with backend(redis, seen) as (http, _):
        for body in turns(3):
            async with manager.astream(http, "POST", "/stream", json=body) as answer:
                assert answer.status_code == 200
                assert answer.headers["content-type"].startswith("text/event-stream")
                chunks = [chunk async for chunk in answer.aiter_bytes()]
            assert b"".join(chunks) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    assert seen.bodies == [sdk_bytes(body) for body in turns(3)]
    assert manager.savings.edits == 2


async def test_an_edit_the_backend_cannot_apply_is_sent_as_it_is(redis: Redis) -> None:
    """The backend's registry goes away: its middleware answers an edit 415, and the client
    sends the request as it is; the app still receives every turn exactly."""
    seen = Seen()
    manager = ToolReferenceManager()
    bodies = turns(4)
    down = AsyncRegistryClient("http://127.0.0.1:9", retries=0)
    wrapped = ToolRefMiddleware(app(seen), down)
    async with backend(redis, seen) as (http, _):
        for body in bodies[:2]:
            assert (await manager.apost(http, "/chat", json=body)).status_code == 200
    transport = httpx.ASGITransport(app=wrapped)
    async with httpx.AsyncClient(transport=transport, base_url="http://backend") as elsewhere:
        answer = await manager.apost(elsewhere, "/chat", json=bodies[2])
    assert answer.status_code == 200, answer.text
    assert seen.bodies == [sdk_bytes(body) for body in bodies[:3]]


async def test_an_edit_refused_for_good_is_a_415_and_the_client_sends_it_whole(
    redis: Redis,
) -> None:
    """An edit the registry refuses with no resend to follow (here one of a version it
    does not read; as for one over a limit): the client would fail every turn, so the
    middleware answers 415, and the same request sent as it is reaches the app."""
    seen = Seen()
    async with backend(redis, seen) as (http, _):
        refused = await http.post(
            "/chat", content=b'{"v":99}\n', headers={"content-type": MEDIA_TYPE}
        )
        assert refused.status_code == 415, refused.text
        assert "send the request as it is" in refused.json()["detail"]
        manager = ToolReferenceManager()
        body = turns(1)[0]
        assert (await manager.apost(http, "/chat", json=body)).status_code == 200
    assert seen.bodies == [sdk_bytes(body)]


class OlderRegistry(HttpRegistry):
    """The test's registry as a release that applies edits up to `version` says (0: none)."""

    def __init__(self, client: AsyncRegistryClient, version: int) -> None:
        super().__init__(client)
        self.version = version

    async def edits(self) -> int:
        return self.version


@pytest.mark.parametrize("version", [3, 0])
async def test_the_backend_tells_clients_the_edits_its_registry_applies(
    redis: Redis, version: int
) -> None:
    """`Toolref-Edits` says the lower of the middleware's version and its registry's: a
    client then writes only edits the registry reads (version 3: JSON headers, not the
    compact ones of 4), and none where it applies none; every turn reaches the app."""
    seen, written = Seen(), []
    service = create_app(Settings(redis_url="unused"), redis=redis)
    async with service.router.lifespan_context(service):
        client = AsyncRegistryClient(
            "http://localhost:8750", transport=httpx.ASGITransport(app=service)
        )
        wrapped = ToolRefMiddleware(app(seen), OlderRegistry(client, version))

        async def recorded(scope: Any, receive: Any, send: Any) -> None:
            async def given() -> Any:
                message = await receive()
                if scope["type"] == "http" and message.get("body"):
                    written.append(message["body"][:1])
                return message

            await wrapped(scope, given, send)

        manager = ToolReferenceManager()
        told = []
        transport = httpx.ASGITransport(app=recorded)
        async with httpx.AsyncClient(transport=transport, base_url="http://backend") as http:
            for body in turns(4):
                answer = await manager.apost(http, "/chat", json=body)
                assert answer.status_code == 200, answer.text
                told.append(answer.headers.get("toolref-edits"))
        await client.aclose()
    assert seen.bodies == [sdk_bytes(body) for body in turns(4)]
    assert manager.savings.resends == 0
    if version:
        assert told == [str(version)] * 4
        assert manager.savings.edits == 3
        assert written[1:] == [b"{"] * 3  # JSON headers: no compact edit (its first byte 4)
    else:
        assert told == [None] * 4
        assert manager.savings.edits == 0


async def test_an_app_that_raises_on_a_restored_edit_runs_once(redis: Redis) -> None:
    """The middleware inside Starlette's own error handling (`add_middleware`, as apps add
    it): a route that raises on a restored edit is answered 500 once, marked as this
    backend's answer, and the exception still reaches the server. Unmarked, the client took
    the server's 500 for a backend that no longer reads edits and sent the request again as
    it is: the route ran twice (two model calls, where it calls one)."""
    runs: list[int] = []
    service = create_app(Settings(redis_url="unused"), redis=redis)
    async with service.router.lifespan_context(service):
        client = AsyncRegistryClient(
            "http://localhost:8750", transport=httpx.ASGITransport(app=service)
        )

        async def chat(request: Request) -> Response:
            runs.append(len(await request.body()))
            if len(runs) > 1:
                raise RuntimeError("the model call failed")
            return JSONResponse({"reply": "ok"})

        backend_app = Starlette(
            routes=[Route("/chat", chat, methods=["POST"])],
            middleware=[Middleware(ToolRefMiddleware, registry=client)],
        )
        transport = httpx.ASGITransport(app=backend_app, raise_app_exceptions=False)
        manager = ToolReferenceManager()
        async with httpx.AsyncClient(transport=transport, base_url="http://backend") as http:
            first, second = turns(2)
            assert (await manager.apost(http, "/chat", json=first)).status_code == 200
            failed = await manager.apost(http, "/chat", json=second)
        await client.aclose()
    assert failed.status_code == 500
    assert "toolref-history" in failed.headers  # this backend's answer, not a stranger's
    assert "it was not sent again" in failed.json()["detail"]
    assert runs == [len(sdk_bytes(first)), len(sdk_bytes(second))]  # each turn ran once
    assert manager.savings.edits == 1


async def test_a_header_in_utf_8_reaches_the_app_byte_for_byte(redis: Redis) -> None:
    """An app's header whose value is UTF-8 (`x-title: café`), through `AsyncTransport`:
    as it came and in every edit, the app gets its bytes (httpx's guess of an encoding,
    then ASCII, refused it or wrote `caf\\xe9`)."""
    seen = Seen()
    bodies = turns(3)
    service = create_app(Settings(redis_url="unused"), redis=redis)
    async with service.router.lifespan_context(service):
        registry = AsyncRegistryClient(
            "http://localhost:8750", transport=httpx.ASGITransport(app=service), retries=0
        )
        wrapped = ToolRefMiddleware(app(seen), registry)
        sdk = AsyncTransport(httpx.ASGITransport(app=wrapped), channel=False)
        async with httpx.AsyncClient(transport=sdk, base_url="http://backend") as http:
            for body in bodies:
                answer = await http.post(
                    "/v1/chat/completions",
                    content=json.dumps(body).encode(),
                    headers=[
                        (b"content-type", b"application/json"),
                        (b"x-title", "café ☕".encode()),
                    ],
                )
                assert answer.status_code == 200, answer.text
    assert seen.bodies == [json.dumps(body).encode() for body in bodies]
    sent = "café ☕".encode().decode("latin-1")  # as Starlette reads header bytes
    assert [h["x-title"] for h in seen.headers] == [sent] * len(bodies)


async def test_a_lone_surrogate_in_a_conversation_is_sent_as_the_js_sdk_sends_it(
    redis: Redis,
) -> None:
    """A conversation read from valid JSON holding a lone surrogate escape (`"\\ud800"`,
    a model's answer cut mid-emoji): `json.loads` keeps it lone, and `post(json=...)`
    refused the body (a `ValidationError` whose advice, `json.loads(your_dumps(body))`,
    gave the same value). It goes as `JSON.stringify` writes it, the TypeScript manager's
    bytes: the surrogate as its escape, everything else as before; every turn reaches the
    app so, later ones as edits."""
    seen = Seen()
    manager = ToolReferenceManager()
    odd = json.loads('"cut \\ud83d| \\udc00x \\ud83d\\ude00 \\u00e9"')
    bodies, wanted = turns(4), []
    for body in bodies:
        said = {"role": "user", "content": "ODD", "ODD": 1}
        wanted.append(sdk_bytes({**body, "messages": [*body["messages"], said]}))
        body["messages"] = [*body["messages"], {"role": "user", "content": odd, odd: 1}]
    async with backend(redis, seen) as (http, _):
        for body in bodies:
            answer = await manager.apost(http, "/chat", json=body)
            assert answer.status_code == 200, answer.text
    escaped = '"cut \\ud83d| \\udc00x 😀 é"'.encode()  # JSON.stringify's, the pair raw
    assert seen.bodies == [body.replace(b'"ODD"', escaped) for body in wanted]
    assert manager.savings.edits == 3


async def test_a_backend_that_stops_reading_edits_gets_requests_as_they_are(
    redis: Redis,
) -> None:
    """The backend is rolled back (its middleware gone) mid-conversation: its app refuses
    the edit it cannot read (a 400 naming no recipe), and the client sends the request as
    it is, then every later one, without edits: no turn fails, and none goes as an edit."""
    seen, plain_seen = Seen(), Seen()
    manager = ToolReferenceManager()
    bodies = turns(5)

    async def strict(request: Request) -> Response:  # as FastAPI answers a body it can't parse
        data = await request.body()
        try:
            json.loads(data)
        except ValueError:
            return JSONResponse({"detail": "invalid JSON"}, status_code=400)
        plain_seen.bodies.append(data)
        return JSONResponse({"ok": True})

    rolled_back = Starlette(routes=[Route("/chat", strict, methods=["POST"])])
    async with backend(redis, seen) as (http, _):
        for body in bodies[:3]:
            assert (await manager.apost(http, "/chat", json=body)).status_code == 200
    transport = httpx.ASGITransport(app=rolled_back)
    async with httpx.AsyncClient(transport=transport, base_url="http://backend") as rolled:
        for body in bodies[3:]:
            answer = await manager.apost(rolled, "/chat", json=body)
            assert answer.status_code == 200, answer.text
    assert plain_seen.bodies == [sdk_bytes(body) for body in bodies[3:]]


async def test_a_plain_client_is_passed_through_untouched(redis: Redis) -> None:
    """A client that neither offers nor sends edits: the app gets its request as it came,
    and the answer says nothing of edits."""
    seen = Seen()
    async with backend(redis, seen) as (http, _):
        body = b'{"messages": [ {"role":"user","content":"hi"} ],"x":1.0}'
        answer = await http.post(
            "/chat", content=body, headers={"content-type": "application/json"}
        )
    assert seen.bodies == [body]
    assert "toolref-edits" not in answer.headers


async def test_an_edit_for_a_base_no_registry_holds_is_a_409_the_client_recovers_from(
    redis: Redis,
) -> None:
    seen = Seen()
    manager = ToolReferenceManager()
    bodies = turns(3)
    async with backend(redis, seen) as (http, _):
        assert (await manager.apost(http, "/chat", json=bodies[0])).status_code == 200
        assert (await manager.apost(http, "/chat", json=bodies[1])).status_code == 200
    async with backend(redis, seen) as (http, _):  # another process, the engine emptied
        await redis.flushall()
        raw = sdk_bytes(bodies[2])
        answer = await http.post(
            "/chat",
            content=b'{"v":2,"b":"tb_aaaaaaaaaaaaaaaaaaaaaaaaaa","o":[[0,3]],"n":0}\n',
            headers={"content-type": MEDIA_TYPE},
        )
        assert answer.status_code == 409
        assert answer.json()["type"].endswith("missing-history")
        assert (await manager.apost(http, "/chat", json=bodies[2])).status_code == 200
    assert seen.bodies[-1] == raw


async def test_a_registry_that_refuses_the_backend_costs_one_extra_request_then_none(
    redis: Redis,
) -> None:
    """The registry refuses the backend's key (a misconfigured deployment): the first edit
    is answered 415 and resent as it is; the client then pauses its edits to the endpoint
    (`toolref.sending.pause`), so every later turn is one plain request (not an edit refused
    each turn), and the app receives every turn exactly."""
    seen = Seen()
    manager = ToolReferenceManager()
    bodies = turns(5)
    key_hash = hashlib.sha256(b"the-right-key").hexdigest()
    guarded = create_app(Settings(redis_url="unused", api_keys=f"t={key_hash}"), redis=redis)
    async with guarded.router.lifespan_context(guarded):
        registry = AsyncRegistryClient(
            "http://localhost:8750",
            api_key="a-wrong-key",
            transport=httpx.ASGITransport(app=guarded),
        )
        wrapped = ToolRefMiddleware(app(seen), registry)
        sent: list[str] = []

        async def counted(request: httpx.Request) -> None:
            sent.append(request.headers.get("content-type", ""))

        transport = httpx.ASGITransport(app=wrapped)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://backend", event_hooks={"request": [counted]}
        ) as http:
            answers = [await manager.apost(http, "/chat", json=body) for body in bodies]
    assert [a.status_code for a in answers] == [200] * 5
    assert seen.bodies == [sdk_bytes(body) for body in bodies]
    # turn 1 plain (offering), turn 2 an edit refused then resent plain, then plain only
    assert sent == ["application/json", MEDIA_TYPE] + ["application/json"] * 4
    assert manager.savings.edits == 0  # the one refused 415 and sent as it is is no edit


class Answered(httpx.AsyncBaseTransport):
    """The middleware's transport to the registry, counting the bytes of each answer to an
    edit (`POST /v1/edits:apply`)."""

    def __init__(self, app: Starlette) -> None:
        self.inner = httpx.ASGITransport(app=app)
        self.sizes: list[int] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        content = await response.aread()
        if request.url.path == "/v1/edits:apply":
            self.sizes.append(len(content))
        return httpx.Response(
            response.status_code, headers=response.headers, content=content, request=request
        )


@pytest.mark.parametrize("held_bytes", [64 * 2**20, 0])
async def test_the_registry_answers_a_held_base_with_what_changed(
    redis: Redis, held_bytes: int
) -> None:
    """The middleware holds the requests it restored: the registry answers the next edit of
    the conversation with ranges of it and what changed (the answer stays the size of a
    turn as the conversation grows); holding nothing, each answer is the whole request.
    Either way the app gets every turn exactly; a second middleware (another process,
    holding nothing) is answered whole, and then holds it."""
    seen = Seen()
    manager = ToolReferenceManager()
    bodies = turns(10)
    service = create_app(Settings(redis_url="unused"), redis=redis)
    async with service.router.lifespan_context(service):
        answered = Answered(service)
        registry = AsyncRegistryClient("http://localhost:8750", transport=answered)
        wrapped = ToolRefMiddleware(app(seen), registry, held_bytes=held_bytes)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=wrapped), base_url="http://backend"
        ) as http:
            for body in bodies[:8]:
                assert (await manager.apost(http, "/chat", json=body)).status_code == 200
        other = Answered(service)
        elsewhere = ToolRefMiddleware(
            app(seen), AsyncRegistryClient("http://localhost:8750", transport=other)
        )
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=elsewhere), base_url="http://backend"
        ) as http:
            for body in bodies[8:]:
                assert (await manager.apost(http, "/chat", json=body)).status_code == 200
    assert seen.bodies == [sdk_bytes(body) for body in bodies]
    raw = [len(sdk_bytes(body)) for body in bodies]
    assert len(answered.sizes) == 7  # turns 2 to 8: the first went as it is
    edited = answered.sizes[1:]  # turns 3 to 8, each an edit of the one before
    assert raw[7] > 3 * raw[2]  # the conversation grew
    if held_bytes:  # a turn's new messages (about 4 KB here), however long the conversation
        assert max(edited) < 1.2 * min(edited)
        assert edited[-1] * 5 < raw[7]
    else:
        assert all(size >= body for size, body in zip(edited, raw[2:8], strict=True))
    assert other.sizes[0] >= raw[8]  # another process: the whole request, once
    assert other.sizes[1] * 5 < raw[9]  # then it holds the base
