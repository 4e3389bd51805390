"""The gateway's WebSocket mode in a real `toolref-server serve` process: its HTTP layer
(deadlines on heads and bodies, the connection limit) hands an upgraded connection over to
the WebSocket protocol and lets it be. Before WebSocket mode the service answered every
upgrade with an error (`ws="none"`); with the upgrade served but the HTTP layer's deadlines
left armed, a socket quiet past TOOLREF_BODY_TIMEOUT would be cut with a problem written
into its stream."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.fake_provider import FakeProvider, Reply
from tests.support.servers import serve
from toolref.websocket.client import Message
from toolref.websocket.driver import Refusal, connect
from toolref.wire.headers import KEY_HEADER

from .wire import start_service

pytestmark = [pytest.mark.engine, pytest.mark.slow]

KEY = "process-ws-key"


def _model(api: str, body: dict[str, Any]) -> Reply:
    return Reply(text="ok", index=len(body["input"]))


def _turn(n: int) -> str:
    return json.dumps(
        {"type": "response.create", "model": "m", "input": [{"role": "user", "content": str(n)}]}
    )


async def _answered(socket: Any) -> list[str]:
    got = []
    while True:
        event = await asyncio.wait_for(socket.receive(), 10)
        assert isinstance(event, Message), event
        got.append(str(event.data))
        if json.loads(got[-1])["type"] == "response.completed":
            return got


def _open_gauge(url: str) -> int:
    text = httpx.get(url + "/metrics", timeout=5).text
    match = re.search(r"^toolref_connections_open (\S+)$", text, re.MULTILINE)
    assert match is not None
    return int(float(match[1]))


async def test_a_socket_outlives_the_http_deadlines_and_leaves_the_gauge(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    fake = FakeProvider(_model)
    async with serve(fake.app) as fake_url:
        service = await asyncio.to_thread(
            start_service,
            request,
            tmp_path / "data",
            TOOLREF_UPSTREAMS=f"fake={fake_url}",
            TOOLREF_API_KEYS=f"t={hashlib.sha256(KEY.encode()).hexdigest()}",
            TOOLREF_HEADER_TIMEOUT="0.5",
            TOOLREF_BODY_TIMEOUT="0.5",
        )
        try:
            url = service.url.replace("http://", "ws://") + "/llm/fake/v1/responses"
            socket = await connect(
                url, [(KEY_HEADER, KEY)], max_message=1 << 20, connect_timeout=10
            )
            await socket.send(_turn(1))
            first = await _answered(socket)
            await asyncio.sleep(1.5)  # three body deadlines
            await socket.send(_turn(2))
            second = await _answered(socket)
            await socket.close()
            assert [e.encode() for e in first + second] == fake.sockets[0].sent
            assert fake.sockets[0].received == [_turn(1).encode(), _turn(2).encode()]
            # Refusals still come as problems, on the HTTP layer's terms.
            with pytest.raises(Refusal) as refused:
                await connect(url, [(KEY_HEADER, "wrong")], max_message=10, connect_timeout=10)
            assert refused.value.status == 401
            assert json.loads(refused.value.body)["type"].endswith("unauthorized")
            # The upgraded connections left the open-connection gauge (the scrape's own is
            # the one open).
            await asyncio.wait_for(fake.sockets[0].ended.wait(), 10)
            assert await asyncio.to_thread(_open_gauge, service.url) == 1
        finally:
            await asyncio.to_thread(service.stop)
