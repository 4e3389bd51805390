"""Streamed tool calls handed to the registry: the real service in-process on the test engine.

An OpenAI Chat stream goes through `accumulate`; a fake tool runs each complete call, and
`call.invocation(result)` is registered with an `AsyncRegistryClient` over
`httpx.ASGITransport` (as tests/integration/test_sdk_registry.py's in-process setup does).
The ref the service answers must be the one `call.ref(result)` computes locally, and
resolving it must give the streamed arguments back. Incomplete and invalid calls cannot be
registered, and nothing reaches the engine for them. The engine comes from the shared
`redis` fixture: skipped without one locally, failed under CI=true.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from toolref import AsyncRegistryClient, Invocation
from toolref.streaming import (
    TRUNCATED,
    CallStatus,
    ToolCall,
    accumulate,
    accumulate_async,
)
from toolref.wire.errors import UnusableToolCallError
from toolref_server.app import create_app
from toolref_server.settings import Settings

from ..conftest import key_names, snapshot

BASE_URL = "http://localhost:8750"


@pytest.fixture
async def registry(redis: Redis) -> AsyncIterator[AsyncRegistryClient]:
    """A registry client for the app on the test engine (empty keyspace, lifespan run)."""
    app = create_app(Settings(redis_url="unused"), redis=redis)
    async with app.router.lifespan_context(app):
        client = AsyncRegistryClient(BASE_URL, transport=httpx.ASGITransport(app))
        async with client:
            yield client


# --- an OpenAI Chat stream ---------------------------------------------------------------


def chunk(
    *fragments: dict[str, Any], finish: str | None = None, content: str | None = None
) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if fragments:
        delta["tool_calls"] = list(fragments)
    return {
        "id": "chatcmpl-handoff",
        "object": "chat.completion.chunk",
        "created": 1_760_000_000,
        "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def opening(index: int, call_id: str, name: str) -> dict[str, Any]:
    return {
        "index": index,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": ""},
    }


def more(index: int, text: str) -> dict[str, Any]:
    return {"index": index, "function": {"arguments": text}}


READ_ARGS = {"path": "src/zoë/日本語.py", "lines": [1, 2**64], "follow": None}
SEARCH_ARGS = {"query": 'say "hi" \\ 🌍', "filters": {"lang": ["py", "md"], "depth": 2.5}}


def two_parallel_calls(finish: str = "tool_calls") -> list[Any]:
    """Two calls whose fragments interleave, as SSE `data:` payloads, ending in [DONE]."""
    read = json.dumps(READ_ARGS, ensure_ascii=False)
    search = json.dumps(SEARCH_ARGS)
    events: list[Any] = [
        chunk(content="Let me look."),
        chunk(opening(0, "call_read", "read_file")),
        chunk(more(0, read[:7])),
        chunk(opening(1, "call_search", "search")),
        chunk(more(1, search[:11])),
        chunk(more(0, read[7:20])),
        chunk(more(1, search[11:])),
        chunk(more(0, read[20:])),
        chunk(finish=finish),
    ]
    return [f"data: {json.dumps(e)}" for e in events] + ["data: [DONE]"]


def run_tool(call: ToolCall) -> Any:
    """A fake tool: what a real one would answer for these arguments."""
    assert call.runnable
    assert call.arguments is not None
    if call.name == "read_file":
        return f"# {call.arguments['path']}\nprint('hi')\n"
    if call.name == "search":
        return {"query": call.arguments["query"], "hits": [{"path": "README.md", "line": 3}]}
    raise AssertionError(f"no fake tool {call.name!r}")


async def accumulate_sync(events: list[Any]) -> list[ToolCall]:
    return accumulate(events, "openai_chat")


async def accumulate_stream(events: list[Any]) -> list[ToolCall]:
    async def stream() -> AsyncIterator[Any]:
        for event in events:
            yield event

    return await accumulate_async(stream(), "openai_chat")


ACCUMULATORS: dict[str, Callable[[list[Any]], Any]] = {
    "accumulate": accumulate_sync,
    "accumulate_async": accumulate_stream,
}


# --- hand-off ------------------------------------------------------------------------------


@pytest.mark.parametrize("how", sorted(ACCUMULATORS))
async def test_streamed_calls_register_under_the_refs_they_compute(
    registry: AsyncRegistryClient, redis: Redis, how: str
) -> None:
    calls: list[ToolCall] = await ACCUMULATORS[how](two_parallel_calls())
    assert [(c.id, c.name, c.status) for c in calls] == [
        ("call_read", "read_file", CallStatus.COMPLETE),
        ("call_search", "search", CallStatus.COMPLETE),
    ]
    assert [c.arguments for c in calls] == [READ_ARGS, SEARCH_ARGS]

    results = [run_tool(call) for call in calls]
    registered = await registry.register(
        [call.invocation(result) for call, result in zip(calls, results, strict=True)]
    )

    expected = [str(call.ref(result)) for call, result in zip(calls, results, strict=True)]
    assert [r.ref for r in registered] == expected
    assert [r.new for r in registered] == [True, True]
    assert len(await key_names(redis)) > 0

    resolved = await registry.resolve(expected)
    assert resolved.missing == []
    for call, result, ref in zip(calls, results, expected, strict=True):
        held = resolved.invocations[ref]
        assert held == Invocation(name=call.name, args=call.arguments, result=result)
        assert held.args == call.arguments
        assert (await registry.get(ref)).args == call.arguments

    # The same call and result again is the same invocation: no new record.
    again = await registry.register([calls[0].invocation(results[0])])
    assert [(r.ref, r.new) for r in again] == [(expected[0], False)]


async def test_an_error_result_registers_under_its_own_ref(registry: AsyncRegistryClient) -> None:
    call = accumulate(two_parallel_calls(), "openai_chat")[0]
    failure = {"error": "permission denied", "path": READ_ARGS["path"]}
    [failed] = await registry.register([call.invocation(failure, is_error=True)])
    assert failed.ref == str(call.ref(failure, is_error=True))
    assert failed.ref != str(call.ref(failure))
    held = await registry.get(failed.ref)
    assert held.is_error
    assert held.args == READ_ARGS


async def test_an_incomplete_call_cannot_be_registered(
    registry: AsyncRegistryClient, redis: Redis
) -> None:
    """finish_reason "length" cuts both calls short: neither can be registered."""
    calls = accumulate(two_parallel_calls(finish="length"), "openai_chat")
    assert [(c.status, c.error_type) for c in calls] == [(CallStatus.INCOMPLETE, TRUNCATED)] * 2
    assert not any(c.runnable for c in calls)
    await registry.capabilities()  # negotiated up front: the attempt below sends nothing
    before = await snapshot(redis)

    with pytest.raises(UnusableToolCallError, match="incomplete") as caught:
        await registry.register([call.invocation("never ran") for call in calls])
    assert caught.value.extra == {"callId": "call_read", "status": "incomplete"}
    with pytest.raises(UnusableToolCallError):
        calls[1].ref("never ran")

    assert await snapshot(redis) == before


async def test_only_the_usable_calls_of_a_stream_are_stored(
    registry: AsyncRegistryClient, redis: Redis
) -> None:
    """Two calls merged into one slot (invalid JSON) next to a complete call: registering
    every call fails before anything is sent; registering the runnable ones stores just them."""
    good = json.dumps(SEARCH_ARGS)
    events = [
        chunk(opening(0, "call_merged", "read_file")),
        chunk(more(0, '{"path": "a.py"}')),
        chunk(more(0, '{"path": "b.py"}')),
        chunk(opening(1, "call_search", "search")),
        chunk(more(1, good)),
        chunk(finish="tool_calls"),
        "[DONE]",
    ]
    merged, search = accumulate(events, "openai_chat")
    assert merged.status is CallStatus.INVALID
    assert merged.raw_arguments == '{"path": "a.py"}{"path": "b.py"}'
    assert search.status is CallStatus.COMPLETE
    await registry.capabilities()
    before = await snapshot(redis)

    with pytest.raises(UnusableToolCallError, match="invalid"):
        await registry.register([call.invocation("x") for call in (search, merged)])
    assert await snapshot(redis) == before

    result = run_tool(search)
    [stored] = await registry.register(
        [c.invocation(result) for c in (search, merged) if c.runnable]
    )
    assert stored.ref == str(search.ref(result))
    assert (await registry.get(stored.ref)).args == SEARCH_ARGS
    assert await snapshot(redis) != before
