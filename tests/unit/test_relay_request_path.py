"""The relay's request path, driven over ASGI with a scripted gateway (`httpx.MockTransport`):
what reaches the gateway, what the agent gets back, and what runs on the event loop."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, MutableMapping
from typing import Any

import httpx
import pytest

from toolref_relay import Relay, RelayConfig, app
from toolref_relay.clients import Client
from toolref_relay.llm import LLMRequest

Handler = Callable[[httpx.Request], httpx.Response]
HEADERS = [("host", "127.0.0.1:8760"), ("content-type", "application/json"), ("x-api-key", "sk")]


def relay_for(handler: Handler, **options: Any) -> Relay:
    """A relay whose gateway is `handler` (asked for its capabilities, it takes no edits)."""

    def gateway(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/capabilities":
            return httpx.Response(200, json={"edits": 0})
        return handler(request)

    return Relay(
        RelayConfig("http://gateway.test", key="tenant-key", channel=False, **options),
        transport=httpx.MockTransport(gateway),
        report=lambda _: None,
    )


async def agent_request(
    relay: Relay, method: str, path: str, body: bytes = b""
) -> list[MutableMapping[str, Any]]:
    """The messages the relay sends the agent for one request (its body in one piece)."""
    arrived = [{"type": "http.request", "body": body, "more_body": False}]
    answered = asyncio.Event()
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        if arrived:
            return arrived.pop()
        await answered.wait()  # the agent waits for its answer
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(k.encode(), v.encode()) for k, v in HEADERS],
        "server": ("127.0.0.1", 8760),
    }
    try:
        await relay(scope, receive, send)
    finally:
        answered.set()
    return sent


def test_a_switched_turns_large_body_is_read_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review: with --switch, every turn's body was parsed as JSON on the event loop (about
    100 ms for 6 MiB of small parts), stalling every other agent's stream meanwhile; a
    large one is now read in a worker thread, as an edit's cut is."""
    threads: list[str] = []
    read = app.recognise  # type: ignore[attr-defined]

    def recorded(*args: Any) -> LLMRequest | None:
        threads.append(threading.current_thread().name)
        return read(*args)

    monkeypatch.setattr(app, "recognise", recorded)
    relay = relay_for(lambda _: httpx.Response(200, json={}), switch=("anthropic", "kimi"))
    big = {"model": "m", "messages": [{"role": "user", "content": "x" * (512 << 10)}]}
    small = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

    async def run() -> str:
        for body in (big, small):
            sent = await agent_request(relay, "POST", "/llm/anthropic/v1/messages", _json(body))
            assert sent[0]["status"] == 200
        return threading.current_thread().name

    loop_thread = asyncio.run(run())
    assert len(threads) == 2
    assert threads[0] != loop_thread  # the large body: in a worker thread
    assert threads[1] == loop_thread  # a small one: a thread hop would cost more


@pytest.mark.parametrize("path", ["/llm/anthropic/v1/messages", "/llm/anthropic/v1/models"])
def test_a_providers_own_problem_document_reaches_the_agent_with_its_headers(path: str) -> None:
    """Review: a provider's own `application/problem+json` error (not toolref's), forwarded
    by the gateway with its length, reached the agent as a new answer of its status and
    body alone: its `Retry-After`, request id and rate-limit headers were dropped, so the
    agent retried at once. It passes as it came."""
    problem = b'{"type":"about:blank","title":"Too Many Requests","status":429}'
    headers = {
        "content-type": "application/problem+json",
        "retry-after": "30",
        "x-request-id": "req_123",
        "x-ratelimit-remaining-requests": "0",
    }
    relay = relay_for(lambda _: httpx.Response(429, headers=headers, content=problem))
    body = _json({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    method = "POST" if path.endswith("messages") else "GET"
    sent = asyncio.run(agent_request(relay, method, path, body))
    start, *pieces = sent
    assert start["status"] == 429
    got = {k.decode(): v.decode() for k, v in start["headers"]}
    assert {k: got.get(k) for k in headers} == headers
    assert got["content-length"] == str(len(problem))
    assert b"".join(piece.get("body", b"") for piece in pieces) == problem


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


class _Told:
    """An editor's `answered`, recorded."""

    def __init__(self) -> None:
        self.told: list[tuple[str, bytes | None]] = []

    def answered(self, ref: str, answer: bytes | None) -> None:
        self.told.append((ref, answer))


async def test_an_answer_is_told_to_the_editor_under_its_clients_lock() -> None:
    """Found in review: a streamed answer was told to the editor as it ended, while another
    turn of the same client (parallel subagents share one) could be preparing its edit in
    a worker thread, holding the lock: the editor is not thread-safe, and keeping an answer
    may drop recipes that thread iterates. It waits for the lock now."""
    told = _Told()
    client = Client(told)  # type: ignore[arg-type]
    async with client.lock:  # a turn preparing
        client.answered("tb_a", b"the answer")
        for _ in range(5):
            await asyncio.sleep(0)
        assert told.told == []
    for _ in range(5):
        await asyncio.sleep(0)
    assert told.told == [("tb_a", b"the answer")]
    client.answered("tb_b", None)  # the lock free: at once
    assert told.told[-1] == ("tb_b", None)
