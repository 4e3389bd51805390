"""A gateway whose operator set `TOOLREF_MAX_EDIT_ENTRIES` below its default: a turn whose
recipe would hold more entries reaches the provider byte for byte through the Python SDK's
real `AsyncTransport` (HTTP and channel), the app seeing nothing of the refused edit; later
turns of that size go as they are at once.

Before, the sender made an edit of every request within the default (50,000 entries): the
gateway refused it 413 `too-many-items`, which no sender resent on, so with the limit set
lower every turn of a long conversation reached the app as a 413, though the same request
sent as it is would have been forwarded. Now the edit refused is sent again as it is (with
the offer), and the limit its problem names (`limit`) is kept for the endpoint
(`toolref.sending.entries`): later requests of more entries go as they are, no refused edit
first, and the sender logs it once. A 413 `decompressed-too-large` (the body the edit stands
for is itself too large) is not sent again: the request as it is would be refused too.
"""

from __future__ import annotations

import logging

import httpx
import pytest
from redis.asyncio import Redis

from tests.integration.edit_client import AGENT_HEADERS
from tests.integration.test_edits_many_messages import Recorded, body_of
from tests.integration.test_gateway_edits import stack_of
from tests.integration.test_relay_edits import TIMEOUT, assert_exact, post, relayed
from toolref import AsyncTransport
from toolref.edits.request import cut
from toolref.edits.wire import MEDIA_TYPE

pytestmark = pytest.mark.engine

LIMIT = 200  # the operator's TOOLREF_MAX_EDIT_ENTRIES, far below the default 50,000
PATH = "/llm/up/v1/messages"


def entries_of(body: bytes) -> int:
    made = cut(AGENT_HEADERS, body, "messages")
    assert made is not None
    return len(made.entries)


@pytest.mark.parametrize("channel", [False, True], ids=["http", "channel"])
async def test_a_turn_past_a_lowered_entries_limit_goes_as_it_is_unseen_and_later_ones_at_once(
    redis: Redis, channel: bool, caplog: pytest.LogCaptureFixture
) -> None:
    long, longer = body_of(150), body_of(160)
    assert entries_of(long) > LIMIT
    assert entries_of(body_of(10, "a page")) < LIMIT
    caplog.set_level(logging.WARNING, "toolref.sending.sender")
    async for stack in stack_of(redis, 1, max_edit_entries=LIMIT):
        wire = Recorded()
        sdk = AsyncTransport(wire, channel=channel)
        async with httpx.AsyncClient(transport=sdk, base_url=stack.gateways[0], timeout=60) as http:
            answer = await http.post(PATH, content=body_of(10), headers=AGENT_HEADERS)
            assert answer.status_code == 200, answer.text  # the offer: the gateway reads edits
            for body in (long, longer):
                answer = await http.post(PATH, content=body, headers=AGENT_HEADERS)
                assert answer.status_code == 200, answer.text[:300]  # no 413 reaches the app
                assert stack.upstream.seen[-1][1] == body
            small = body_of(10, "a page")  # another conversation, within the limit: an edit
            answer = await http.post(PATH, content=small, headers=AGENT_HEADERS)
            assert answer.status_code == 200, answer.text[:300]
            assert stack.upstream.seen[-1][1] == small
        async with httpx.AsyncClient(base_url=stack.gateways[0]) as plain:
            metrics = (await plain.get("/metrics")).text
        # One edit refused, the long turn's: the longer one went as it is at once (on the
        # channel too, where the wire below is not recorded).
        refused = 'toolref_edits_total{outcome="too-many-items"} '
        assert [line for line in metrics.splitlines() if line.startswith(refused)] == [
            refused + "1.0"
        ]
        if not channel:  # over HTTP every attempt is on the recorded wire
            assert wire.sent[1:] == [
                (MEDIA_TYPE, 413),  # the long turn's edit, refused
                ("application/json", 200),  # sent again as it is
                ("application/json", 200),  # the longer turn: as it is at once
                (MEDIA_TYPE, 200),
            ]
        assert len(stack.upstream.seen) == 4
    said = [r.getMessage() for r in caplog.records if "too-many-items" in r.getMessage()]
    assert len(said) == 1, said  # once per endpoint, not once a turn
    assert f"limit of {LIMIT} entries" in said[0]
    assert "TOOLREF_MAX_EDIT_ENTRIES" in said[0]


async def test_a_413_decompressed_too_large_is_the_apps_not_resent(redis: Redis) -> None:
    """The body the edit stands for is over the gateway's inflated limit: the request as it
    is would be refused as well, so it is not sent again and the app gets the 413."""
    async for stack in stack_of(redis, 1, max_decompressed_bytes=4096):
        wire = Recorded()
        sdk = AsyncTransport(wire, channel=False)
        async with httpx.AsyncClient(transport=sdk, base_url=stack.gateways[0], timeout=60) as http:
            answer = await http.post(PATH, content=body_of(2), headers=AGENT_HEADERS)
            assert answer.status_code == 200, answer.text
            answer = await http.post(PATH, content=body_of(100), headers=AGENT_HEADERS)
            assert answer.status_code == 413
            assert "decompressed-too-large" in answer.text
        assert wire.sent[1:] == [(MEDIA_TYPE, 413)]


async def test_the_relay_sends_a_turn_past_a_lowered_entries_limit_as_it_came_saying_it_once(
    redis: Redis,
) -> None:
    """The relay's edit path alike: the refused turn goes again as it came (the agent sees
    the provider's answer), the next longer one as it came at once, a turn within the limit
    as an edit; one line says the gateway's limit and what to raise."""
    long, longer, small = body_of(150), body_of(160), body_of(10, "a page")
    async with (
        relayed(redis, max_edit_entries=LIMIT) as stack,
        httpx.AsyncClient(timeout=TIMEOUT) as agent,
    ):
        await post(agent, stack, body_of(10))
        for body in (long, longer, small):
            await post(agent, stack, body)  # 200, or it fails
            assert_exact(stack, body)
        media = [r.headers["content-type"] for r in stack.balancer.requests[1:]]
    assert media == [MEDIA_TYPE, "application/json", "application/json", MEDIA_TYPE]
    said = [line for line in stack.lines if "too-many-items" in line]
    assert len(said) == 1, stack.lines
    assert f"a limit of {LIMIT} entries" in said[0]
    assert "TOOLREF_MAX_EDIT_ENTRIES" in said[0]
