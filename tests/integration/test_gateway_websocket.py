"""The gateway's WebSocket mode: `/llm/{name}/v1/responses` upgraded, joined to the fake
provider's Responses WebSocket. Real sockets throughout: the service on the test engine,
the fake provider under uvicorn, the client `toolref.websocket` (what the relay runs).
Each test fails on the code before WebSocket mode: the gateway refused every upgrade."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket as sockets
from typing import Any
from urllib.parse import urlsplit

import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import Scope
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.integration.relay_gateway import KEY, gateway
from tests.support.fake_provider import FakeProvider, Reply
from toolref.websocket.client import Closed, Message
from toolref.websocket.driver import Refusal, Socket, connect
from toolref.websocket.frames import Encoder
from toolref.wire.headers import FRAMES_HEADER, KEY_HEADER

TOOLS = [
    {"type": "function", "name": f"tool_{i}", "description": "d" * 200, "parameters": {}}
    for i in range(20)
]


def _model(api: str, body: dict[str, Any]) -> Reply:
    return Reply(text=f"seen {len(body['input'])} items", index=len(body["input"]))


def create(n: int, previous: str | None = None, **more: Any) -> str:
    """A `response.create` as an agent writes it (spaced, its own number spelling)."""
    event: dict[str, Any] = {"type": "response.create", "model": "m", "tools": TOOLS}
    event["input"] = [{"role": "user", "content": f"turn {n}"}]
    if previous is not None:
        event["previous_response_id"] = previous
    event.update(more)
    return json.dumps(event, indent=2).replace('"turn', '"turn\\u0020')


async def open_socket(url: str, *headers: tuple[str, str], max_message: int = 1 << 20) -> Socket:
    return await connect(
        url.replace("http://", "ws://") + "/llm/fake/v1/responses",
        [(KEY_HEADER, KEY), ("Authorization", "Bearer sk-agent"), *headers],
        max_message=max_message,
        connect_timeout=10,
    )


async def events_until_done(socket: Socket) -> list[str]:
    got: list[str] = []
    while True:
        event = await asyncio.wait_for(socket.receive(), 10)
        assert isinstance(event, Message), event
        assert isinstance(event.data, str)
        got.append(event.data)
        if json.loads(event.data)["type"] in ("response.completed", "error"):
            return got


def response_id(events: list[str]) -> str:
    return str(json.loads(events[-1])["response"]["id"])


async def test_frames_reach_the_provider_exactly_and_events_come_back_exactly(
    redis: Redis,
) -> None:
    fake = FakeProvider(_model)
    async with gateway(redis, {"fake": fake.app}) as service:
        socket = await open_socket(service.url, ("OpenAI-Beta", "responses_websockets=2026-02-06"))
        sent, received = [], []
        prewarm = create(0, generate=False)
        await socket.send(prewarm)
        sent.append(prewarm)
        received += await events_until_done(socket)
        previous = response_id(received)
        for n in range(1, 4):
            frame = create(n, previous)
            await socket.send(frame)
            sent.append(frame)
            turn = await events_until_done(socket)
            received += turn
            previous = response_id(turn)
        await socket.close()
    [log] = fake.sockets
    assert log.received == [s.encode() for s in sent]  # byte for byte, in order
    assert [r.encode() for r in received] == log.sent  # every event, exact, in order
    # The provider continued its own responses: turn 3 saw the prewarm's item and 3 turns'.
    assert json.loads(received[-1])["response"]["output"][0]["content"][0]["text"] == (
        "seen 6 items"
    )
    headers = {k.lower(): v for k, v in log.headers}
    assert headers["authorization"] == "Bearer sk-agent"
    assert headers["openai-beta"] == "responses_websockets=2026-02-06"
    assert not any(k.startswith("toolref-") for k in headers)


async def test_compressed_frames_are_restored_to_the_agents_bytes(redis: Redis) -> None:
    """With `Toolref-Frames: 1` (the relay's) each text message travels compressed against
    the one before it; the provider still receives the agent's exact bytes."""
    fake = FakeProvider(_model)
    encoder = Encoder()
    async with gateway(redis, {"fake": fake.app}) as service:
        socket = await open_socket(service.url, (FRAMES_HEADER, "1"))
        sent, wire, previous = [], 0, None
        for n in range(4):
            frame = create(n, previous)
            packed = encoder.encode(frame)
            wire += len(packed) if isinstance(packed, bytes) else len(packed.encode())
            await socket.send(packed)
            sent.append(frame.encode())
            previous = response_id(await events_until_done(socket))
        await socket.close()
    assert fake.sockets[0].received == sent
    assert wire * 4 < sum(len(s) for s in sent)


async def test_an_upstream_without_websockets_is_answered_426(redis: Redis) -> None:
    fake = FakeProvider(_model, websockets=False)
    async with gateway(redis, {"fake": fake.app}) as service:
        with pytest.raises(Refusal) as refused:
            await open_socket(service.url)
    assert refused.value.status == 426
    problem = json.loads(refused.value.body)
    assert problem["type"].endswith("websocket-unavailable")
    assert "fake" in problem["detail"]


async def test_refusals_before_the_upstream_is_asked(redis: Redis) -> None:
    fake = FakeProvider(_model)
    async with gateway(redis, {"fake": fake.app}) as service:
        base = service.url.replace("http://", "ws://")
        cases = {
            401: (base + "/llm/fake/v1/responses", [(KEY_HEADER, "wrong")]),
            404: (base + "/llm/nowhere/v1/responses", [(KEY_HEADER, KEY)]),
            400: (base + "/llm/fake/%2e%2e/v1/responses", [(KEY_HEADER, KEY)]),
        }
        for status, (url, headers) in cases.items():
            with pytest.raises(Refusal) as refused:
                await connect(url, headers, max_message=1000, connect_timeout=10)
            assert refused.value.status == status, refused.value.body
    assert fake.sockets == []


async def test_a_message_over_the_limit_closes_with_1009(redis: Redis) -> None:
    fake = FakeProvider(_model)
    async with gateway(redis, {"fake": fake.app}, gateway_ws_max_message_bytes=4096) as service:
        socket = await open_socket(service.url)
        await socket.send("x" * 5000)
        closed = await asyncio.wait_for(socket.receive(), 10)
    assert isinstance(closed, Closed)
    assert closed.code == 1009
    assert fake.sockets[0].received == []  # nothing of it reached the provider
    await asyncio.wait_for(fake.sockets[0].ended.wait(), 10)


async def test_the_client_leaving_mid_answer_closes_the_upstream_socket(redis: Redis) -> None:
    fake = FakeProvider(_model, delay=0.05)
    async with gateway(redis, {"fake": fake.app}) as service:
        socket = await open_socket(service.url)
        await socket.send(create(0))
        first = await asyncio.wait_for(socket.receive(), 10)
        assert isinstance(first, Message)
        socket.abort()  # gone, no close frame
        await asyncio.wait_for(fake.sockets[0].ended.wait(), 10)
    log = fake.sockets[0]
    assert log.closed is not None
    events = [json.loads(e)["type"] for e in log.sent]
    assert "response.completed" not in events  # the stream was cut, not run to its end


async def test_an_idle_socket_is_closed_with_1001(redis: Redis) -> None:
    fake = FakeProvider(_model)
    async with gateway(redis, {"fake": fake.app}, gateway_ws_idle_timeout=0.3) as service:
        socket = await open_socket(service.url)
        closed = await asyncio.wait_for(socket.receive(), 10)
    assert isinstance(closed, Closed)
    assert closed.code == 1001
    assert "no message" in closed.reason


async def test_an_open_socket_holds_one_of_the_tenants_gateway_slots(redis: Redis) -> None:
    fake = FakeProvider(_model)
    async with gateway(redis, {"fake": fake.app}, gateway_tenant_requests_in_flight=1) as service:
        held = await open_socket(service.url)
        with pytest.raises(Refusal) as refused:
            await open_socket(service.url)
        assert refused.value.status == 429
        assert json.loads(refused.value.body)["quota"] == "gatewayRequestsInFlight"
        await held.close()
        await asyncio.wait_for(fake.sockets[0].ended.wait(), 10)
        for _ in range(100):  # the slot comes back once the gateway saw the close
            try:
                again = await open_socket(service.url)
                break
            except Refusal:
                await asyncio.sleep(0.05)
        else:
            raise AssertionError("the slot never came back")
        await again.close()
    assert len(fake.sockets) == 2


async def raw_upgrade(url: str, path: str, *, receive_buffer: int) -> sockets.socket:
    """A client that upgrades to a WebSocket at `path` (with the tenant's key), its receive
    window `receive_buffer` bytes, and reads nothing after the 101: what no WebSocket
    library does."""
    parts = urlsplit(url)
    sock = sockets.socket()
    sock.setsockopt(sockets.SOL_SOCKET, sockets.SO_RCVBUF, receive_buffer)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, (parts.hostname, parts.port))
    head = (
        f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        f"Sec-WebSocket-Version: 13\r\n{KEY_HEADER}: {KEY}\r\n\r\n"
    )
    await loop.sock_sendall(sock, head.encode())
    answer = b""
    while b"\r\n\r\n" not in answer:  # the 101 alone: nothing comes before a message
        answer += await asyncio.wait_for(loop.sock_recv(sock, 1), 10)
    assert answer.startswith(b"HTTP/1.1 101"), answer
    return sock


def masked_text(text: str) -> bytes:
    """One text frame as a client sends it (masked, with a key of zeros: the bytes as they
    are)."""
    data = text.encode()
    assert len(data) < 126
    return bytes([0x81, 0x80 | len(data)]) + b"\0\0\0\0" + data


async def test_a_client_that_reads_nothing_gives_its_slot_back_after_the_idle_limit(
    redis: Redis,
) -> None:
    """The upstream streams more than the client's window holds and the client reads
    nothing: the idle limit ends the socket, and its close must not wait on that client for
    ever, holding the tenant's gateway slot (the tenant's next socket refused 429)."""
    flooding = asyncio.Event()

    async def flood(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.receive_text()
        flooding.set()
        try:
            for _ in range(64):
                await websocket.send_bytes(b"x" * (1 << 20))
            await websocket.receive_text()
        except (WebSocketDisconnect, RuntimeError, OSError):
            return

    upstream = Starlette(routes=[WebSocketRoute("/v1/flood", flood)])
    async with gateway(
        redis,
        {"flood": upstream},
        gateway_tenant_requests_in_flight=1,
        gateway_ws_idle_timeout=0.5,
    ) as service:
        stalled = await raw_upgrade(service.url, "/llm/flood/v1/flood", receive_buffer=4096)
        try:
            await asyncio.get_running_loop().sock_sendall(stalled, masked_text("go"))
            await asyncio.wait_for(flooding.wait(), 10)
            base = service.url.replace("http://", "ws://")
            for _ in range(300):  # the slot comes back once the stalled socket is let go
                try:
                    again = await connect(
                        base + "/llm/flood/v1/flood",
                        [(KEY_HEADER, KEY)],
                        max_message=1 << 21,
                        connect_timeout=10,
                    )
                    break
                except Refusal as exc:
                    if exc.status != 429:
                        raise
                    await asyncio.sleep(0.1)
            else:
                raise AssertionError("the stalled socket held the tenant's slot")
            again.abort()
        finally:
            stalled.close()


class Targets:
    """An upstream that keeps the target of every request that reaches it as it came on
    its wire (raw path and query), over HTTP and WebSocket alike."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes]] = []

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/{rest:path}", self._http, methods=["GET"]),
                WebSocketRoute("/v1/{rest:path}", self._socket),
            ]
        )

    def _kept(self, scope: Scope) -> None:
        query = scope.get("query_string", b"")
        self.seen.append((scope["type"], scope["raw_path"] + (b"?" + query if query else b"")))

    async def _http(self, request: Request) -> Response:
        self._kept(request.scope)
        return Response(b"ok")

    async def _socket(self, websocket: WebSocket) -> None:
        self._kept(websocket.scope)
        await websocket.accept()
        with contextlib.suppress(WebSocketDisconnect):
            await websocket.receive_text()


async def raw_get(url: str, path: str) -> bytes:
    """A plain `GET path` with the tenant's key, the target as it is (no client library
    sends a `#` on): the answer's status line."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n{KEY_HEADER}: {KEY}\r\n"
        "Connection: close\r\n\r\n".encode()
    )
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer.split(b"\r\n", 1)[0]


@pytest.mark.parametrize("tail", ["/v1/responses?a=1#x", "/v1/a#b?c=1", "/v1/a?b#c?d"])
async def test_a_socket_target_with_a_hash_reaches_the_upstream_as_over_http(
    redis: Redis, tail: str
) -> None:
    """A `#` in the target (the server takes it: it is no fragment on the wire): the HTTP
    forwarder sends the target as it came, and so must the socket (its client parsed the
    upstream's URL, dropping `#x`, or the query after a `#` in the path)."""
    targets = Targets()
    async with gateway(redis, {"echo": targets.app()}) as service:
        assert await raw_get(service.url, f"/llm/echo{tail}") == b"HTTP/1.1 200 OK"
        stalled = await raw_upgrade(service.url, f"/llm/echo{tail}", receive_buffer=1 << 16)
        stalled.close()
    assert targets.seen == [("http", tail.encode()), ("websocket", tail.encode())]
