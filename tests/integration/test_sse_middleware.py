"""Event streams behind `ToolRefMiddleware`, over real sockets, read as clients read them.

The paced backend (tests/integration/paced.py) streams the providers' own events, with
Starlette's `StreamingResponse` and with sse-starlette's `EventSourceResponse`, behind the
middleware, hydrating through the registry on the test engine. Clients read those streams
with raw httpx, the openai SDK and the anthropic SDK, on protocol 1, on protocol 2 with
`toolRef` markers for payloads confirmed the turn before (raw httpx), and as edits of the
request the turn before (raw httpx with an `Editor`; the SDKs through
`toolref.AsyncTransport`). Every event must arrive, in order, the first before the app has
made the second; the app must receive exactly the conversation the client holds; and a
client that leaves mid-stream must be seen to leave.
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

from tests.support.servers import AsyncWire, edit_header, markers, wire_body
from toolref import AsyncTransport, ToolReferenceManager, formats, rewrite
from toolref.edits.wire import VERSION as EDITS_VERSION
from toolref.sending.editor import Editor
from toolref.wire.encoding import dumps_json

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
MODES = ("protocol-1", "markers", "edits")
SDK_MODES = ("protocol-1", "edits")  # the transport sends no markers: edits


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
    http: httpx.AsyncClient,
    paced: Paced,
    url: str,
    body: dict[str, Any] | bytes,
    headers: dict[str, str],
) -> tuple[list[Frame], httpx.Headers]:
    """POST `body` (JSON, or bytes as they are) and read the events as they come."""
    frames: list[Frame] = []
    sent = {"content": body} if isinstance(body, bytes) else {"json": body}
    async with http.stream("POST", url, headers=headers, **sent) as response:
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
            headers = {
                "protocol-1": {},
                "markers": {"Toolref-Protocol": "2"},
                "edits": {"Toolref-Edits": "2"},  # the offer
            }[mode]
            first = {"model": "m", "messages": history, "stream": True}
            frames, answer = await read_raw(http, stack.paced, url, first, headers)
            assert frames == OPENAI, mode
            assert_app_got(stack.paced, history)
            openai_next(history)
            whole = {"model": "m", "messages": history, "stream": True}
            body: dict[str, Any] | bytes = whole
            recipe = None
            if mode == "protocol-1":
                assert "toolref-protocol" not in answer  # passed through untouched
                assert "toolref-edits" not in answer
            elif mode == "markers":
                confirmed = json.loads(answer["toolref-references"])
                assert list(confirmed) == ["call_1"]
                outgoing = rewrite(history, formats.get("openai-chat"), set(confirmed.values()))
                assert markers(outgoing.messages) == 2  # call_1's call and result
                body = {**whole, "messages": outgoing.messages}
            else:
                assert answer["toolref-edits"] == str(EDITS_VERSION)  # it reads edits
                edit = Editor().prepare(
                    [("content-type", "application/json")], dumps_json(whole), "messages"
                )
                assert edit is not None
                body, headers, recipe = edit.body, dict(edit.headers), edit.ref
            frames, answer = await read_raw(http, stack.paced, url, body, headers)
            assert frames == OPENAI, mode
            assert_app_got(stack.paced, history)
            assert stack.paced.calls[-1].body == whole
            if mode == "edits":
                assert stack.paced.calls[-1].raw == dumps_json(whole)
                assert answer["toolref-history"] == recipe


def _transport(mode: str) -> tuple[Any, AsyncWire]:
    """What the SDK's HTTP client sends through in `mode`, and the wire under it."""
    wire = AsyncWire()
    if mode == "protocol-1":
        return wire, wire
    return AsyncTransport(wire, manager=ToolReferenceManager()), wire


def assert_second_turn_sent(mode: str, wire: AsyncWire) -> None:
    request = wire.sent[-1]
    if mode == "protocol-1":
        assert "toolref-protocol" not in request.headers
        assert "toolref-edits" not in request.headers
        assert markers(wire_body(request)) == 0
    else:
        assert edit_header(request) is not None


@pytest.mark.parametrize("kind", KINDS)
async def test_the_openai_sdk_reads_every_event_as_it_is_made(stack: Stack, kind: str) -> None:
    expected = [json.loads(data) for _, data in OPENAI[:-1]]  # [DONE] ends the SDK's stream
    for mode in SDK_MODES:
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
    for mode in SDK_MODES:
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
