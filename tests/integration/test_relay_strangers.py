"""The relay before an answer to an edit from something in front of the gateway that does not
speak toolref (review: answers that are not toolref's; every sender's rule,
`toolref.sending.stranger`).

Over real sockets: the relay, the real gateway wrapped in `InFront` (a proxy or firewall: an
edit refused 400 unread, or forwarded and then answered 504 as a proxy timing out), the
recording provider. Before, the relay handed the firewall's 400 to the agent: behind a
firewall refusing the media type, every turn the relay sent as an edit failed, for ever
(the gateway's capabilities, asked past the firewall, kept saying edits).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.integration.test_relay_edits import TIMEOUT, assert_exact, relayed
from tests.unit.edits.agents import HEADERS, Agent
from toolref.asgi.scope import Receive, Scope, Send
from toolref.edits.wire import MEDIA_TYPE

pytestmark = pytest.mark.engine


class InFront:
    """`app` behind a proxy whose answer to an edit is `edits`: "forward", "400" (refused,
    unread) or "504" (forwarded, the gateway's answer dropped, a 504 page instead)."""

    def __init__(self, app: Any) -> None:
        self.app, self.edits = app, "forward"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        edit = dict(scope.get("headers", [])).get(b"content-type") == MEDIA_TYPE.encode()
        if scope["type"] != "http" or not edit or self.edits == "forward":
            await self.app(scope, receive, send)
            return
        if self.edits == "504":

            async def dropped(message: Any) -> None:
                return None

            await self.app(scope, receive, dropped)
        page = f"<html><title>{self.edits} refused</title></html>".encode()
        head = [(b"content-type", b"text/html"), (b"content-length", str(len(page)).encode())]
        await send({"type": "http.response.start", "status": int(self.edits), "headers": head})
        await send({"type": "http.response.body", "body": page})


@asynccontextmanager
async def edited_twice(
    redis: Redis, seed: int
) -> AsyncIterator[tuple[Any, httpx.AsyncClient, str, Agent, InFront]]:
    """Relay and gateway with `InFront` before the gateway, two turns of a conversation sent
    (the second an edit): (stack, agent, url, conversation, the proxy)."""
    fronts: list[InFront] = []
    conversation = Agent(seed, marks=2)

    def wrap(app: Any) -> InFront:
        fronts.append(InFront(app))
        return fronts[-1]

    async with relayed(redis, wrap=wrap) as stack, httpx.AsyncClient(timeout=TIMEOUT) as agent:
        url = stack.relay_url + "/llm/anthropic/v1/messages"
        for _ in range(2):
            conversation.step()
            answer = await agent.post(url, content=conversation.body(), headers=HEADERS)
            assert answer.status_code == 200, answer.text
        yield stack, agent, url, conversation, fronts[0]


async def test_a_firewalls_400_to_an_edit_sends_the_turn_as_it_came_and_pauses_edits(
    redis: Redis,
) -> None:
    async with edited_twice(redis, 31) as (stack, agent, url, conversation, front):
        assert stack.balancer.requests[-1].headers["content-type"] == MEDIA_TYPE
        front.edits = "400"
        for turn in range(3):
            conversation.step()
            before = len(stack.balancer.requests)
            answer = await agent.post(url, content=conversation.body(), headers=HEADERS)
            assert answer.status_code == 200, answer.text  # the agent's answer, not the 400
            assert_exact(stack, conversation.body())
            kinds = [r.headers["content-type"] for r in stack.balancer.requests[before:]]
            # the first refused, then as it came; edits paused: the next ones as they came
            assert kinds == ([MEDIA_TYPE] if turn == 0 else []) + ["application/json"]


async def test_a_proxys_504_to_an_edit_is_the_agents_without_a_second_model_call(
    redis: Redis,
) -> None:
    async with edited_twice(redis, 32) as (stack, agent, url, conversation, front):
        front.edits = "504"
        conversation.step()
        calls = len(stack.provider.seen)
        answer = await agent.post(url, content=conversation.body(), headers=HEADERS)
        assert answer.status_code == 504  # the agent retries, as it would without toolref
        assert len(stack.provider.seen) == calls + 1
