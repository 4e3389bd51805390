"""A channel its receiver closes once idle (TOOLREF_CHANNEL_IDLE_SECONDS at the gateway,
`ToolRefMiddleware(channel_idle_seconds=...)`), over real sockets with the real sender
(`ChannelTransport`): the close (`frames.DRAINED`) is a clean one between turns, so the next
turn opens a new channel at once, nothing is reported, no back-off is started and no turn
fails, even on a channel whose only turn broke off (a close that said nothing of what was
read would count that channel as one that cannot be had). Before, the receiver had no idle
timeout: a client that opened channels and sent nothing held a connection each for ever.

A channel upgrade the gateway refuses 429 (the tenant's channels, TOOLREF_TENANT_CHANNELS)
is reported with the reason its problem+json names (`quota`); before, only "the upgrade was
answered 429"."""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field

import httpx
import pytest
from redis.asyncio import Redis

from tests.adversarial.gateway_wire import gateway
from tests.support.servers import serve
from tests.unit.test_channel_sides import Recording, refuse
from toolref.asgi.scope import Receive, Scope, Send
from toolref.receiving.channel_server import serve_channel
from toolref.sending.channel_link import Link
from toolref.sending.channel_transport import ChannelTransport
from toolref.websocket import channel as frames
from toolref.websocket.client import Closed
from toolref.websocket.driver import Socket, connect
from toolref.wire.endpoints import CHANNEL

_GUARD = 10.0  # seconds: a failure guard only
_IDLE = 0.2


@dataclass
class Receiver:
    """Channels closed once idle `_IDLE` s; a turn to `/broken` breaks off; over HTTP it
    answers `http`."""

    channels: int = 0
    http: list[bytes] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return
        if scope["type"] == "websocket":
            self.channels += 1
            await serve_channel(scope, receive, send, _answer, refuse=refuse, idle_seconds=_IDLE)
            return
        self.http.append((await receive()).get("body", b""))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"http"})


async def _answer(scope: Scope, receive: Receive, send: Send) -> None:
    await receive()
    if scope["path"] == "/broken":
        raise RuntimeError("the app failed")
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"channel"})


async def _sent(transport: ChannelTransport, url: str, path: str = "/v1/messages") -> bytes:
    request = httpx.Request("POST", url + path, content=b"{}")
    answer = await asyncio.wait_for(transport.handle_async_request(request), _GUARD)
    return b"".join([piece async for piece in answer.stream])


async def _closed_by_its_receiver(transport: ChannelTransport) -> Link:
    link = transport._link
    assert link is not None
    await asyncio.wait_for(asyncio.shield(link.reader), _GUARD)  # it read the close
    assert link.closed
    return link


@pytest.mark.parametrize("first", ["/v1/messages", "/broken"])
async def test_a_channel_its_receiver_closed_idle_is_opened_again_at_once(first: str) -> None:
    receiver, reports = Receiver(), list[str]()
    async with serve(receiver) as url:
        transport = ChannelTransport(
            httpx.AsyncHTTPTransport(), url, None, connect_timeout=_GUARD, report=reports.append
        )
        try:
            if first == "/broken":  # the channel's only turn broke: no answer ended on it
                with pytest.raises(httpx.RemoteProtocolError):
                    await _sent(transport, url, first)
            else:
                assert await _sent(transport, url, first) == b"channel"
            link = await _closed_by_its_receiver(transport)
            assert link.drained
            assert not link.failed  # no back-off
            assert await _sent(transport, url) == b"channel"  # a new channel, at once
            assert receiver.channels == 2
            assert receiver.http == []
            assert reports == []
        finally:
            await transport.aclose()


KEY_A, KEY_B = "idle-tenant-a", "idle-tenant-b"
KEYS = ",".join(
    f"{tenant}={hashlib.sha256(key.encode()).hexdigest()}"
    for tenant, key in (("a", KEY_A), ("b", KEY_B))
)


async def _channel(url: str) -> Socket:
    target = url.replace("http://", "ws://") + CHANNEL
    headers = [("Toolref-Key", KEY_A)]
    return await connect(target, headers, max_message=1 << 20, connect_timeout=_GUARD)


@pytest.mark.engine
async def test_the_gateway_closes_a_channel_idle_past_its_setting(redis: Redis) -> None:
    """One tenant: TOOLREF_TENANT_CHANNELS does not apply, only this bounds a channel."""
    one = f"a={hashlib.sha256(KEY_A.encode()).hexdigest()}"
    async with gateway(redis, api_keys=one, channel_idle_seconds=_IDLE) as url:
        socket = await _channel(url)
        closed = await asyncio.wait_for(socket.receive(), _GUARD)
    assert isinstance(closed, Closed)
    assert (closed.code, closed.reason) == frames.DRAINED


@pytest.mark.engine
async def test_a_channel_refused_past_the_tenants_share_is_reported_with_its_quota(
    redis: Redis,
) -> None:
    reports, inner = list[str](), Recording()
    async with gateway(redis, api_keys=KEYS, tenant_channels=1) as url:
        held = await _channel(url)  # the tenant's one channel
        transport = ChannelTransport(
            inner, url, KEY_A, connect_timeout=_GUARD, report=reports.append
        )
        try:
            request = httpx.Request("POST", url + "/llm/up/v1/messages", content=b"{}")
            answer = await asyncio.wait_for(transport.handle_async_request(request), _GUARD)
        finally:
            await transport.close_link()
            await held.close()
    assert answer.status_code == 200
    assert len(inner.sent) == 1  # over HTTP
    [line] = reports
    assert "(the upgrade was answered 429: quota-exceeded, quota channels)" in line, line
    assert json.dumps(line)  # one line
    assert "\n" not in line
