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
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.integration.test_answer_dictionary import Provider, replies, result, written_back
from tests.integration.test_channel import KEY, MODEL, relayed
from tests.support.servers import serve, serve_all
from tests.unit.edits.agents import HEADERS
from toolref_relay import Relay, RelayConfig
from toolref_server.app import create_app
from toolref_server.settings import Settings
from toolref_server.storage import answers as answers_module
from toolref_server.storage import keys
from toolref_server.storage import store as store_module
from toolref_server.storage.under_way import UnderWay

pytestmark = pytest.mark.engine

_KEEPS = ("recipe", "keep the answer")  # the actions of the writes held back
_GUARD = 30.0  # seconds: a failure guard only (a held answer would never arrive)


def _kind(action: str) -> str | None:
    """Which of `_KEEPS` a store write is (its action), if any."""
    if action == _KEEPS[0]:
        return _KEEPS[0]
    return _KEEPS[1] if action.startswith(_KEEPS[1]) else None


@contextmanager
def writes_held(
    monkeypatch: pytest.MonkeyPatch, *kinds: str
) -> Iterator[tuple[asyncio.Event, list[str]]]:
    """The store's recipe and answer writes (or those of `kinds` alone) wait for the event;
    `waiting` lists each write while it waits."""
    release = asyncio.Event()
    waiting: list[str] = []
    put = store_module.Store.put
    kinds = kinds or _KEEPS

    async def held(self: Any, tenant: str, action: str, *args: Any, **kwargs: Any) -> Any:
        if _kind(action) in kinds:
            waiting.append(action)
            await release.wait()
        return await put(self, tenant, action, *args, **kwargs)

    monkeypatch.setattr(store_module.Store, "put", held)
    yield release, waiting


def waits_recorded(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """What a read waited for, a write of it under way (`UnderWay.settled`)."""
    waited: list[object] = []
    settled = UnderWay.settled

    async def recorded(self: Any, what: Any) -> None:
        if what in self._tasks:
            waited.append(what)
        await settled(self, what)

    monkeypatch.setattr(UnderWay, "settled", recorded)
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
            messages = _next(messages, provider, 0)
            answered = await _held_while_writes_are(agent, url, messages, provider, monkeypatch)
        assert answered.status_code == 200
        assert answered.content == provider.streamed[1]
    assert len(seen.http) == 2


# Found in review of the change above: the answer's write began only once the turn ended,
# unshielded, and was no read's to wait for.
_ANSWERS = keys.answer("*", "tb_*")  # every answer key, whatever tenant and recipe


def _slug(app: Any, slug: str) -> float:
    return float(app.state.services.metrics.edits.labels(slug)._value.get())


async def _settled(app: Any) -> None:
    """Until no store write the gateway began is under way (a failure guard bounds it)."""
    under_way = app.state.services.recipes.under_way
    async with asyncio.timeout(_GUARD):
        while tasks := set(under_way._tasks.values()):
            await asyncio.wait(tasks)


def _next(messages: list[dict[str, Any]], provider: Provider, n: int) -> list[dict[str, Any]]:
    reply = provider.replies[n]
    return [*messages, written_back("messages", reply), result("messages", reply, n)]


async def test_with_no_answer_cache_the_next_turn_waits_for_the_answers_write(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `TOOLREF_ANSWER_CACHE_BYTES=0` (or the answer gone from it) the next turn read
    the store before the answer's write was there: 400 `dictionary-mismatch`, a resend."""
    init = answers_module.Answers.__init__

    def uncached(self: Any, store: Any, cache_bytes: int, under_way: Any = None) -> None:
        init(self, store, 0, under_way)

    monkeypatch.setattr(answers_module.Answers, "__init__", uncached)
    provider = Provider(replies(4, 9))
    async with relayed(redis, provider) as (relay_url, seen, _):
        url = relay_url + "/llm/anthropic/v1/messages"
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Build it. " * 60}]
        async with httpx.AsyncClient(timeout=_GUARD) as agent:
            assert (await agent.post(url, content=_body(messages), headers=HEADERS)).is_success
            messages = _next(messages, provider, 0)
            with (
                writes_held(monkeypatch, _KEEPS[0]) as (recipes, _),
                writes_held(monkeypatch, _KEEPS[1]) as (answers, _),
            ):
                second = await agent.post(url, content=_body(messages), headers=HEADERS)
                assert second.is_success
                messages = _next(messages, provider, 1)
                waited = waits_recorded(monkeypatch)
                third = asyncio.create_task(
                    agent.post(url, content=_body(messages), headers=HEADERS)
                )
                while not waited:  # at its base's keep
                    assert not third.done()
                    await asyncio.sleep(0.01)
                recipes.set()
                while len(waited) < 2:  # then at its answer's write
                    if third.done():
                        break
                    await asyncio.sleep(0.01)
                answers.set()
                answered = await asyncio.wait_for(third, _GUARD)
        assert answered.content == provider.streamed[2]
        assert _slug(seen.app, "dictionary-mismatch") == 0
        assert _slug(seen.app, "missing-history") == 0
    assert len(provider.seen) == 3  # nothing resent


async def test_the_next_turns_keep_deletes_the_answer_only_once_it_is_written(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next turn's keep deletes its base's answer from the store (it was that edit's
    dictionary). A write of that answer still under way (a store a round trip away) landed
    after the delete and stayed for its TTL; the keep now waits for it first."""
    release = asyncio.Event()
    put = store_module.Store.put
    answers: list[str] = []

    async def second_answer_slow(self: Any, tenant: str, action: str, *a: Any, **k: Any) -> Any:
        if _kind(action) == _KEEPS[1]:
            answers.append(action)
            if len(answers) == 2:
                await release.wait()
        return await put(self, tenant, action, *a, **k)

    monkeypatch.setattr(store_module.Store, "put", second_answer_slow)
    provider = Provider(replies(4, 10))
    async with relayed(redis, provider) as (relay_url, seen, _):
        url = relay_url + "/llm/anthropic/v1/messages"
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Build it. " * 60}]
        async with httpx.AsyncClient(timeout=_GUARD) as agent:
            for n in range(3):
                assert (await agent.post(url, content=_body(messages), headers=HEADERS)).is_success
                messages = _next(messages, provider, n)
        release.set()
        await _settled(seen.app)
        assert len(await redis.keys(_ANSWERS)) == 1  # the third's: the second's deleted
        assert _slug(seen.app, "missing-history") == 0


async def test_a_channel_closing_right_after_an_answer_leaves_its_write_to_end(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The channel closing cancels its turns: a turn whose answer had gone out but whose
    answer's write was still under way lost the write (a base with no answer: every later
    turn on another process a `dictionary-mismatch` and a resend). The write runs on."""
    provider = Provider(replies(2, 11))
    async with serve_all(provider.app()) as [provider_url]:
        tenant = f"t={hashlib.sha256(KEY.encode()).hexdigest()}"
        config = Settings(
            redis_url="unused", upstreams=f"anthropic={provider_url}", api_keys=tenant
        )
        app = create_app(config, redis=redis)
        async with serve_all(app) as [gateway_url]:
            messages: list[dict[str, Any]] = [{"role": "user", "content": "Build it. " * 60}]
            with writes_held(monkeypatch) as (release, waiting):
                relay = Relay(RelayConfig(gateway_url, key=KEY), report=lambda _: None)
                async with serve(relay) as relay_url, httpx.AsyncClient(timeout=_GUARD) as agent:
                    url = relay_url + "/llm/anthropic/v1/messages"
                    answered = await agent.post(url, content=_body(messages), headers=HEADERS)
                    assert answered.is_success
                assert waiting  # the relay and its channel gone, the writes still held
                release.set()
                await _settled(app)
        assert len(await redis.keys(_ANSWERS)) == 1


async def test_a_channel_turn_waits_as_over_http_while_the_store_is_behind(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found measuring: 32 connections sending as fast as they were answered kept their
    writes in flight past the answers, and the tenant's 64 requests in flight were reached
    (429). With a quarter of that limit under way (`UnderWay.busy`), a channel turn's end
    waits for its writes, as over HTTP: slowed, never refused."""
    monkeypatch.setattr(UnderWay, "busy", lambda self, *_: True)  # the store behind
    provider = Provider(replies(3, 12))
    async with relayed(redis, provider) as (relay_url, seen, _):
        url = relay_url + "/llm/anthropic/v1/messages"
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Build it. " * 60}]
        async with httpx.AsyncClient(timeout=_GUARD) as agent:
            assert (await agent.post(url, content=_body(messages), headers=HEADERS)).is_success
            messages = _next(messages, provider, 0)
            answered = await _held_while_writes_are(agent, url, messages, provider, monkeypatch)
        assert answered.content == provider.streamed[1]
    assert seen.http == []  # it rode the channel


async def _held_while_writes_are(
    agent: httpx.AsyncClient,
    url: str,
    messages: list[dict[str, Any]],
    provider: Provider,
    monkeypatch: pytest.MonkeyPatch,
) -> httpx.Response:
    """The second turn sent with the store's writes held back: its answer has not ended
    once the turn is at its keeps (the loop turned meanwhile); then they are let go."""
    with writes_held(monkeypatch) as (release, waiting):
        second = asyncio.create_task(agent.post(url, content=_body(messages), headers=HEADERS))
        while not waiting or len(provider.seen) < 2:  # the turn is at its keeps
            assert not second.done()
            await asyncio.sleep(0.01)
        for _ in range(20):  # the loop turns, the answer still held
            await asyncio.sleep(0)
        assert not second.done()
        release.set()
        return await asyncio.wait_for(second, _GUARD)
