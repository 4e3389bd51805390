"""The answer is the next turn's dictionary (issue 39): the relay before the service's real
gateway on the test engine, a provider behind it that streams each turn's answer (the only
fake: what is outside the machine), an agent that writes each answer back as its next
assistant message.

Relay and gateway both read the stream as it passes and make the same bytes of it; from
the second turn the relay sends the agent's assistant message compressed against them
(an edit naming the answer, `"a"`), every body reaching the provider byte for byte; a turn
whose answer the agent does not write back, a stream cut short, or an answer the gateway
lost (its store flushed) falls back to an edit without it by itself, with no error the
agent sees.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.integration.test_relay_edits import Alternating
from tests.support.fake_provider import wire
from tests.support.servers import serve, serve_all
from tests.unit.edits.agents import HEADERS
from toolref.edits.wire import described
from toolref_relay import Relay, RelayConfig
from toolref_server.app import create_app
from toolref_server.settings import Settings

pytestmark = pytest.mark.engine

KEY = "tenant-key-of-the-answer-tests"
MODEL = "scripted-1"
CHAT_HEADERS = [("Content-Type", "application/json"), ("Authorization", "Bearer sk-" + "o" * 40)]


@dataclass
class Provider:
    """Streams `replies` in turn (Anthropic Messages or OpenAI Chat, by path), recording
    every body; `cut`: turns whose stream stops before its end event."""

    replies: list[wire.Reply]
    cut: frozenset[int] = frozenset()
    seen: list[bytes] = field(default_factory=list)
    streamed: list[bytes] = field(default_factory=list)  # each answer's bytes, as sent

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/{path:path}", self._answer, methods=["POST"])])

    async def _answer(self, request: Request) -> Response:
        self.seen.append(await request.body())
        turn = len(self.seen) - 1
        api = api_of(request.url.path)
        frames = wire.frames(api, self.replies[turn], MODEL, 10, usage=False)
        if turn in self.cut:
            frames = frames[:-2]
        self.streamed.append(b"".join(frames))

        async def events() -> AsyncIterator[bytes]:
            for frame in frames:
                yield frame

        return StreamingResponse(events(), media_type="text/event-stream")


def api_of(path: str) -> wire.Api:
    if path.endswith("/messages"):
        return "messages"
    if path.endswith("/responses"):
        return "responses"
    return "gemini" if path.endswith(":streamGenerateContent") else "chat"


@dataclass
class Stack:
    relay_url: str
    provider: Provider
    balancer: Alternating


@asynccontextmanager
async def relayed(redis: Redis, provider: Provider) -> AsyncIterator[Stack]:
    async with serve_all(provider.app()) as [provider_url]:
        tenant = f"t={hashlib.sha256(KEY.encode()).hexdigest()}"
        config = Settings(
            redis_url="unused",
            upstreams=f"anthropic={provider_url},openai={provider_url},gemini={provider_url}",
            api_keys=tenant,
            answer_cache_bytes=0,  # every answer read from the store, as another replica would
            edit_cache_bytes=0,
        )
        async with serve_all(create_app(config, redis=redis)) as [url]:
            balancer = Alternating([url])
            relay = Relay(RelayConfig(url, key=KEY), report=lambda _: None, transport=balancer)
            async with serve(relay) as relay_url:
                yield Stack(relay_url, provider, balancer)


def replies(count: int, seed: int) -> list[wire.Reply]:
    """Answers as models give them: a tool call (a command, a file to write), or text."""
    rng = random.Random(seed)
    found = []
    for n in range(count):
        words = " ".join("".join(rng.choices("abcdefghij", k=6)) for _ in range(60))
        if n % 3 == 2:
            found.append(wire.Reply(text=f"Step {n}: {words}", index=n))
        else:
            arguments = {"path": f"src/module_{n}.py", "content": f"# {words}\nprint({n})\n"}
            found.append(wire.Reply(call=wire.Call("write_file", arguments), index=n))
    return found


def written_back(api: wire.Api, reply: wire.Reply) -> dict[str, Any]:
    """The assistant message an agent writes for `reply` (as the provider's whole answer)."""
    if api == "messages":
        whole = wire.anthropic_message(reply, MODEL, 10)
        return {"role": "assistant", "content": whole["content"]}
    message: dict[str, Any] = wire.chat_completion(reply, MODEL, 10)["choices"][0]["message"]
    return message


def result(api: wire.Api, reply: wire.Reply, n: int) -> dict[str, Any]:
    text = f"result of step {n}: " + "ok " * 50
    if reply.call is None:
        return {"role": "user", "content": f"go on with step {n + 1}"}
    if api == "messages":
        block = {"type": "tool_result", "tool_use_id": f"toolu_e2e_{reply.index:03d}"}
        return {"role": "user", "content": [{**block, "content": text}]}
    return {"role": "tool", "tool_call_id": f"call_e2e_{reply.index:03d}", "content": text}


async def converse(
    stack: Stack, api: wire.Api, turns: int, *, back: list[wire.Reply] | None = None
) -> list[bytes]:
    """`turns` turns, each the conversation so far; after each the agent writes back the
    answer it read (`back`: these replies instead, as an agent that rewrote them)."""
    path = "/llm/anthropic/v1/messages" if api == "messages" else "/llm/openai/v1/chat/completions"
    headers = HEADERS if api == "messages" else CHAT_HEADERS
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Build it. " * 60}]
    bodies = []
    async with httpx.AsyncClient(timeout=30) as agent:
        for n in range(turns):
            body = {"model": MODEL, "max_tokens": 512, "stream": True, "messages": messages}
            data = json.dumps(body).encode()
            bodies.append(data)
            answer = await agent.post(stack.relay_url + path, content=data, headers=headers)
            assert answer.status_code == 200, answer.text
            assert answer.content == stack.provider.streamed[n]  # the stream, byte for byte
            reply = (back or stack.provider.replies)[n]
            messages = [*messages, written_back(api, reply), result(api, reply, n)]
    return bodies


def sent(stack: Stack) -> list[bytes]:
    return [request.content for request in stack.balancer.requests]


@pytest.mark.parametrize("api", ["messages", "chat"])
async def test_the_assistant_message_travels_against_the_answer_and_arrives_exact(
    redis: Redis, api: wire.Api
) -> None:
    provider = Provider(replies(8, 1))
    async with relayed(redis, provider) as stack:
        bodies = await converse(stack, api, 8)
    assert provider.seen == bodies  # every body byte for byte
    edits = sent(stack)
    assert len(edits) == 8  # no resend
    assert all("a" in described(edit) for edit in edits[1:]), [e[:12] for e in edits]

    await redis.flushall()
    rewritten = Provider(replies(8, 1))
    other = replies(8, 2)  # the agent writes back other answers than it read: no dictionary
    async with relayed(redis, rewritten) as stack:
        bodies = await converse(stack, api, 8, back=other)
    assert rewritten.seen == bodies
    plain = sent(stack)  # the structure still matches: some name an answer, but smaller
    with_answer = sum(map(len, edits[1:]))
    without = sum(map(len, plain[1:]))
    assert with_answer * 1.5 < without, (with_answer, without)


async def test_a_stream_cut_short_gives_no_dictionary_and_nothing_breaks(redis: Redis) -> None:
    """Turn 3's stream stops before its end event: no answer on either side, and turn 4 is
    an edit naming no answer; turn 5 (after a whole answer) names one again."""
    provider = Provider(replies(6, 3), cut=frozenset({2}))
    async with relayed(redis, provider) as stack:
        bodies = await converse(stack, "messages", 6)
    assert provider.seen == bodies
    edits = sent(stack)
    assert len(edits) == 6
    assert "a" not in described(edits[3])  # the turn after the cut stream
    assert "a" in described(edits[4])  # and the next one whole again


async def test_an_answer_the_gateway_lost_costs_one_resend(redis: Redis) -> None:
    provider = Provider(replies(6, 4))
    async with relayed(redis, provider) as stack:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Build it. " * 60}]
        bodies = []
        async with httpx.AsyncClient(timeout=30) as agent:
            for n in range(6):
                if n == 4:  # the answers are gone from the store; the recipes stay
                    async for key in redis.scan_iter(match="tr:*:a:*"):
                        await redis.delete(key)
                body = {"model": MODEL, "max_tokens": 512, "stream": True, "messages": messages}
                data = json.dumps(body).encode()
                bodies.append(data)
                url = stack.relay_url + "/llm/anthropic/v1/messages"
                answer = await agent.post(url, content=data, headers=HEADERS)
                assert answer.status_code == 200, answer.text
                reply = provider.replies[n]
                messages = [
                    *messages,
                    written_back("messages", reply),
                    result("messages", reply, n),
                ]
    assert provider.seen == bodies
    edits = sent(stack)
    assert len(edits) == 7  # turn 5 twice: refused 400 dictionary-mismatch, then without the answer
    assert "a" in described(edits[4])
    assert "a" not in described(edits[5])


async def test_a_file_read_again_costs_a_fraction_of_the_first_read(redis: Redis) -> None:
    """The long window: a 24 KB tool result the conversation already holds, in another
    message, is sent as ranges of the base (its pieces, cut where its content says), not
    again; the provider still gets every body byte for byte."""
    rng = random.Random(10)
    names = ["".join(rng.choices("abcdefghijklmnop", k=8)) for _ in range(400)]
    lines = [
        f"    def {name}(self, value):\n        return value * {rng.randrange(10**6)}\n"
        for name in names
    ]
    text = "class Big:\n" + "".join(lines)
    provider = Provider(replies(4, 9))
    async with relayed(redis, provider) as stack:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Read big.py twice. " * 9}]
        bodies = []
        async with httpx.AsyncClient(timeout=30) as agent:
            for n in range(4):
                body = {"model": MODEL, "max_tokens": 512, "stream": True, "messages": messages}
                data = json.dumps(body).encode()
                bodies.append(data)
                url = stack.relay_url + "/llm/anthropic/v1/messages"
                answer = await agent.post(url, content=data, headers=HEADERS)
                assert answer.status_code == 200, answer.text
                reply = provider.replies[n]
                block = {"type": "tool_result", "tool_use_id": f"read_{n}", "content": text}
                messages = [
                    *messages,
                    written_back("messages", reply),
                    {"role": "user", "content": [block]},
                ]
    assert provider.seen == bodies
    edits = sent(stack)
    first_read, second_read = len(edits[1]), len(edits[2])
    assert first_read > 3000  # the file, compressed
    assert second_read * 4 < first_read, (first_read, second_read)


GEMINI_PATH = "/llm/gemini/v1beta/models/scripted-1:streamGenerateContent"
ITEMS_PATHS = {"responses": "/llm/openai/v1/responses", "gemini": GEMINI_PATH}


def item_written_back(api: wire.Api, reply: wire.Reply) -> dict[str, Any]:
    """What Codex CLI (Responses) and Gemini CLI write back for `reply`."""
    if api == "gemini":
        return {
            "role": "model",
            "parts": wire.gemini_response(reply, MODEL, 10)["candidates"][0]["content"]["parts"],
        }
    item = wire.responses_item(reply)
    if item["type"] == "message":
        entry = {"type": "output_text", "text": reply.text}
        return {"type": "message", "role": "assistant", "content": [entry]}
    return {k: item[k] for k in ("type", "name", "arguments", "call_id")}


def item_result(api: wire.Api, reply: wire.Reply, n: int) -> dict[str, Any]:
    text = f"result of step {n}: " + "ok " * 50
    if api == "gemini":
        if reply.call is None:
            return {"role": "user", "parts": [{"text": f"go on with step {n + 1}"}]}
        response = {"name": reply.call.name, "response": {"content": text}}
        return {"role": "user", "parts": [{"functionResponse": response}]}
    if reply.call is None:
        return {"type": "message", "role": "user", "content": f"go on with step {n + 1}"}
    return {
        "type": "function_call_output",
        "call_id": f"call_e2e_{reply.index:03d}",
        "output": text,
    }


async def converse_items(
    stack: Stack, api: wire.Api, turns: int, back: list[wire.Reply] | None = None
) -> list[bytes]:
    """`converse` for OpenAI Responses (`input` items) and Gemini (`contents`)."""
    key = "contents" if api == "gemini" else "input"
    first: dict[str, Any] = (
        {"role": "user", "parts": [{"text": "Build it. " * 60}]}
        if api == "gemini"
        else {"type": "message", "role": "user", "content": "Build it. " * 60}
    )
    items = [first]
    headers = [("Content-Type", "application/json"), ("x-goog-api-key", "AIza" + "g" * 35)]
    bodies = []
    async with httpx.AsyncClient(timeout=30) as agent:
        for n in range(turns):
            body = {"model": MODEL, "stream": True, key: items}
            data = json.dumps(body).encode()
            bodies.append(data)
            url = stack.relay_url + ITEMS_PATHS[api] + ("?alt=sse" if api == "gemini" else "")
            answer = await agent.post(
                url, content=data, headers=headers if api == "gemini" else CHAT_HEADERS
            )
            assert answer.status_code == 200, answer.text
            assert answer.content == stack.provider.streamed[n]
            reply = (back or stack.provider.replies)[n]
            items = [*items, item_written_back(api, reply), item_result(api, reply, n)]
    return bodies


@pytest.mark.parametrize("api", ["responses", "gemini"])
async def test_responses_and_gemini_answers_are_dictionaries_on_both_sides(
    redis: Redis, api: wire.Api
) -> None:
    """Relay and gateway read the same answer of a Responses or Gemini stream: each edit
    that carries the model's message against it is applied (no resend), and costs less
    than when the agent wrote back other answers. Every turn carries one: a Responses
    call item has no role, but it is the model's by its type (`scanner.MODEL_ITEMS`; before,
    only a turn after a text answer, a `message` item, did: 2 of 7)."""
    provider = Provider(replies(8, 1))
    async with relayed(redis, provider) as stack:
        bodies = await converse_items(stack, api, 8)
    assert provider.seen == bodies
    edits = sent(stack)
    assert len(edits) == 8  # no resend: the gateway held the bytes the relay made
    named = ["a" in described(edit) for edit in edits[1:]]
    assert all(named), named  # Responses: after a call item too (not only a text answer)

    await redis.flushall()
    rewritten = Provider(replies(8, 1))
    async with relayed(redis, rewritten) as stack:
        bodies = await converse_items(stack, api, 8, back=replies(8, 2))
    assert rewritten.seen == bodies
    with_answer = sum(map(len, edits[1:]))
    without = sum(map(len, sent(stack)[1:]))
    print(f"\n{api}: edits {with_answer:,} B against the answers, {without:,} B without")
    assert with_answer < without, (with_answer, without)
