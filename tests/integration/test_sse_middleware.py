"""Event streams behind `ToolRefMiddleware`, over real sockets, read as clients read them.

The paced backend (tests/integration/paced.py) streams the providers' own events, with
Starlette's `StreamingResponse` and with sse-starlette's `EventSourceResponse`, behind the
middleware, hydrating through the registry on the test engine. Clients read those streams
with raw httpx, the openai SDK and the anthropic SDK, on protocol 1, on protocol 2 with
`toolRef` markers for payloads confirmed the turn before, and on protocol 2 continuing a
history confirmed the turn before (the SDKs through `toolref.AsyncTransport`). Every event
must arrive, in order, the first before the app has made the second; the app must receive
exactly the conversation the client holds; and a client that leaves mid-stream must be seen
to leave.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from redis.asyncio import Redis

from tests.support.servers import AsyncWire, history_ref, markers, wire_body
from toolref import AsyncTransport, ToolReferenceManager, formats, rewrite

from .paced import (
    ANTHROPIC,
    OPENAI,
    PAYLOAD,
    TIMEOUT,
    Events,
    Frame,
    Paced,
    Stack,
    assert_app_got,
    openai_conversation,
    openai_next,
    paced_stack,
)

KINDS = ("starlette", "sse")  # StreamingResponse, EventSourceResponse
MODES = ("protocol-1", "markers", "history")


@pytest.fixture
async def stack(redis: Redis) -> AsyncIterator[Stack]:
    async with paced_stack(redis) as stack:
        yield stack


def anthropic_conversation(tag: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"conversation {tag}: read a.py"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "read_file",
                    "input": {"path": "a.py"},
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": PAYLOAD},
                {"type": "text", "text": "and b.py?"},
            ],
        },
    ]


async def read_raw(
    http: httpx.AsyncClient, paced: Paced, url: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[list[Frame], httpx.Headers]:
    frames: list[Frame] = []
    async with http.stream("POST", url, json=body, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        events = Events()
        async for line in response.aiter_lines():
            frame = events.feed(line)
            if frame is not None:
                frames.append(frame)
                if len(frames) == 1:
                    paced.release()
    return frames, response.headers


@pytest.mark.parametrize("kind", KINDS)
async def test_raw_httpx_reads_every_event_as_it_is_made(stack: Stack, kind: str) -> None:
    url = f"{stack.url}/{kind}/v1/chat/completions"
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        for mode in MODES:
            history = openai_conversation(f"{kind} {mode}")
            headers = {} if mode == "protocol-1" else {"Toolref-Protocol": "2"}
            if mode == "history":
                headers["Toolref-History"] = "?1"
            first = {"model": "m", "messages": history, "stream": True}
            frames, answer = await read_raw(http, stack.paced, url, first, headers)
            assert frames == OPENAI, mode
            assert_app_got(stack.paced, history)
            held = len(history)
            openai_next(history)
            body: dict[str, Any] = {"model": "m", "messages": history, "stream": True}
            if mode == "protocol-1":
                assert "toolref-protocol" not in answer  # passed through untouched
            elif mode == "markers":
                confirmed = json.loads(answer["toolref-references"])
                assert list(confirmed) == ["call_1"]
                outgoing = rewrite(history, formats.get("openai-chat"), set(confirmed.values()))
                assert markers(outgoing.messages) == 2  # call_1's call and result
                body["messages"] = outgoing.messages
            else:
                body = {"model": "m", "historyRef": answer["toolref-history"], "stream": True}
                body["messages"] = history[held:]
            frames, _ = await read_raw(http, stack.paced, url, body, headers)
            assert frames == OPENAI, mode
            assert_app_got(stack.paced, history)
            assert stack.paced.calls[-1].body == {"model": "m", "messages": history, "stream": True}


def _transport(mode: str) -> tuple[Any, AsyncWire]:
    """What the SDK's HTTP client sends through in `mode`, and the wire under it."""
    wire = AsyncWire()
    if mode == "protocol-1":
        return wire, wire
    manager = ToolReferenceManager(history_refs=mode == "history")
    return AsyncTransport(wire, manager=manager), wire


def assert_second_turn_sent(mode: str, wire: AsyncWire) -> None:
    request = wire.sent[-1]
    if mode == "protocol-1":
        assert "toolref-protocol" not in request.headers
        assert markers(wire_body(request)) == 0
    elif mode == "markers":
        assert markers(wire_body(request)) == 2
    else:
        assert history_ref(request) is not None


@pytest.mark.parametrize("kind", KINDS)
async def test_the_openai_sdk_reads_every_event_as_it_is_made(stack: Stack, kind: str) -> None:
    expected = [json.loads(data) for _, data in OPENAI[:-1]]  # [DONE] ends the SDK's stream
    for mode in MODES:
        transport, wire = _transport(mode)
        async with openai.AsyncOpenAI(
            base_url=f"{stack.url}/{kind}/v1",
            api_key="k",
            max_retries=0,
            timeout=TIMEOUT,
            http_client=httpx2.AsyncClient(transport=transport),
        ) as client:
            history: Any = openai_conversation(f"{kind} {mode} openai")  # the SDK's param types
            for turn in range(2):
                stream = await client.chat.completions.create(
                    model="m",
                    messages=history,
                    stream=True,
                )
                chunks = []
                async for chunk in stream:
                    chunks.append(chunk.to_dict())
                    if len(chunks) == 1:
                        stack.paced.release()
                assert chunks == expected, (mode, turn)
                assert_app_got(stack.paced, history)
                openai_next(history)
        assert_second_turn_sent(mode, wire)


@pytest.mark.parametrize("kind", KINDS)
async def test_the_anthropic_sdk_reads_every_event_as_it_is_made(stack: Stack, kind: str) -> None:
    expected = [event for event, _ in ANTHROPIC]
    for mode in MODES:
        transport, wire = _transport(mode)
        async with anthropic.AsyncAnthropic(
            base_url=f"{stack.url}/{kind}",
            api_key="k",
            max_retries=0,
            timeout=TIMEOUT,
            http_client=httpx2.AsyncClient(transport=transport),
        ) as client:
            history: Any = anthropic_conversation(f"{kind} {mode} anthropic")
            for turn in range(2):
                seen: list[str] = []
                async with client.messages.stream(
                    model="m",
                    max_tokens=100,
                    messages=history,
                ) as stream:
                    async for event in stream:
                        if not seen:
                            stack.paced.release()
                        if event.type in expected:  # the helper adds events of its own
                            seen.append(event.type)
                    reply = await stream.get_final_message()
                assert seen == expected, (mode, turn)
                assert_app_got(stack.paced, history)
                [block] = reply.content
                assert block.type == "tool_use"
                assert block.input == {"path": "b.py"}
                history.append(
                    {
                        "role": "assistant",
                        "content": [
                            {
                                "type": "tool_use",
                                "id": block.id,
                                "name": block.name,
                                "input": block.input,
                            }
                        ],
                    }
                )
                result = {
                    "type": "tool_result",
                    "tool_use_id": block.id,
                    "content": "y = 2\n" * 200,
                }
                history.append(
                    {"role": "user", "content": [result, {"type": "text", "text": "ok"}]}
                )
        assert_second_turn_sent(mode, wire)


@pytest.mark.parametrize("protocol", [1, 2])
@pytest.mark.parametrize(
    ("kind", "how"), [("poll", "is_disconnected"), ("starlette", "cancelled"), ("sse", "cancelled")]
)
async def test_a_client_that_leaves_mid_stream_is_seen_to_leave(
    stack: Stack, kind: str, how: str, protocol: int
) -> None:
    """An app asking `request.is_disconnected()` is told (the middleware hands it the real
    `receive` once the body is in); StreamingResponse and EventSourceResponse, which listen
    on `receive` themselves, cancel their generators."""
    headers = {"Toolref-Protocol": "2"} if protocol == 2 else {}
    body = {"messages": openai_conversation(f"leaving {kind} {protocol}")}
    async with (
        httpx.AsyncClient(timeout=TIMEOUT) as http,
        http.stream("POST", f"{stack.url}/{kind}/forever", json=body, headers=headers) as response,
    ):
        assert response.headers.get("toolref-protocol") == ("2" if protocol == 2 else None)
        events = Events()
        async for line in response.aiter_lines():
            if events.feed(line) == (None, "second" if kind == "poll" else "first"):
                break  # leaving the block drops the connection
    call = stack.paced.calls[-1]
    assert call.early is (False if kind == "poll" else None)
    assert call.body == body  # hydrated (protocol 2) or untouched (1): the same
    await asyncio.wait_for(call.gone.wait(), TIMEOUT)
    assert call.how == how
