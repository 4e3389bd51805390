"""The relay before a gateway rolled back, forward, or mixed while it runs (review: the
relay learnt the gateway's edits version once per start and never lowered it).

`Older` makes the real gateway behave as one of an older edits version, as it would on the
wire: its capabilities and every answer's `Toolref-Edits` say that version, and an edit
written in a newer version's bytes is refused 400 `malformed-body` (what a gateway of 4
says to version 5's compact header, which it reads as a JSON header line that is not one).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.integration.test_relay_edits import (
    TIMEOUT,
    WithoutEdits,
    assert_exact,
    post,
    relayed,
)
from tests.unit.edits.agents import Agent
from toolref.asgi.scope import Receive, Scope, Send
from toolref.edits import compact
from toolref.edits.wire import MEDIA_TYPE
from toolref.sending.said import RECENT
from toolref.wire.encoding import PROBLEM_TYPE
from toolref.wire.errors import PROBLEM_BASE

pytestmark = pytest.mark.engine


def written(body: bytes) -> int:
    """The version an edit's bytes are written in (a compact header's first byte)."""
    return (
        body[0] if body[:1] and body[0] in compact.MARKS else json.loads(body.split(b"\n")[0])["v"]
    )


class Older:
    """The gateway as one reading edits up to `version` (changed while it runs)."""

    def __init__(self, app: Any, version: int = 6) -> None:
        self.app, self.version = app, version

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        version = self.version
        if dict(scope["headers"]).get(b"content-type") == MEDIA_TYPE.encode():
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            if written(body) > version:
                problem = {
                    "type": PROBLEM_BASE + "malformed-body",
                    "title": "malformed body",
                    "status": 400,
                    "detail": "the header line is not JSON",
                }
                head = [(b"content-type", PROBLEM_TYPE.encode())]
                await send({"type": "http.response.start", "status": 400, "headers": head})
                await send({"type": "http.response.body", "body": json.dumps(problem).encode()})
                return
            sent = False

            async def replayed() -> Any:
                nonlocal sent
                if sent:
                    return await receive()
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}

            receive = replayed

        async def said(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, str(version).encode() if k.lower() == b"toolref-edits" else v)
                    for k, v in message["headers"]
                    if scope["path"] != "/v1/capabilities" or k != b"content-length"
                ]
                message = {**message, "headers": headers}
            body = message.get("body") if message["type"] == "http.response.body" else None
            if scope["path"] == "/v1/capabilities" and body:
                document = {**json.loads(body), "edits": version}
                message = {**message, "body": json.dumps(document).encode()}
            await send(message)

        await self.app(scope, receive, said)


async def test_a_gateway_rolled_back_then_forward_is_followed_without_a_failed_turn(
    redis: Redis,
) -> None:
    """Rolled back from 6 to 4 while the relay runs: before, every later turn was an edit
    of version 5's bytes, refused 400 `malformed-body`, and the agent got the 400, for
    ever. Now the refused turn goes again as it came (the agent gets its answer), the
    relay learns 4 (the refusal, then the capabilities asked again), and every later turn
    is one edit of version 4. Rolled forward to 6, the answers say so, and once no lower
    version was said for `RECENT` seconds the relay writes 6 again."""
    gateways: list[Older] = []

    def wrap(app: Any) -> Older:
        gateways.append(Older(app))
        return gateways[-1]

    conversation = Agent(11, marks=2)
    async with relayed(redis, wrap=wrap) as stack, httpx.AsyncClient(timeout=TIMEOUT) as agent:
        now = [1000.0]
        stack.relay.capabilities.clock = lambda: now[0]
        for _ in range(3):
            conversation.step()
            await post(agent, stack, conversation.body())
        assert written(stack.balancer.requests[-1].content) == 5
        gateways[0].version = 4
        for turn in range(4):
            conversation.step()
            before = len(stack.balancer.requests)
            await post(agent, stack, conversation.body())  # 200: asserted there
            assert_exact(stack, conversation.body())
            sent = stack.balancer.requests[before:]
            if turn > 0:
                assert len(sent) == 1, [r.headers["content-type"] for r in sent]
                assert sent[0].headers["content-type"] == MEDIA_TYPE
                assert written(sent[0].content) == 4
        assert stack.relay.capabilities.version == 4
        gateways[0].version = 6
        conversation.step()
        await post(agent, stack, conversation.body())  # still 4's bytes: said 6
        assert written(stack.balancer.requests[-1].content) == 4
        now[0] += 3600
        conversation.step()
        await post(agent, stack, conversation.body())
        assert written(stack.balancer.requests[-1].content) == 5
        assert stack.relay.capabilities.version == 6


async def test_replicas_of_two_versions_cost_no_resend_loop(redis: Redis) -> None:
    """Two replicas behind one address, of 6 and of 4 (a rolling upgrade, or one rolled
    back): the relay writes what both read once either said less, however the turns
    alternate, so no turn is refused over and over."""
    versions = iter([6, 4])
    conversation = Agent(12, marks=2)
    async with (
        relayed(redis, gateways=2, wrap=lambda app: Older(app, next(versions))) as stack,
        httpx.AsyncClient(timeout=TIMEOUT) as agent,
    ):
        for _ in range(10):
            conversation.step()
            await post(agent, stack, conversation.body())
            assert_exact(stack, conversation.body())
        media = [r.headers["content-type"] for r in stack.balancer.requests]
    assert media.count("application/json") <= 1  # at most the one refused turn, as it came
    assert len(stack.balancer.requests) <= 10 + 2  # its refused edit, and its resend
    assert all(written(r.content) == 4 for r in stack.balancer.requests[-6:])


async def test_the_lines_after_a_refused_edit_say_what_follows_and_what_to_do(
    redis: Redis,
) -> None:
    """Found in review (leftovers of stop 57): a 400 `malformed-body` is taken for a
    rollback, and the turn goes again as it came, so a genuine relay bug (bytes no gateway
    reads) would be hidden; the line said so without saying what to do. Now it says the
    refusal is expected only after a rollback, and to report it otherwise. And the 415
    line said requests go as they came "from now on", though the relay asks the gateway
    again `RECENT` seconds later."""
    gateways: list[Older] = []

    def wrap(app: Any) -> Older:
        gateways.append(Older(app))
        return gateways[-1]

    conversation = Agent(11, marks=2)
    async with relayed(redis, wrap=wrap) as stack, httpx.AsyncClient(timeout=TIMEOUT) as agent:
        for _ in range(2):
            conversation.step()
            await post(agent, stack, conversation.body())
        gateways[0].version = 4
        conversation.step()
        await post(agent, stack, conversation.body())
    refused = [line for line in stack.lines if "as malformed (400)" in line]
    assert len(refused) == 1, stack.lines
    assert "refused an edit of version 6" in refused[0]
    assert "if the gateway was not rolled back, report this" in refused[0]


async def test_the_415_line_says_when_edits_are_tried_again(redis: Redis) -> None:
    conversation = Agent(6)
    wrap = lambda app: WithoutEdits(app, refuse=True)  # noqa: E731
    async with relayed(redis, wrap=wrap) as stack, httpx.AsyncClient(timeout=TIMEOUT) as agent:
        for _ in range(2):
            conversation.step()
            await post(agent, stack, conversation.body())
    refused = [line for line in stack.lines if "refused an edit (415)" in line]
    assert len(refused) == 1, stack.lines
    assert "from now on" not in refused[0]
    assert f"asks the gateway again in {RECENT:g} s" in refused[0]
