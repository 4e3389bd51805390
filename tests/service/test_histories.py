"""Stored histories on the real engine (and on a cluster in the cluster pass)."""

from __future__ import annotations

import copy
from typing import Any

from redis.asyncio import Redis

from toolref import formats
from toolref.history import chain_form, heads, history_ref
from toolref.wire.canonical import canonical_json
from toolref.wire.encoding import dumps_json
from toolref_server.storage.histories import Histories, Stored
from toolref_server.storage.store import Store

from ..conftest import key_names
from ..unit.test_history import conversation

OPENAI = formats.get("openai-chat")


class Counted:
    """Counts pipelines sent: each is one round trip."""

    def __init__(self, redis: Redis) -> None:
        self.redis, self.trips = redis, 0

    def pipeline(self, *args: Any, **kwargs: Any) -> Any:
        self.trips += 1
        return self.redis.pipeline(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.redis, name)


async def save(stored: Histories, form: list[Any], start: int = 0, tenant: str = "t") -> str:
    """Save `form` as a client that writes compact JSON would have sent it."""
    texts = [dumps_json(message).decode() for message in form]
    encoded = [canonical_json(message) for message in form]
    return await stored.save(tenant, "openai-chat", texts, encoded, start)


def held(form: list[Any]) -> Stored:
    texts = [dumps_json(message).decode() for message in form]
    return Stored("openai-chat", form, texts, [canonical_json(m) for m in form])


def histories(redis: Redis) -> tuple[Histories, Counted]:
    counted = Counted(redis)
    store = Store(redis, ttl_seconds=600)
    store.redis = counted  # type: ignore[assignment]
    return Histories(store), counted


async def test_a_300_message_history_comes_back_in_two_round_trips(redis: Redis) -> None:
    stored, counted = histories(redis)
    form = chain_form(conversation(75), OPENAI)[:300]
    assert len(form) == 300
    ref = await save(stored, form)
    assert ref == history_ref(heads(form)[-1])
    counted.trips = 0
    assert await stored.load("t", ref) == held(form)
    assert counted.trips == 2
    # Each message once, plus one node.
    names = await key_names(redis)
    assert sum(":h:" in n for n in names) == 1
    assert sum(":m:" in n for n in names) == len({str(m) for m in form})


async def test_longer_histories_share_their_messages(redis: Redis) -> None:
    stored, _ = histories(redis)
    form = chain_form(conversation(10), OPENAI)
    short = await save(stored, form[:20])
    long = await save(stored, form, 20)
    assert short != long
    assert await stored.load("t", short) == held(form[:20])
    assert await stored.load("t", long) == held(form)
    names = await key_names(redis)
    assert sum(":h:" in n for n in names) == 2
    assert sum(":m:" in n for n in names) == len({str(m) for m in form})


async def test_unknown_foreign_or_broken_histories_are_not_held(redis: Redis) -> None:
    stored, _ = histories(redis)
    form = chain_form(conversation(3), OPENAI)
    ref = await save(stored, form)
    assert await stored.load("other-tenant", ref) is None
    edited = copy.deepcopy(form)
    edited[1]["content"] = "edited"
    assert await stored.load("t", history_ref(heads(edited)[-1])) is None
    # A message of the history evicted: the history is not held any more.
    message_keys = [n for n in await key_names(redis) if ":m:" in n]
    await redis.delete(message_keys[0])
    assert await stored.load("t", ref) is None


async def test_loading_slides_every_lifetime(redis: Redis) -> None:
    stored, _ = histories(redis)
    form = chain_form(conversation(2), OPENAI)
    ref = await save(stored, form)
    names = await key_names(redis)
    for name in names:
        await redis.expire(name, 5)
    assert await stored.load("t", ref) == held(form)
    for name in names:
        assert await redis.ttl(name) > 500
