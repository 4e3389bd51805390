"""What Redis holds for records and histories, on the real engine: dictionaries a version
does not know read as missing (never a 500), and superseded history heads expire first."""

from __future__ import annotations

from typing import Any

import httpx
import zstandard
from redis.asyncio import Redis
from toolref.history import chain_form
from toolref_server.storage.histories import Histories

from toolref import formats
from toolref.wire.canonical import canonical_json, digest_of
from toolref.wire.encoding import dumps_json
from toolref_server.storage import compressors, record
from toolref_server.storage.store import Store

from ..conftest import Api, key_names
from ..unit.test_history import conversation

OPENAI = formats.get("openai-chat")
READ = {"name": "read", "args": {"path": "a.py"}, "result": "print('hi')\n" * 40, "isError": False}


def _newer_dictionary() -> Any:
    """A records dictionary a later version would ship (an id this one lacks)."""
    samples: list[Any] = [dumps_json({"n": n, "text": "line\n" * (n % 40)}) for n in range(400)]
    return zstandard.train_dictionary(4096, samples, dict_id=0x74720002)


async def test_a_record_of_an_unknown_dictionary_reads_as_missing(
    api: httpx.AsyncClient, redis: Redis
) -> None:
    digest = digest_of(READ)
    body = record.body("read", False, record.payload_of(READ), digest.size, 1)
    packed = zstandard.ZstdCompressor(dict_data=_newer_dictionary()).compress(body)
    key = Store.key("local", digest.ref)
    await redis.set(key, bytes((3,)) + digest.sha256 + b"\x01" + packed)
    resolved = await api.post("/v1/invocations:resolve", json={"refs": [str(digest.ref)]})
    assert resolved.status_code == 200, resolved.text
    assert resolved.json() == {"invocations": {}, "missing": [str(digest.ref)]}
    assert await redis.get(key) is None  # deleted, so the client's resend stores it again
    registered = await api.post("/v1/invocations", json={"invocations": [READ]})
    assert registered.json()["refs"][0]["new"] is True
    again = await api.post("/v1/invocations:resolve", json={"refs": [str(digest.ref)]})
    assert again.json()["invocations"][str(digest.ref)] == READ


async def _save(stored: Histories, form: list[Any], start: int = 0) -> str:
    texts = [dumps_json(message).decode() for message in form]
    encoded = [canonical_json(message) for message in form]
    return await stored.save("t", "openai-chat", texts, encoded, start)


async def test_a_superseded_head_gets_the_shorter_lifetime(redis: Redis) -> None:
    store = Store(redis, ttl_seconds=86_400)
    stored = Histories(store, superseded_ttl=600)
    form = chain_form(conversation(6), OPENAI)
    first = await _save(stored, form[:9])
    second = await _save(stored, form[:17], 9)
    third = await _save(stored, form, 17)
    ttl = {ref: await redis.ttl(stored.node_key("t", ref)) for ref in (first, second, third)}
    assert 0 < ttl[first] <= 600
    assert 0 < ttl[second] <= 600
    assert ttl[third] > 86_000  # the newest keeps the full lifetime
    # Messages are shared by every head: they keep the full lifetime.
    messages = [n for n in await key_names(redis) if ":m:" in n]
    assert all([await redis.ttl(n) > 86_000 for n in messages])
    # An older head continued again (after an edit) lives fully while it is the newest.
    assert await stored.load("t", first) is not None
    assert await redis.ttl(stored.node_key("t", first)) > 86_000
    # Saving the same history again supersedes nothing.
    assert await _save(stored, form, len(form)) == third
    assert await redis.ttl(stored.node_key("t", third)) > 86_000


async def test_a_superseded_head_never_outlives_the_ttl_setting(redis: Redis) -> None:
    store = Store(redis, ttl_seconds=300)
    stored = Histories(store, superseded_ttl=600)  # longer than the TTL: the TTL wins
    form = chain_form(conversation(3), OPENAI)
    first = await _save(stored, form[:5])
    await _save(stored, form, 5)
    assert 0 < await redis.ttl(stored.node_key("t", first)) <= 300


async def test_the_app_applies_the_superseded_ttl_setting(make_api: Api, redis: Redis) -> None:
    """Through the service: a kept history continued twice leaves the older heads short."""
    api = await make_api(history_superseded_ttl=120)
    messages: list[Any] = [{"role": "user", "content": "hello"}]
    head = None
    for turn in range(3):
        body: dict[str, Any] = {"messages": messages}
        if head is not None:
            body = {"historyRef": head, "messages": messages[-2:]}
        answer = await api.post(
            "/v1/messages:hydrate", json=body, headers={"Toolref-History": "?1"}
        )
        assert answer.status_code == 200, answer.text
        head = answer.headers["Toolref-History"]
        messages += [
            {"role": "assistant", "content": f"answer {turn}"},
            {"role": "user", "content": f"question {turn}"},
        ]
    nodes = [n for n in await key_names(redis) if ":h:" in n]
    lifetimes = sorted([await redis.ttl(n) for n in nodes])
    assert len(lifetimes) == 3
    assert all(0 < t <= 120 for t in lifetimes[:2])
    assert lifetimes[2] > 120


async def test_a_history_message_of_an_unknown_dictionary_is_a_missing_history(
    redis: Redis,
) -> None:
    store = Store(redis, ttl_seconds=600)
    stored = Histories(store)
    form = chain_form(conversation(2), OPENAI)
    ref = await _save(stored, form)
    name = next(n for n in await key_names(redis) if ":m:" in n)
    packed = await redis.get(name)
    assert isinstance(packed, bytes)
    dictionary = zstandard.train_dictionary(
        4096,
        [dumps_json({"n": n, "t": "x" * n}) for n in range(300)],
        dict_id=0x746D0002,
    )
    text = compressors.decompress(packed)
    await redis.set(name, zstandard.ZstdCompressor(dict_data=dictionary).compress(text))
    assert await stored.load("t", ref) is None
