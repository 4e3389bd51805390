"""Streams recorded from real providers by public projects (tests/fixtures/streams/recorded,
provenance in its README) give exactly the calls the provider meant, in every form a client
meets them: SSE frames, data payloads, decoded dicts, the official SDK's own stream objects
(sync and async, replayed over HTTP) and the SDK event models built with `model_validate`."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
from anthropic import Anthropic, AsyncAnthropic
from anthropic.types import MessageParam, RawMessageStreamEvent
from openai import AsyncOpenAI, OpenAI
from openai.types.chat import ChatCompletionChunk, ChatCompletionUserMessageParam
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from tests.fixtures.streams import replay
from toolref.streaming import (
    ABORTED,
    CallStatus,
    ToolBuffer,
    ToolCall,
    accumulate,
    accumulate_async,
    adapter_for,
)

COMPLETE, INVALID, INCOMPLETE = CallStatus.COMPLETE, CallStatus.INVALID, CallStatus.INCOMPLETE


@dataclass(frozen=True)
class Want:
    id: str
    name: str
    status: CallStatus
    arguments: dict[str, Any] | None
    error_type: str | None = None
    provider_executed: bool = False
    meta: dict[str, Any] = field(default_factory=dict)  # a subset of the call's meta


@dataclass(frozen=True)
class Recorded:
    provider: str
    calls: list[Want]
    finish: str | None  # the finish reason the buffer records for turn 0
    validates: bool = True  # every event builds with the SDK model's `model_validate`
    helper_fails: str | None = None  # how the SDK's own stream helper fails on it


SIGNATURE = "EqUCCqICAb4+9vsh8Pd5taZVoPzSvjWWwzBrvhEQWBLCGa7IdY8FBMm7Z6dCKFU3Ft0la15gF7RaHe1N"
THEME_SIGNATURE = "AY89a18a8/Loc2wl5oft+F3qHoU4VPX0L9ljRtKxfjhEuimSIqhzYEJAGT5Sgd8OH2C+Te2YY1DK"
WEATHER_SF = {"location": "San Francisco"}
RECIPE = {
    "recipe": {
        "ingredients": [
            {"amount": "16 oz", "name": "Lasagna noodles"},
            {"amount": "1 lb", "name": "Ground beef"},
        ],
        "name": "Lasagna",
        "steps": [
            "Preheat oven to 375°F (190°C).",
            "Cook lasagna noodles according to package directions, drain and set aside.",
            "Brown ground beef with minced garlic in a skillet. Drain fat and stir in tomato "
            "sauce. Simmer for 10 minutes.",
            "In a bowl, mix ricotta cheese, egg, salt, pepper, and Parmesan cheese.",
            "In a 9x13 baking dish, spread a thin layer of meat sauce.",
        ],
    }
}
ITEMS = {
    "operations": [
        {"action": "add", "description": "Fresh red apple", "itemid": "apple_001", "price": 0.5},
        {
            "action": "add",
            "description": "Ripe yellow banana",
            "itemid": "banana_001",
            "price": 0.3,
        },
    ]
}

RECORDED: dict[str, Recorded] = {
    "openai_chat_gpt4o_parallel.sse": Recorded(
        "openai_chat",
        [
            Want(
                "call_JMW1whyEaYG438VE1OIflxA2",
                "GetWeatherArgs",
                COMPLETE,
                {"city": "Edinburgh", "country": "GB", "units": "c"},
            ),
            Want(
                "call_DNYTawLBoN8fj3KN6qU9N1Ou",
                "get_stock_price",
                COMPLETE,
                {"ticker": "AAPL", "exchange": "NASDAQ"},
            ),
        ],
        "tool_calls",
    ),
    "openai_chat_deepseek_reasoning_then_call.jsonl": Recorded(
        "openai_chat",
        [Want("call_00_IhCAliIHtM9gKpgfqbBV9873", "weather", COMPLETE, WEATHER_SF)],
        "tool_calls",
    ),
    "openai_chat_groq_whole_call.jsonl": Recorded(
        "openai_chat", [Want("tk85n1k4m", "weather", COMPLETE, {})], "tool_calls"
    ),
    "openai_chat_mistral_whole_call_no_index.jsonl": Recorded(
        "openai_chat",
        [Want("gSIMJiOkT", "weather", COMPLETE, WEATHER_SF)],
        "tool_calls",
        validates=False,  # no tool_calls[].index, which the SDK type requires
        helper_fails="list indices must be integers",  # openai/openai-python#2806
    ),
    "openai_chat_glm_empty_name_continuation.jsonl": Recorded(
        "openai_chat",
        [
            Want(
                "chatcmpl-tool-9f149c74c42f265b",
                "webSearchTool",
                COMPLETE,
                {"query": "current Berlin weather"},
            )
        ],
        "tool_calls",
    ),
    "openai_chat_grok_reasoning_then_whole_call.jsonl": Recorded(
        "openai_chat", [Want("call_79382389", "weather", COMPLETE, WEATHER_SF)], "tool_calls"
    ),
    "openai_responses_gpt51_call.jsonl": Recorded(
        "openai_responses",
        [
            Want(
                "call_2FQdm3Br7Qb35YUBSkDR7kue",
                "get_weather",
                COMPLETE,
                {"city": "Beijing"},
                meta={
                    "item_id": "fc_0775572d10a16b66006a8d8528e8a887d2a32ef76463d40c98",
                    "output_index": 0,
                    "status": "completed",
                },
            )
        ],
        "completed",
    ),
    "openai_responses_deepseek_reasoning_then_call.jsonl": Recorded(
        "openai_responses",
        [
            Want(
                "call_00_N9BNUr3rAx4twPOHpyRN4076",
                "weather",
                COMPLETE,
                WEATHER_SF,
                meta={"item_id": "851c0122-fbf0-4c84-b938-34a1f813ba21", "output_index": 1},
            )
        ],
        "completed",
        validates=False,  # usage lacks input_tokens_details.cache_write_tokens
    ),
    "anthropic_tool_use.sse": Recorded(
        "anthropic",
        [
            Want(
                "toolu_01NRLabsLyVHZPKxbKvkfSMn",
                "get_weather",
                COMPLETE,
                {"location": "Paris"},
                meta={"caller": {"type": "direct"}, "block_index": 1},
            )
        ],
        "tool_use",
    ),
    "anthropic_fine_grained_max_tokens.sse": Recorded(
        "anthropic",
        [Want("toolu_01EKqbqmZrGRXy18eN7m9kvY", "make_file", INCOMPLETE, None, "truncated")],
        "max_tokens",
    ),
    "anthropic_invalid_json.sse": Recorded(
        "anthropic",
        [Want("toolu_01NRLabsLyVHZPKxbKvkfSMn", "get_weather", INVALID, None)],
        "tool_use",
        helper_fails="Unable to parse tool parameter JSON",  # raised out of the iterator
    ),
    "anthropic_server_tool_use.sse": Recorded(
        "anthropic",
        [
            Want(
                "srvtoolu_01WebSearch",
                "web_search",
                COMPLETE,
                {"query": "weather in Paris"},
                provider_executed=True,
            )
        ],
        "end_turn",
    ),
    "anthropic_message_start_content.jsonl": Recorded(
        "anthropic",
        [
            Want(
                "toolu_followup",
                "lookup_customer",
                COMPLETE,
                {"id": "customer_123"},
                meta={
                    "block_index": 2,
                    "caller": {
                        "type": "code_execution_20250825",
                        "tool_id": "srvtoolu_unrelated_caller",
                    },
                },
            )
        ],
        "tool_use",
    ),
    "anthropic_tool_no_args.jsonl": Recorded(
        "anthropic",
        [Want("toolu_01QE1WLsSVp5hy5Q3GmGTmjP", "updateIssueList", COMPLETE, {})],
        "tool_use",
    ),
    "gemini_call_with_signature.jsonl": Recorded(
        "gemini",
        [Want("call_toolref_1", "weather", COMPLETE, WEATHER_SF)],
        "STOP",
    ),
    "gemini_vertex_no_args_then_streamed_args.jsonl": Recorded(
        "gemini",
        [
            Want("call_toolref_1", "read_theme", COMPLETE, {}),
            Want("call_toolref_2", "read_screen", COMPLETE, {"id": "A"}),
            Want("call_toolref_3", "read_screen", COMPLETE, {"id": "B"}),
            Want("call_toolref_4", "read_screen", COMPLETE, {"id": "C"}),
        ],
        "STOP",
    ),
    "gemini_vertex_array_args_no_terminal.jsonl": Recorded(
        "gemini", [Want("call_toolref_1", "writeItems", COMPLETE, ITEMS)], "STOP"
    ),
    "gemini_vertex_nested_args.jsonl": Recorded(
        "gemini", [Want("call_toolref_1", "cookRecipe", COMPLETE, RECIPE)], "STOP"
    ),
    "bedrock_kimi_text_then_call.jsonl": Recorded(
        "bedrock",
        [
            Want(
                "functions.read_file:1",
                "read_file",
                COMPLETE,
                {"target_file": "src/cursor-config.ts"},
                meta={"block_index": 1},
            )
        ],
        "tool_use",
    ),
}
SDK_PROVIDERS = {"openai_chat", "openai_responses", "anthropic"}
EVENT_TYPES: dict[str, Any] = {
    "openai_chat": TypeAdapter(ChatCompletionChunk),
    "openai_responses": TypeAdapter(ResponseStreamEvent),
    "anthropic": TypeAdapter(RawMessageStreamEvent),
}


def path(name: str) -> Path:
    return replay.RECORDED / name


def check(name: str, calls: list[ToolCall]) -> None:
    wanted = RECORDED[name].calls
    got = [(c.id, c.name, c.status, c.arguments, c.error_type) for c in calls]
    assert got == [(w.id, w.name, w.status, w.arguments, w.error_type) for w in wanted]
    for call, want in zip(calls, wanted, strict=True):
        assert call.provider_executed is want.provider_executed
        assert {key: call.meta.get(key) for key in want.meta} == want.meta
        assert call.runnable is (want.status is COMPLETE and not want.provider_executed)


# --- the official SDKs, reading the recorded body over HTTP ---


HEADERS = {"content-type": "text/event-stream"}
BASE = "http://recorded.test"
ASK: MessageParam = {"role": "user", "content": "go"}
CHAT_ASK: ChatCompletionUserMessageParam = {"role": "user", "content": "go"}


def _transport(body: bytes) -> httpx2.MockTransport:
    """Both SDKs run on httpx2; the body is served as the provider sent it."""
    return httpx2.MockTransport(lambda request: httpx2.Response(200, headers=HEADERS, content=body))


def sdk_stream(provider: str, body: bytes) -> Iterator[Any]:
    """What `create(..., stream=True)` yields for that body."""
    http = httpx2.Client(transport=_transport(body))
    if provider == "anthropic":
        claude = Anthropic(api_key="test", base_url=BASE, http_client=http)
        return iter(claude.messages.create(model="m", max_tokens=64, messages=[ASK], stream=True))
    client = OpenAI(api_key="test", base_url=f"{BASE}/v1", http_client=http)
    if provider == "openai_responses":
        return iter(client.responses.create(model="m", input="go", stream=True))
    return iter(client.chat.completions.create(model="m", messages=[CHAT_ASK], stream=True))


async def sdk_stream_async(provider: str, body: bytes) -> AsyncIterator[Any]:
    http = httpx2.AsyncClient(transport=_transport(body))
    stream: AsyncIterable[Any]
    if provider == "anthropic":
        claude = AsyncAnthropic(api_key="test", base_url=BASE, http_client=http)
        stream = await claude.messages.create(model="m", max_tokens=64, messages=[ASK], stream=True)
    else:
        client = AsyncOpenAI(api_key="test", base_url=f"{BASE}/v1", http_client=http)
        if provider == "openai_responses":
            stream = await client.responses.create(model="m", input="go", stream=True)
        else:
            stream = await client.chat.completions.create(
                model="m", messages=[CHAT_ASK], stream=True
            )
    async for event in stream:
        yield event


def body(name: str) -> bytes:
    return replay.sse_body(path(name), named=RECORDED[name].provider != "openai_chat")


def validated(name: str) -> list[Any]:
    """Each event built with the SDK's event model (pings are no such event: the SDK skips
    them)."""
    adapter = EVENT_TYPES[RECORDED[name].provider]
    events = [event for event in replay.dicts(path(name)) if event.get("type") != "ping"]
    return [adapter.validate_python(event) for event in events]


FORMS: dict[str, Callable[[str], list[ToolCall]]] = {
    "frames": lambda name: accumulate(replay.frames(path(name)), RECORDED[name].provider),
    "payloads": lambda name: accumulate(replay.payloads(path(name)), RECORDED[name].provider),
    "dicts": lambda name: accumulate(replay.dicts(path(name)), RECORDED[name].provider),
    "bytes": lambda name: accumulate(
        [data.encode() for data in replay.payloads(path(name))], RECORDED[name].provider
    ),
}
SDK_FORMS: dict[str, Callable[[str], list[ToolCall]]] = {
    "sdk": lambda name: accumulate(
        sdk_stream(RECORDED[name].provider, body(name)), RECORDED[name].provider
    ),
    "sdk-async": lambda name: asyncio.run(
        accumulate_async(
            sdk_stream_async(RECORDED[name].provider, body(name)), RECORDED[name].provider
        )
    ),
    "validated": lambda name: accumulate(validated(name), RECORDED[name].provider),
}


def helper_calls(name: str) -> list[ToolCall]:
    """Through the SDK's stream helper (`.stream()`), which wraps and adds to the events."""
    provider, http = RECORDED[name].provider, httpx2.Client(transport=_transport(body(name)))
    if provider == "anthropic":
        claude = Anthropic(api_key="test", base_url=BASE, http_client=http)
        with claude.messages.stream(model="m", max_tokens=64, messages=[ASK]) as events:
            return accumulate(events, provider)
    client = OpenAI(api_key="test", base_url=f"{BASE}/v1", http_client=http)
    if provider == "openai_responses":
        with client.responses.stream(model="m", input="go") as stream:
            return accumulate(stream, provider)
    with client.chat.completions.stream(model="m", messages=[CHAT_ASK]) as chunks:
        return accumulate(chunks, provider)


async def helper_calls_async(name: str) -> list[ToolCall]:
    provider, http = RECORDED[name].provider, httpx2.AsyncClient(transport=_transport(body(name)))
    if provider == "anthropic":
        claude = AsyncAnthropic(api_key="test", base_url=BASE, http_client=http)
        async with claude.messages.stream(model="m", max_tokens=64, messages=[ASK]) as events:
            return await accumulate_async(events, provider)
    client = AsyncOpenAI(api_key="test", base_url=f"{BASE}/v1", http_client=http)
    if provider == "openai_responses":
        async with client.responses.stream(model="m", input="go") as stream:
            return await accumulate_async(stream, provider)
    async with client.chat.completions.stream(model="m", messages=[CHAT_ASK]) as chunks:
        return await accumulate_async(chunks, provider)


SDK_FORMS["helper"] = helper_calls
SDK_FORMS["helper-async"] = lambda name: asyncio.run(helper_calls_async(name))


def _cases() -> Iterable[Any]:
    for name, recorded in RECORDED.items():
        for form in FORMS:
            yield pytest.param(name, form, id=f"{name}-{form}")
        if recorded.provider not in SDK_PROVIDERS:
            continue
        for form in SDK_FORMS:
            if form == "validated" and not recorded.validates:
                continue
            if form.startswith("helper") and recorded.helper_fails:
                continue
            yield pytest.param(name, form, id=f"{name}-{form}")


def test_every_recorded_file_has_its_expected_calls_and_its_provenance() -> None:
    names = sorted(p.name for p in replay.files())
    assert sorted(RECORDED) == names
    readme = (replay.RECORDED / "README.md").read_text()
    rows = re.findall(r"^\| `([\w.]+)` \| `(\w+)` \|", readme, re.MULTILINE)
    assert sorted(rows) == sorted((name, RECORDED[name].provider) for name in names)


@pytest.mark.parametrize(("name", "form"), list(_cases()))
def test_recorded_stream_gives_the_calls_the_provider_meant(name: str, form: str) -> None:
    check(name, {**FORMS, **SDK_FORMS}[form](name))


@pytest.mark.parametrize("name", [n for n, r in RECORDED.items() if not r.validates])
def test_recordings_that_the_sdk_models_reject_still_stream_through_the_sdk(name: str) -> None:
    """These providers break a required field of the SDK's types: `model_validate` refuses
    them, yet the SDK's own stream builds them leniently, and so must we."""
    with pytest.raises(ValueError, match="Field required"):
        validated(name)
    check(name, SDK_FORMS["sdk"](name))


@pytest.mark.parametrize("name", [n for n, r in RECORDED.items() if r.helper_fails])
def test_recordings_the_sdk_helpers_fail_on_still_stream_through_create(name: str) -> None:
    """The SDK's `.stream()` helper raises out of its iterator on these (openai: a tool call
    without `index`; anthropic: invalid JSON in a block), so no call survives; the plain
    `create(stream=True)` events give every call, the unusable ones marked."""
    with pytest.raises((TypeError, ValueError), match=RECORDED[name].helper_fails or ""):
        helper_calls(name)
    check(name, SDK_FORMS["sdk"](name))


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_recorded_finish_reason_and_runnable_calls(name: str) -> None:
    recorded = RECORDED[name]
    adapter, buffer = adapter_for(recorded.provider), ToolBuffer(progress_interval=0)
    for data in replay.payloads(path(name)):
        buffer.feed_all(adapter.feed(data))
    buffer.feed_all(adapter.end())
    buffer.close()
    assert buffer.finish_reasons.get(0) == recorded.finish
    assert buffer.has_tool_calls is any(
        w.status is COMPLETE and not w.provider_executed for w in recorded.calls
    )


def test_recorded_raw_arguments_of_calls_that_cannot_run() -> None:
    [cut] = accumulate(replay.payloads(path("anthropic_fine_grained_max_tokens.sse")), "anthropic")
    assert cut.raw_arguments.startswith('{"filename": "taxes.txt", "lines_of_text": [\n')
    assert cut.raw_arguments.endswith('"Filing taxes')
    [bad] = accumulate(replay.payloads(path("anthropic_invalid_json.sse")), "anthropic")
    assert bad.raw_arguments == '{"location": "Paris", "unit": celsius}'
    assert "not valid JSON" in (bad.error or "")


def test_recorded_gemini_signatures_stay_on_the_signed_call() -> None:
    [call] = accumulate(replay.payloads(path("gemini_call_with_signature.jsonl")), "gemini")
    assert call.meta["thought_signature"].startswith(SIGNATURE)
    calls = accumulate(
        replay.payloads(path("gemini_vertex_no_args_then_streamed_args.jsonl")), "gemini"
    )
    assert [c.meta.get("thought_signature", "")[:76] for c in calls] == [
        THEME_SIGNATURE,
        "",
        "",
        "",
    ]
    assert all(c.parent_id == "_vr4aYiWEJnYodAPkujX0QM" for c in calls)


# --- recordings replayed as routers and cut connections deliver them ---


def _without_finish(name: str) -> list[dict[str, Any]]:
    """The recorded chunks as a router that drops finish_reason sends them: no finish
    reason, and (through the SDK) no [DONE]."""
    events = []
    for event in replay.dicts(path(name)):
        for choice in event.get("choices") or ():
            choice.pop("finish_reason", None)
        events.append(event)
    return events


@pytest.mark.parametrize(
    "name", [n for n, r in RECORDED.items() if r.provider == "openai_chat" and r.validates]
)
def test_recorded_chat_streams_without_finish_reason_through_the_sdk(name: str) -> None:
    chunks = [ChatCompletionChunk.model_validate(event) for event in _without_finish(name)]
    check(name, accumulate(iter(chunks), "openai_chat"))

    async def stream() -> AsyncIterator[ChatCompletionChunk]:
        for chunk in chunks:
            yield chunk

    check(name, asyncio.run(accumulate_async(stream(), "openai_chat")))


def test_a_recorded_parallel_stream_cut_inside_the_second_call() -> None:
    """Cut after `{"ti` of the second call: the first call is whole and runs; the second
    never does."""
    events = _without_finish("openai_chat_gpt4o_parallel.sse")
    cut = next(i for i, e in enumerate(events) if '{\\"ti' in json.dumps(e)) + 1
    chunks = [ChatCompletionChunk.model_validate(event) for event in events[:cut]]
    first, second = accumulate(iter(chunks), "openai_chat")
    assert (first.status, first.arguments) == (
        COMPLETE,
        {"city": "Edinburgh", "country": "GB", "units": "c"},
    )
    assert (second.status, second.error_type, second.raw_arguments) == (
        INCOMPLETE,
        ABORTED,
        '{"ti',
    )
