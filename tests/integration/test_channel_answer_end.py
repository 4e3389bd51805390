"""A channel's turn ends its answer without waiting for the store (issue 40): the sender's
next turn on that channel comes to the same gateway process, which waits there for a keep
still under way rather than find the recipe missing; a turn over HTTP (whose next turn may
reach any replica) still ends its answer only once its recipe and answer are stored.

The store's writes are held back (an event the test sets) to show the order: with them
held, a channel's answer arrives whole; the next turn, sent while they are still held,
waits for them and is applied as an edit of its base, with no miss and no resend.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.integration.test_answer_dictionary import Provider, replies, result, written_back
from tests.integration.test_channel import MODEL, relayed
from tests.unit.edits.agents import HEADERS
from toolref_server.storage import store as store_module
from toolref_server.storage.recipe_cache import RecipeCache

pytestmark = pytest.mark.engine

_KEEPS = ("recipe", "keep the answer")  # the actions of the writes held back
_GUARD = 30.0  # seconds: a failure guard only (a held answer would never arrive)


@contextmanager
def writes_held(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[asyncio.Event, list[str]]]:
    """The store's recipe and answer writes wait for the event; `waiting` lists each write
    while it waits."""
    release = asyncio.Event()
    waiting: list[str] = []
    put = store_module.Store.put

    async def held(self: Any, tenant: str, action: str, *args: Any, **kwargs: Any) -> Any:
        if action == _KEEPS[0] or action.startswith(_KEEPS[1]):
            waiting.append(action)
            await release.wait()
        return await put(self, tenant, action, *args, **kwargs)

    monkeypatch.setattr(store_module.Store, "put", held)
    yield release, waiting


def waits_recorded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The refs a load waited for, a keep of them under way (`RecipeCache.settled`)."""
    waited: list[str] = []
    settled = RecipeCache.settled

    async def recorded(self: Any, tenant: str, ref: str) -> None:
        if (tenant, ref) in self._under_way:
            waited.append(ref)
        await settled(self, tenant, ref)

    monkeypatch.setattr(RecipeCache, "settled", recorded)
    return waited


def _body(messages: list[dict[str, Any]]) -> bytes:
    body = {"model": MODEL, "max_tokens": 512, "stream": True, "messages": messages}
    return json.dumps(body).encode()


def _misses(app: Any) -> float:
    """Edits the gateway refused for a base it did not hold (`missing-history`)."""
    return float(app.state.services.metrics.edits.labels("missing-history")._value.get())


async def test_a_channel_turn_ends_before_its_keep_and_the_next_turn_waits_for_it(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = Provider(replies(4, 7))
    async with relayed(redis, provider) as (relay_url, seen, _):
        url = relay_url + "/llm/anthropic/v1/messages"
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Build it. " * 60}]
        async with httpx.AsyncClient(timeout=_GUARD) as agent:
            first = await agent.post(url, content=_body(messages), headers=HEADERS)
            assert first.status_code == 200, first.text
            reply = provider.replies[0]
            messages = [*messages, written_back("messages", reply), result("messages", reply, 0)]
            with writes_held(monkeypatch) as (release, waiting):
                second = await asyncio.wait_for(
                    agent.post(url, content=_body(messages), headers=HEADERS), _GUARD
                )  # whole, though neither its recipe nor its answer is stored yet
                assert second.status_code == 200
                assert second.content == provider.streamed[1]
                assert waiting  # its keeps are held back still
                reply = provider.replies[1]
                messages = [
                    *messages, written_back("messages", reply), result("messages", reply, 1)
                ]  # fmt: skip
                waited = waits_recorded(monkeypatch)
                third = asyncio.create_task(
                    agent.post(url, content=_body(messages), headers=HEADERS)
                )
                while not waited:  # the third turn at the gateway, its base's keep held
                    assert not third.done()
                    await asyncio.sleep(0.01)
                release.set()
                answered = await asyncio.wait_for(third, _GUARD)
            assert answered.status_code == 200
            assert answered.content == provider.streamed[2]
    assert provider.seen == [
        _body(provider_messages) for provider_messages in _conversation(provider)
    ]
    assert seen.http == []  # every turn rode the channel
    assert _misses(seen.app) == 0  # the third turn's base was waited for, never missing
    assert len(provider.seen) == 3  # and nothing was resent


def _conversation(provider: Provider) -> list[list[dict[str, Any]]]:
    """The messages of each of the three turns, as the test sent them."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Build it. " * 60}]
    turns = [messages]
    for n in range(2):
        reply = provider.replies[n]
        messages = [*messages, written_back("messages", reply), result("messages", reply, n)]
        turns.append(messages)
    return turns


async def test_an_http_turn_still_ends_only_once_its_keeps_are_stored(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the channel refused (a proxy without WebSockets), each turn goes over HTTP:
    while the writes are held back, its answer does not end."""
    provider = Provider(replies(3, 8))
    async with relayed(redis, provider, refuse=True) as (relay_url, seen, _):
        url = relay_url + "/llm/anthropic/v1/messages"
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Build it. " * 60}]
        async with httpx.AsyncClient(timeout=_GUARD) as agent:
            first = await agent.post(url, content=_body(messages), headers=HEADERS)
            assert first.status_code == 200, first.text
            reply = provider.replies[0]
            messages = [*messages, written_back("messages", reply), result("messages", reply, 0)]
            with writes_held(monkeypatch) as (release, waiting):
                second = asyncio.create_task(
                    agent.post(url, content=_body(messages), headers=HEADERS)
                )
                while not waiting or len(provider.seen) < 2:  # the turn is at its keeps
                    assert not second.done()
                    await asyncio.sleep(0.01)
                for _ in range(20):  # the loop turns, the answer still held
                    await asyncio.sleep(0)
                assert not second.done()
                release.set()
                answered = await asyncio.wait_for(second, _GUARD)
        assert answered.status_code == 200
        assert answered.content == provider.streamed[1]
    assert len(seen.http) == 2
