"""A turn a channel carries gets the gateway's access line and metrics as one over HTTP does:
the turn's request id (the sender's `X-Request-Id`, or a fresh one sent back), its route
template, its status, its bytes and its time, and `channel: true`. Before, a turn on the
channel passed the gateway's access middleware by (it wraps the upgrade, not the turns), so
an operator's logs and `toolref_requests_total` held one line per channel and none per turn:
the relay's and the SDKs' turns vanished from both once they rode the channel."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging

import httpx
import pytest
from redis.asyncio import Redis

from tests.adversarial.gateway_wire import gateway
from tests.unit.test_channel_sides import Recording
from toolref.sending.channel_transport import ChannelTransport
from toolref_server.logs import JsonFormatter

_GUARD = 10.0  # seconds: a failure guard only
_KEY = "access-tenant"


@pytest.mark.engine
async def test_a_channel_turn_gets_an_access_line_and_is_counted(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="toolref_server.access")
    keys = f"a={hashlib.sha256(_KEY.encode()).hexdigest()}"
    inner = Recording()  # what went over HTTP
    async with gateway(redis, api_keys=keys) as url:
        reports: list[str] = []
        transport = ChannelTransport(
            inner, url, _KEY, connect_timeout=_GUARD, report=reports.append
        )
        try:
            answers = []
            for n in range(2):
                request = httpx.Request(
                    "POST",
                    url + "/llm/nowhere/v1/messages",
                    content=b"{}",
                    headers={"X-Request-Id": f"turn-{n}", "Toolref-Key": _KEY},
                )
                answer = await asyncio.wait_for(transport.handle_async_request(request), _GUARD)
                body = b"".join([piece async for piece in answer.stream])
                answers.append((answer, body))
            metrics = await httpx.AsyncClient().get(url + "/metrics")
        finally:
            await transport.close_link()
    assert inner.sent == [], reports  # both turns rode the channel
    formatter = JsonFormatter()
    lines = [json.loads(formatter.format(r)) for r in caplog.records]
    access = [line for line in lines if line["logger"] == "toolref_server.access"]
    for n, (answer, body) in enumerate(answers):
        assert answer.headers["x-request-id"] == f"turn-{n}"
        [line] = [line for line in access if line.get("requestId") == f"turn-{n}"]
        assert line["status"] == answer.status_code == 404, (line, body)
        assert line["route"].startswith("/llm/")
        assert line["method"] == "POST"
        assert line["bytesIn"] == 0  # refused before its body was read, as over HTTP
        assert line["bytesOut"] == len(body)
        assert line["channel"] is True
    counted = [
        row
        for row in metrics.text.splitlines()
        if row.startswith("toolref_requests_total{") and 'status="404"' in row
    ]
    assert any(row.endswith(" 2.0") for row in counted), counted
