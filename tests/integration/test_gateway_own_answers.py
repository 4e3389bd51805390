"""The gateway's own answers to an edit say it is the gateway's (`Toolref-Edits`), so no
sender takes one for an answer from no receiver of edits (`toolref.sending.stranger`)
(review: the gateway's own answers).

Over real sockets: the real gateway (registry and gateway in one app, on the test engine)
before a provider that counts its calls; the senders are Python's `AsyncTransport`, JS's
`toolrefFetch` (in node) and the relay. The gateway fails unexpectedly on the third turn
(an edit) after its provider answered, before the answer's head went (a fault injected
where the forwarder makes that head): its answer is a 500 problem of its own.

Before, that 500 named no `Toolref-Edits` (the access middleware wrote it, outside the
gateway's marks), and a sender reads no 500's body (a stream stays a stream): each took it
for a stranger's refusal of the body unread, so the request went again as it is (the
provider called twice for one turn: a second model call the user pays for) and edits to
the endpoint paused 5 minutes; the relay blamed "something in front of the gateway that
does not speak toolref (a proxy, a firewall)".
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from redis.asyncio import Redis

from tests.integration import test_sender_strangers as strangers
from tests.integration.test_js_parity import Replay
from tests.integration.test_relay_strangers import edited_twice
from tests.integration.test_sender_strangers import Python, js_turn, stack
from tests.unit.edits.agents import HEADERS as AGENT_HEADERS
from toolref_server.gateway import forwarder

pytestmark = pytest.mark.engine
replay = strangers.replay  # the fixture: the JS SDK's sender in node


@contextmanager
def failing_once(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The gateway's next answer head, once its upstream answered, fails unexpectedly (a
    bug of the gateway's); yields the count of failures so far."""
    failed: list[int] = []
    made = forwarder.answer_headers

    def broken(headers: Any) -> Any:
        if not failed:
            failed.append(1)
            raise RuntimeError("injected: the gateway failed making the answer's head")
        return made(headers)

    with monkeypatch.context() as patch:
        patch.setattr(forwarder, "answer_headers", broken)
        yield failed


async def test_python_takes_the_gateways_500_to_an_edit_as_the_gateways(
    redis: Redis, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with stack(redis) as running:
        sender = Python(running.url)
        assert [await sender.turn(n) for n in (1, 2)] == [200, 200]
        assert running.proxy.kinds == ["as it is", "edit"]
        calls = running.provider.calls
        with failing_once(monkeypatch) as failed:
            assert await sender.turn(3) == 500  # the app's, as it came
        assert failed == [1]
        assert running.provider.calls == calls + 1  # not sent again as it is
        [logged] = [r for r in caplog.records if r.getMessage() == "unhandled error"]
        assert logged.exc_info is not None  # its traceback, once, under the request id
        assert getattr(logged, "request_id", "unknown") != "unknown"
        assert running.proxy.kinds[2:] == ["edit"]
        assert await sender.turn(3) == 200  # the app's retry: an edit still, not paused
        assert running.proxy.kinds[3:] == ["edit"]
        await sender.aclose()


async def test_js_takes_the_gateways_500_to_an_edit_as_the_gateways(
    redis: Redis, replay: Replay, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with stack(redis) as running:

        async def turn(n: int) -> int:
            return await asyncio.to_thread(js_turn, replay, running.url, n)

        assert [await turn(n) for n in (1, 2)] == [200, 200]
        assert running.proxy.kinds == ["as it is", "edit"]
        calls = running.provider.calls
        with failing_once(monkeypatch) as failed:
            assert await turn(3) == 500
        assert failed == [1]
        assert running.provider.calls == calls + 1
        assert running.proxy.kinds[2:] == ["edit"]
        assert await turn(3) == 200
        assert running.proxy.kinds[3:] == ["edit"]


async def test_the_relay_takes_the_gateways_500_to_an_edit_as_the_gateways(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with edited_twice(redis, 33) as (stack_, agent, url, conversation, _front):
        conversation.step()
        calls = len(stack_.provider.seen)
        with failing_once(monkeypatch) as failed:
            answer = await agent.post(url, content=conversation.body(), headers=AGENT_HEADERS)
        assert failed == [1]
        assert answer.status_code == 500  # the agent's to retry, as without toolref
        assert "the service failed unexpectedly" in answer.text  # the gateway's own words
        assert len(stack_.provider.seen) == calls + 1  # the provider called once
        assert not any("in front of the gateway" in line for line in stack_.lines)
        before = len(stack_.balancer.requests)
        answer = await agent.post(url, content=conversation.body(), headers=AGENT_HEADERS)
        assert answer.status_code == 200, answer.text
        kinds = [r.headers["content-type"] for r in stack_.balancer.requests[before:]]
        assert kinds == ["application/vnd.toolref.edit"]  # edits not paused
