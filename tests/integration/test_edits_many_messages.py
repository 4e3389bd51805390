"""A conversation of more messages than an edit's recipe may hold entries
(`TOOLREF_MAX_EDIT_ENTRIES`, 50,000 by default: about two entries a message) reaches the
provider byte for byte through the Python SDK's `AsyncTransport` and the gateway, every turn.

Before, the editor sent it as an edit, which the gateway refused 413 `too-many-items` before
anything was built; no sender resent on a 413 then, so the app got it ("send a smaller request,
or the request whole"), every turn, though the request as it is was well within the
gateway's body limit. Now a request whose recipe would be over the default is sent as it is.
"""

from __future__ import annotations

import json

import httpx
import pytest
from redis.asyncio import Redis

from tests.integration.edit_client import AGENT_HEADERS
from tests.integration.test_gateway_edits import stack_of
from toolref import AsyncTransport
from toolref.edits.wire import DEFAULT_MAX_ENTRIES

pytestmark = pytest.mark.engine

MESSAGES = DEFAULT_MAX_ENTRIES // 2 + 1000  # two entries a message: past the bound


def body_of(count: int, topic: str = "the repository") -> bytes:
    """A first message long enough to relate turns by, then `count` tiny ones."""
    first = {"role": "user", "content": f"read {topic}, then summarise it. " * 40}
    tiny = (
        json.dumps({"role": "user" if n % 2 else "assistant", "content": f"m{n}"}).encode()
        for n in range(count)
    )
    listed = b",".join([json.dumps(first).encode(), *tiny])
    return b'{"model":"claude","max_tokens":1024,"messages":[' + listed + b"]}"


class Recorded(httpx.AsyncHTTPTransport):
    """The real transport, noting each request's media type and its answer's status."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, int]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        self.sent.append((request.headers.get("content-type", ""), response.status_code))
        return response


async def test_a_conversation_past_the_edit_entries_bound_reaches_the_provider(
    redis: Redis,
) -> None:
    async for stack in stack_of(redis, 1):
        wire = Recorded()
        sdk = AsyncTransport(wire, channel=False)
        async with httpx.AsyncClient(transport=sdk, base_url=stack.gateways[0], timeout=60) as http:
            small = body_of(10)  # the first turn offers edits; the gateway says it reads them
            answer = await http.post("/llm/up/v1/messages", content=small, headers=AGENT_HEADERS)
            assert answer.status_code == 200, answer.text
            for count in (MESSAGES, MESSAGES + 2):
                body = body_of(count)
                answer = await http.post("/llm/up/v1/messages", content=body, headers=AGENT_HEADERS)
                assert answer.status_code == 200, answer.text[:300]
                assert stack.upstream.seen[-1][1] == body
            assert all(status == 200 for _, status in wire.sent), wire.sent  # nothing refused
            assert [media for media, _ in wire.sent[-2:]] == ["application/json"] * 2
