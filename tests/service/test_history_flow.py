"""History refs end to end, in-process on a real engine: client SDK (`ToolReferenceManager`),
chat-backend middleware (`ToolRefMiddleware`, one replica or two) and registry. The backend
must always see exactly the conversation the client holds."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from toolref import AsyncRegistryClient, CircuitBreaker, ToolReferenceManager, ToolRefMiddleware
from toolref.wire.headers import HISTORY_HEADER
from toolref_server.app import create_app
from toolref_server.registry import continuation
from toolref_server.settings import Settings

from ..conftest import key_names
from .test_chat_flow import Backend, Switch
from .test_messages import trace_conversations


class Recorder(httpx.AsyncBaseTransport):
    """Routes each request to the next replica in turn, and records what the client sent."""

    def __init__(self, replicas: list[httpx.AsyncBaseTransport]) -> None:
        self.replicas = replicas
        self.sent: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        replica = self.replicas[(len(self.sent) - 1) % len(self.replicas)]
        return await replica.handle_async_request(request)


@dataclass
class Chat:
    backend: Backend
    http: httpx.AsyncClient
    recorder: Recorder
    links: list[Switch]
    redis: Redis


@pytest.fixture
async def make_chat(redis: Redis) -> AsyncIterator[Any]:
    service = create_app(Settings(redis_url="unused"), redis=redis)
    async with service.router.lifespan_context(service):
        clients: list[httpx.AsyncClient] = []

        def build(replicas: int = 1, **options: Any) -> Chat:
            backend = Backend()
            links: list[Switch] = []
            transports: list[httpx.AsyncBaseTransport] = []
            for _ in range(replicas):
                link = Switch(httpx.ASGITransport(app=service))
                registry = AsyncRegistryClient(
                    "http://registry",
                    transport=link,
                    retries=0,
                    breaker=CircuitBreaker(failure_threshold=2, reset_timeout=0),
                )
                links.append(link)
                wrapped = ToolRefMiddleware(backend.app(), registry, **options)
                transports.append(httpx.ASGITransport(app=wrapped))
            recorder = Recorder(transports)
            http = httpx.AsyncClient(transport=recorder, base_url="http://b")
            clients.append(http)
            return Chat(backend, http, recorder, links, redis)

        yield build
        for client in clients:
            await client.aclose()


async def turn(chat: Chat, manager: ToolReferenceManager, history: list[Any]) -> None:
    """One user turn: the client sends its history, appends the answer, and the backend must
    have seen exactly the client's conversation."""
    history.append({"role": "user", "content": f"turn {len(history)}"})
    response = await manager.apost(chat.http, "/chat", json={"messages": history, "n": 1})
    assert response.status_code == 200, response.text
    assert chat.backend.seen[-1] == history
    history.extend(response.json()["messages"])


def continued(request: httpx.Request) -> str | None:
    header = request.headers.get(HISTORY_HEADER)
    return header if header is not None and header.startswith("th_") else None


async def test_after_the_first_turn_only_new_messages_travel(make_chat: Any) -> None:
    chat = make_chat()
    manager = ToolReferenceManager()
    history: list[Any] = []
    for _ in range(8):
        await turn(chat, manager, history)
    sent = chat.recorder.sent
    assert continued(sent[0]) is None
    assert sent[0].headers[HISTORY_HEADER] == "?1"
    assert all(continued(r) and r.headers["content-encoding"] == "zstd" for r in sent[1:])
    assert manager.savings.histories_used == 7
    assert manager.savings.fallbacks == 0
    # Each later upload is about one turn's new text, not the growing history.
    last = len(sent[-1].content)
    assert last < 1200 < len(json.dumps(history))
    assert manager.savings.ratio > 10
    # The replica remembered each history it confirmed: no registry call to rebuild one
    # (a capabilities fetch and the key check once, then one hydrate per turn).
    assert chat.links[0].calls == 10


def asked_new(link: Any) -> list[bool]:
    """For each hydrate the middleware sent the registry: did it ask for new messages only?"""
    hydrates = [b for b in link.bodies if b'"messages"' in b and b'"messages":[]' not in b]
    return [b'"returnMessages":"new"' in body for body in hydrates]


async def test_the_backend_asks_only_for_new_messages_of_a_history_it_holds(
    make_chat: Any,
) -> None:
    """A backend holding the history a turn continues gets only the new messages from the
    registry; one whose memory is too small for it gets the whole conversation. Both hand
    the app exactly the client's conversation (`turn` checks)."""
    for chars, expected in ((64 * 2**20, True), (10, False)):
        chat = make_chat(recent_history_chars=chars)
        manager = ToolReferenceManager()
        history: list[Any] = []
        for _ in range(5):
            await turn(chat, manager, history)
        assert asked_new(chat.links[0]) == [False] + [expected] * 4
        assert manager.savings.histories_used == 4


async def test_without_compression_the_body_names_the_history(make_chat: Any) -> None:
    chat = make_chat()
    manager = ToolReferenceManager(compress=False)
    history: list[Any] = []
    for _ in range(4):
        await turn(chat, manager, history)
    later = chat.recorder.sent[-1]
    body = json.loads(later.content)
    assert body["historyRef"].startswith("th_")
    assert later.headers[HISTORY_HEADER] == "?1"
    assert len(body["messages"]) < len(history) / 2
    assert "content-encoding" not in later.headers
    assert "historyRef" not in chat.backend.seen[-1]  # the app never sees it


async def test_a_head_evicted_mid_conversation_is_resent_whole(make_chat: Any) -> None:
    chat = make_chat()
    manager = ToolReferenceManager()
    history: list[Any] = []
    for _ in range(4):
        await turn(chat, manager, history)
    nodes = [n for n in await key_names(chat.redis) if ":h:" in n]
    await chat.redis.delete(*nodes)
    before = len(chat.recorder.sent)
    await turn(chat, manager, history)
    retry = chat.recorder.sent[before:]
    assert len(retry) == 2  # the continuation, refused; then the whole conversation
    assert continued(retry[0]) is not None
    assert continued(retry[1]) is None
    assert manager.savings.fallbacks == 1
    # The whole conversation was kept again: the next turn continues it.
    await turn(chat, manager, history)
    assert continued(chat.recorder.sent[-1]) is not None


async def test_a_message_of_a_history_evicted_is_resent_whole(
    make_chat: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found when the history is next read whole: here, when its refresh is due."""
    chat = make_chat()
    manager = ToolReferenceManager()
    history: list[Any] = []
    for _ in range(3):
        await turn(chat, manager, history)
    messages = [n for n in await key_names(chat.redis) if ":m:" in n]
    await chat.redis.delete(messages[0])
    later = time.time() + 3601
    monkeypatch.setattr(continuation, "clock", lambda: later)
    await turn(chat, manager, history)
    assert manager.savings.fallbacks == 1
    await turn(chat, manager, history)  # the resend kept a whole history again
    assert manager.savings.fallbacks == 1
    assert continued(chat.recorder.sent[-1]) is not None


async def test_two_replicas_serving_alternate_turns(make_chat: Any) -> None:
    chat = make_chat(replicas=2)
    # Without the bodies kept to compress against (each replica keeps its own): see below.
    manager = ToolReferenceManager(max_prior_bytes=0)
    history: list[Any] = []
    for _ in range(10):
        await turn(chat, manager, history)
    assert manager.savings.fallbacks == 0
    assert manager.savings.histories_used == 9
    # Neither replica held the other's last history in memory, so each rebuilt the
    # dictionary through the registry: 5 turns each, so a capabilities fetch, the key check,
    # 5 hydrates, and a rebuild for every turn that continued a history (4 on the replica
    # that served the first turn, 5 on the other). Each turn still travelled as new
    # messages only.
    assert [link.calls for link in chat.links] == [11, 12]


async def test_replicas_refusing_each_others_prior_bodies_cost_log_turns(
    make_chat: Any,
) -> None:
    """A replica does not hold the body another replica kept (`Toolref-Dictionary`): it
    answers 400 dictionary-mismatch, the manager resends without it and pauses priors for
    longer after each refusal in a row, so 32 alternating turns cost a handful of retries."""
    chat = make_chat(replicas=2)
    manager = ToolReferenceManager()
    history: list[Any] = []
    for _ in range(32):
        await turn(chat, manager, history)
    assert 1 <= manager.savings.fallbacks <= 5
    assert manager.savings.histories_used == 31 + manager.savings.fallbacks


async def test_a_client_that_edits_message_5_of_200(make_chat: Any) -> None:
    chat = make_chat()
    manager = ToolReferenceManager()
    history: list[Any] = []
    while len(history) < 200:
        await turn(chat, manager, history)
    assert len(history) >= 200
    confirmed = dict(manager.histories)
    history[5] = {**history[5], "content": "an edited message"}
    before = len(chat.recorder.sent)
    await turn(chat, manager, history)
    sent = chat.recorder.sent[before:]
    assert len(sent) == 1  # no refusal: the client knew the edit broke later histories
    used = continued(sent[0])
    assert used is not None  # the longest history still valid: the ones before message 5
    assert confirmed[used] <= 5
    assert max(n for n in confirmed.values() if n <= 5) == confirmed[used]
    # Later turns continue from the edited conversation.
    await turn(chat, manager, history)
    now = continued(chat.recorder.sent[-1])
    assert now is not None
    assert now not in confirmed


async def test_a_truncated_conversation_continues_a_shorter_history(make_chat: Any) -> None:
    chat = make_chat()
    manager = ToolReferenceManager(compress=False)
    history: list[Any] = []
    for _ in range(6):
        await turn(chat, manager, history)
    lengths = sorted(manager.histories.values())
    del history[lengths[2] :]  # back to what the third turn sent
    history.append({"role": "user", "content": "again"})
    response = await manager.apost(chat.http, "/chat", json={"messages": history})
    assert response.status_code == 200
    assert chat.backend.seen[-1] == history
    body = json.loads(chat.recorder.sent[-1].content)
    assert manager.histories[body["historyRef"]] == lengths[2]
    assert body["messages"] == history[-1:]


async def test_registry_down_mid_conversation_keeps_chatting(make_chat: Any) -> None:
    chat = make_chat()
    manager = ToolReferenceManager()
    history: list[Any] = []
    for n in range(9):
        chat.links[0].down = 3 <= n < 6
        await turn(chat, manager, history)
    assert manager.savings.histories_used >= 3  # before and after the outage
    assert continued(chat.recorder.sent[-1]) is not None


async def test_edited_payloads_are_never_taken_from_a_stale_history(make_chat: Any) -> None:
    chat = make_chat()
    manager = ToolReferenceManager()
    history: list[Any] = []
    for _ in range(4):
        await turn(chat, manager, history)
    edited = copy.deepcopy(history)
    tool = next(i for i, m in enumerate(edited) if m.get("role") == "tool")
    edited[tool]["content"] = "a different result"
    edited.append({"role": "user", "content": "and now?"})
    response = await manager.apost(chat.http, "/chat", json={"messages": edited})
    assert response.status_code == 200
    assert chat.backend.seen[-1] == edited


@pytest.mark.parametrize("history_refs", [True, False], ids=["history-refs", "tool-refs-only"])
async def test_every_shared_trace_replays_turn_by_turn(make_chat: Any, history_refs: bool) -> None:
    """One request per model call, carrying the conversation so far, as the client recorded
    it: the backend sees exactly that, with history refs on and off."""
    conversations = trace_conversations()
    for name, messages in conversations:
        chat = make_chat()
        manager = ToolReferenceManager(history_refs=history_refs)
        cuts = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and i > 0]
        for cut in cuts:
            response = await manager.apost(chat.http, "/chat", json={"messages": messages[:cut]})
            assert response.status_code == 200, (name, cut, response.text)
            assert chat.backend.seen[-1] == messages[:cut], (name, cut)
        assert manager.savings.fallbacks == 0, name
        used = manager.savings.histories_used
        assert used == (len(cuts) - 1 if history_refs else 0), name
