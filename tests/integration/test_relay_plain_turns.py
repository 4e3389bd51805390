"""A turn whose edit would put more on the wire than the request as it came, and that no
later turn could be an edit of (no base, no message of `RELATED_MIN` bytes), goes to the
gateway as it came (`as_edit.not_worth_an_edit`); any other goes as an edit. The request
as it came is made only for a turn with no base (a continuation never needs it)."""

from __future__ import annotations

import json

import httpx
import pytest
from redis.asyncio import Redis

from tests.support.servers import serve
from toolref.edits.wire import MEDIA_TYPE
from toolref_relay import Relay, RelayConfig

from .relay_gateway import KEY, MODEL, Scripted, gateway

pytestmark = pytest.mark.engine


def _body(text: str) -> bytes:
    messages = [{"role": "user", "content": text}]
    return json.dumps({"model": MODEL, "max_tokens": 16, "messages": messages}).encode()


async def test_a_tiny_turn_goes_as_it_came_and_a_long_one_as_an_edit(redis: Redis) -> None:
    provider = Scripted()
    tiny, long = _body("hi"), _body("Build the parser and test it. " * 200)
    async with gateway(redis, {"anthropic": provider.app()}) as service:
        config = RelayConfig(service.url, key=KEY, channel=False)  # each turn one request
        relay = Relay(config, report=lambda line: None)
        async with serve(relay) as relay_url, httpx.AsyncClient(timeout=30) as agent:
            url = relay_url + "/llm/anthropic/v1/messages"
            headers = {"x-api-key": "sk-agent", "content-type": "application/json"}
            for body in (tiny, long):
                answer = await agent.post(url, content=body, headers=headers)
                assert answer.status_code == 200
    plain, edited = service.arrivals
    assert plain.headers["content-type"] == "application/json"
    assert plain.body == tiny  # as it came
    assert edited.headers["content-type"] == MEDIA_TYPE
    assert provider.received == [tiny, long]  # each exactly at the provider
