"""A rolling deploy under the relay's channel: `toolref-server serve` (a real process) is
stopped (SIGTERM) while a streamed turn is in flight on the relay's channel to it, and
served again on the same address. docs/operations.md "Stopping": a stop lets requests in
flight finish; a channel turn is one.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from tests.support.processes import Service
from tests.support.servers import serve, serve_all
from toolref_relay import Relay, RelayConfig
from toolref_server.embedded import free_port

from ..conftest import ON_CLUSTER

pytestmark = pytest.mark.skipif(ON_CLUSTER, reason="runs the service on its embedded engine")

_GUARD = 30.0  # seconds: a failure guard only
_PATH = "/llm/anthropic/v1/messages"
_FIRST = b'event: message_start\ndata: {"type": "message_start"}\n\n'
_REST = b'event: message_stop\ndata: {"type": "message_stop"}\n\n'


class HeldProvider:
    """A provider whose answers stream their first event at once and the rest once
    `release` is set; each body it was sent kept."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.seen: list[bytes] = []

    def app(self) -> Starlette:
        async def answer(request: Request) -> StreamingResponse:
            self.seen.append(await request.body())

            async def events() -> AsyncIterator[bytes]:
                yield _FIRST
                await self.release.wait()
                yield _REST

            return StreamingResponse(events(), media_type="text/event-stream")

        return Starlette(routes=[Route("/v1/messages", answer, methods=["POST"])])


def _body(turn: int) -> bytes:
    text = f"turn {turn}: build it. " * 40
    message = {"role": "user", "content": text}
    body = {"model": "m", "max_tokens": 64, "stream": True, "messages": [message]}
    return json.dumps(body).encode()


@pytest.mark.slow
async def test_a_gateway_stopped_mid_channel_turn_finishes_it_and_the_next_turn_rides_a_channel(
    tmp_path: Path,
) -> None:
    """SIGTERM to the gateway while a streamed turn is in flight on the relay's channel:
    the turn's answer streams to the agent whole (as an HTTP request in flight would), the
    process exits 0, and once a gateway serves the address again the relay's next turn
    rides a new channel at once (no HTTP back-off reported). Before: the stop closed the
    channel (1012) at once, the turn cut (the agent saw a broken stream), and the next
    turns went over HTTP for the back-off's wait."""
    provider = HeldProvider()
    reports: list[str] = []
    port = free_port()
    async with serve_all(provider.app()) as [provider_url]:
        env = {"TOOLREF_UPSTREAMS": f"anthropic={provider_url}", "TOOLREF_SHUTDOWN_TIMEOUT": "20"}
        service = await asyncio.to_thread(Service, tmp_path / "data", port, **env)
        try:
            relay = Relay(RelayConfig(service.url), report=reports.append)
            async with serve(relay) as relay_url, httpx.AsyncClient(timeout=_GUARD) as agent:
                request = agent.build_request("POST", relay_url + _PATH, content=_body(1))
                answer = await agent.send(request, stream=True)
                assert answer.status_code == 200
                chunks = answer.aiter_raw()
                got = await asyncio.wait_for(anext(chunks), _GUARD)  # the first event came
                assert answer.extensions.get("toolref.channel") is None  # the relay's own
                os.kill(service.process.pid, signal.SIGTERM)
                await asyncio.sleep(1.0)  # the stop under way, the turn still in flight
                provider.release.set()
                async with asyncio.timeout(_GUARD):
                    async for chunk in chunks:
                        got += chunk
                assert got == _FIRST + _REST  # whole, not cut
                await answer.aclose()
                assert await asyncio.to_thread(service.process.wait, _GUARD) == 0
                output = service.output()
                assert "Traceback" not in output, output

                await asyncio.to_thread(service.restart)  # the same address, served again
                second = await asyncio.wait_for(
                    agent.post(relay_url + _PATH, content=_body(2)), _GUARD
                )
                assert second.status_code == 200
                assert second.content == _FIRST + _REST
            http_for = [line for line in reports if "turns go over HTTP" in line]
            assert not http_for, reports
            assert provider.seen == [_body(1), _body(2)]
        finally:
            await asyncio.to_thread(service.stop)
