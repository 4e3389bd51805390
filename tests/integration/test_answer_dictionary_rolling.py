"""The answer as dictionary while the gateway's replicas roll from edits version 5 to 6 or 7
(or one rolls back): the relay learnt 6 from the replica that answered its capabilities, and a
conversation's turns reach both kinds, alternately (no affinity), on one store.

A replica of 5 keeps no answer of OpenAI Responses or Gemini and says so on each answer
(`Toolref-Edits: 5`); the relay taps such an answer only where the replica that streamed
it says 6, so no turn names an answer no one holds: no `dictionary-mismatch`, no resend,
every body at the provider byte for byte.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

import pytest
from redis.asyncio import Redis
from starlette.types import Message, Receive, Scope, Send

from tests.integration.test_answer_dictionary import (
    KEY,
    Provider,
    Stack,
    converse_items,
    replies,
    sent,
)
from tests.integration.test_relay_edits import Alternating
from tests.support.fake_provider import wire
from tests.support.servers import serve, serve_all
from toolref.edits import wire as wire_version
from toolref.edits.answer import tap_for
from toolref.edits.wire import described
from toolref_relay import Relay, RelayConfig
from toolref_server.app import create_app
from toolref_server.gateway import edited
from toolref_server.settings import Settings

pytestmark = pytest.mark.engine

_OF_5: ContextVar[bool] = ContextVar("a request served by the replica of version 5", default=False)


class OfVersion:
    """The gateway as a replica of an older edits version runs it: its answers say
    `Toolref-Edits: <said>`, its capabilities `"edits": <said>`; one of 5 taps the answers a
    receiver of 5 keeps (none of Responses or Gemini: `toolref.edits.answer.SINCE`). One of
    6 reads what 7 reads but kind 7 (a sender writes it none: it said 6)."""

    def __init__(self, app: Any, said: int) -> None:
        self.app, self.said = app, str(said).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started: list[Message] = []
        document = scope["type"] == "http" and scope["path"] == "/v1/capabilities"

        async def told(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (name, self.said if name.lower() == b"toolref-edits" else value)
                    for name, value in message["headers"]
                ]
                message = {**message, "headers": headers}
                if document:  # its `"edits"` said once its body is whole
                    started.append(message)
                    return
            if document and message["type"] == "http.response.body":
                assert not message.get("more_body"), "one body message: a small document"
                said = json.loads(message["body"]) | {"edits": int(self.said)}
                body = json.dumps(said).encode()
                start = started[0]
                kept = [(n, v) for n, v in start["headers"] if n.lower() != b"content-length"]
                length = (b"content-length", str(len(body)).encode())
                await send({**start, "headers": [*kept, length]})
                message = {**message, "body": body}
            await send(message)

        token = _OF_5.set(self.said == b"5")
        try:
            await self.app(scope, receive, told)
        finally:
            _OF_5.reset(token)


def _tap_of_either(path: str, status: int, headers: Any, version: int | None = None) -> Any:
    return tap_for(path, status, headers, 5 if _OF_5.get() else version)


@asynccontextmanager
async def rolling(redis: Redis, provider: Provider, newer: int = 6) -> AsyncIterator[Stack]:
    """relay -> [a gateway of `newer` (6, or 7: this one), a gateway of 5] in turn, both on
    `redis`; the capabilities (the first request) answered by the newer one."""
    async with serve_all(provider.app()) as [provider_url]:
        config = Settings(
            redis_url="unused",
            upstreams=f"openai={provider_url},gemini={provider_url}",
            api_keys=f"t={hashlib.sha256(KEY.encode()).hexdigest()}",
            answer_cache_bytes=0,  # every answer read from the store, as another replica would
            edit_cache_bytes=0,
        )
        made = create_app(config, redis=redis)
        new = made if newer == wire_version.VERSION else OfVersion(made, newer)
        old = OfVersion(create_app(config, redis=redis), 5)
        async with serve_all(new, old) as urls:
            balancer = Alternating(urls)
            relay = Relay(RelayConfig(urls[0], key=KEY), report=lambda _: None, transport=balancer)
            async with serve(relay) as relay_url:
                yield Stack(relay_url, provider, balancer)


@pytest.mark.parametrize("api", ["responses", "gemini"])
async def test_replicas_of_5_and_6_in_turn_cost_no_resend(
    redis: Redis, api: wire.Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(edited, "tap_for", _tap_of_either)
    provider = Provider(replies(8, 1))
    async with rolling(redis, provider) as stack:
        bodies = await converse_items(stack, api, 8)
    assert provider.seen == bodies  # every body byte for byte
    edits = sent(stack)
    assert len(edits) == 8, [described(edit).get("a") for edit in edits]  # no resend
    # turn n went to replica n mod 2 (the capabilities took the first request): the edit
    # after an answer of the replica of 6 names it, none after one of the replica of 5
    named = ["a" in described(edit) for edit in edits[1:]]
    assert named == [n % 2 == 1 for n in range(7)], named


@pytest.mark.parametrize("api", ["responses", "gemini"])
async def test_replicas_of_5_and_7_in_turn_are_sent_5s_bytes(
    redis: Redis, api: wire.Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica of 7 beside one of 5: what both read, 5's bytes (`said`: 7's are not 5's),
    so no record of kind 7 and no answer named (5 keeps none of these APIs); no resend."""
    monkeypatch.setattr(edited, "tap_for", _tap_of_either)
    provider = Provider(replies(8, 1))
    async with rolling(redis, provider, newer=7) as stack:
        bodies = await converse_items(stack, api, 8)
    assert provider.seen == bodies
    edits = sent(stack)
    assert len(edits) == 8, [described(edit).get("a") for edit in edits]  # no resend
    assert {edit[0] for edit in edits[1:]} == {5}  # compact headers of version 5
    assert not any("a" in described(edit) for edit in edits[1:])
