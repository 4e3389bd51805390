"""Hydrate, as review found it (the REST service, 0.3): every bound checked before anything
is registered, summary mode's own CPU work off the event loop for large bodies, and the
fast fill path never filling a look-alike of a marker whose key is written escaped."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import httpx
import msgpack
import pytest
from redis.asyncio import Redis

from toolref.asgi.workers import weight
from toolref.wire.canonical import digest_of
from toolref_server.registry import compaction
from toolref_server.routes import messages as messages_routes

from ..conftest import Api, snapshot
from ..support.threads import threads_of
from .test_messages import hydrate, optimize


def call(n: int, result: str, name: str = "read_file") -> list[dict[str, Any]]:
    """One openai-chat tool call (`call_<n>`) and its result."""
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{n}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps({"n": n})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"call_{n}", "content": result},
    ]


def marked(n: int, ref: str, name: str = "read_file") -> list[dict[str, Any]]:
    """`call` with its payloads made markers of `ref` (as optimize answers them)."""
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"call_{n}", "type": "function", "function": {"name": name, "toolRef": ref}}
            ],
        },
        {"role": "tool", "tool_call_id": f"call_{n}", "toolRef": ref},
    ]


# --- 1. a refused hydrate registers nothing ----------------------------------------------------


async def test_a_hydrate_past_its_fill_bound_registers_nothing(make_api: Api, redis: Redis) -> None:
    """Found in review: the fill bound (413 `decompressed-too-large`) was checked after the
    full payloads the body carried were registered, so a refused request had stored them.
    Every bound is checked before anything is written now."""
    api = await make_api(max_decompressed_bytes=64 * 1024)
    big = "x" * 20_000
    optimized = await optimize(api, [{"role": "user", "content": "go"}, *call(0, big)])
    ref = optimized["toolReferences"]["call_0"]
    fresh = call(9, "a result sent in full")
    # Four markers of a 20 KB record fill to 80 KB, past the 64 KB limit.
    messages = [{"role": "user", "content": "go"}]
    for n in range(4):
        messages += marked(n, ref)
    messages += fresh
    before = await snapshot(redis)
    response = await hydrate(api, messages)
    assert response.status_code == 413, response.text
    problem = response.json()
    assert problem["type"] == "urn:toolref:problem:decompressed-too-large"
    assert problem["limit"] == 64 * 1024
    assert "TOOLREF_MAX_DECOMPRESSED_BYTES" in problem["detail"]
    assert await snapshot(redis) == before
    new_ref = digest_of(
        {"name": "read_file", "args": json.dumps({"n": 9}), "result": "a result sent in full"}
    ).ref
    missing = await api.post("/v1/invocations:findMissing", json={"refs": [new_ref]})
    assert missing.json() == {"missing": [new_ref]}
    # Within the bound the same fresh call is registered as ever.
    answered = await hydrate(api, [*messages[:3], *fresh])
    assert answered.status_code == 200, answered.text
    assert answered.json()["toolReferences"]["call_9"] == new_ref


# --- 4. summary mode's CPU work off the event loop for a large body -----------------------------


@pytest.mark.parametrize("large", [False, True], ids=["small-inline", "large-offloaded"])
async def test_summary_mode_works_off_the_event_loop_on_a_large_body(
    make_api: Api, monkeypatch: pytest.MonkeyPatch, large: bool
) -> None:
    """Found in review: summary mode's own work (which results are older, their
    placeholders, the texts with them) ran on the event loop: 1.7 s on a 54 MB hydrate.
    It runs where the rest of a hydrate's work does: in a worker thread for a body of
    `TOOLREF_OFFLOAD_BYTES` or more, inline for a smaller one."""
    api = await make_api(offload_bytes=200_000)
    steps = ("older_results", "replacements", "apply_text")
    threads = {step: threads_of(monkeypatch, compaction, step) for step in steps}
    size = 40_000 if large else 2_000
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for n in range(5):
        messages += call(n, f"line {n}\n" * (size // 7))
    body = {"messages": messages, "mode": "summary", "keepRecent": 1}
    assert (weight(json.dumps(body)) >= 200_000) is large  # its containers too
    response = await api.post("/v1/messages:hydrate", json=body)
    assert response.status_code == 200, response.text[:300]
    assert response.json()["optimizationStats"]["summarized"] == 4
    main = threading.main_thread().name
    for step in steps:
        assert len(threads[step]) == 1, step
        if large:
            assert threads[step][0].startswith("toolref-work"), (step, threads[step])
        else:
            assert threads[step] == [main], (step, threads[step])


@pytest.mark.parametrize("large", [False, True], ids=["small-inline", "large-offloaded"])
async def test_a_msgpack_answer_is_made_off_the_event_loop_when_large(
    make_api: Api, monkeypatch: pytest.MonkeyPatch, large: bool
) -> None:
    """Found in review: a client that asks for msgpack had its answer's messages parsed
    again and packed on the event loop (the JSON answer splices their text). That runs in a
    worker thread for answers of `TOOLREF_OFFLOAD_BYTES` or more, inline for smaller ones;
    the answer is the same either way."""
    api = await make_api(offload_bytes=200_000)
    threads = threads_of(monkeypatch, messages_routes, "as_msgpack")
    size = 40_000 if large else 2_000
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for n in range(5):
        messages += call(n, f"line {n}\n" * (size // 7))
    body = {"messages": messages}
    assert (weight(json.dumps(body)) >= 200_000) is large  # its containers too
    response = await api.post(
        "/v1/messages:hydrate", json=body, headers={"Accept": "application/msgpack"}
    )
    assert response.status_code == 200, response.text[:300]
    assert response.headers["content-type"].startswith("application/msgpack")
    assert msgpack.unpackb(response.content)["messages"] == messages
    assert len(threads) == 1
    if large:
        assert threads[0].startswith("toolref-work"), threads
    else:
        assert threads == [threading.main_thread().name]


# --- 5. the fast fill path and escaped keys --------------------------------------------------


def raw_body(texts: list[str]) -> bytes:
    return ('{"messages":[' + ",".join(texts) + "]}").encode()


async def test_an_escaped_marker_key_is_filled_where_it_is_not_at_a_look_alike(
    api: httpx.AsyncClient,
) -> None:
    """Found in review: the fast fill path found markers by their `"toolRef":"tr_..."`
    text. A marker whose key is written escaped (`"tool\\u0052ef"`, the same key to a
    parser) was not found, and a look-alike member elsewhere in the message, with the same
    ref, was filled in its place. A message whose markers may be written with escapes is
    filled by the exact path (the message walked) now."""
    result = "import os\n" * 50
    optimized = await optimize(api, [{"role": "user", "content": "go"}, *call(1, result)])
    ref = optimized["toolReferences"]["call_1"]
    args = json.dumps({"n": 1})
    look_alike = '{"toolRef":"' + ref + '"}'
    texts = [
        '{"role":"user","content":"go"}',
        '{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",'
        '"function":{"name":"read_file","tool\\u0052ef":"'
        + ref
        + '"},"meta":'
        + look_alike
        + "}]}",
        '{"role":"tool","tool_call_id":"call_1","tool\\u0052ef":"'
        + ref
        + '","meta":'
        + look_alike
        + "}",
    ]
    response = await api.post(
        "/v1/messages:hydrate",
        content=raw_body(texts),
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 200, response.text
    messages = response.json()["messages"]
    assert messages[1]["tool_calls"][0] == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "read_file", "arguments": args},
        "meta": {"toolRef": ref},  # data: kept as it was
    }
    assert messages[2] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": result,
        "meta": {"toolRef": ref},
    }


@pytest.mark.parametrize(
    "spelling",
    [
        pytest.param(lambda ref: '"toolRef":"' + ref + '"', id="plain"),
        pytest.param(lambda ref: '"tool\\u0052ef":"' + ref + '"', id="escaped-key"),
        pytest.param(lambda ref: '"toolRef":"tr\\u005f' + ref[3:] + '"', id="escaped-ref"),
        pytest.param(lambda ref: '"\\u0074oolRef" : "' + ref + '"', id="escaped-first"),
    ],
)
async def test_every_spelling_of_a_marker_fills_as_the_parsed_message_says(
    api: httpx.AsyncClient, spelling: Callable[[str], str]
) -> None:
    """However the marker's member is written, hydrate fills the marker and nothing else:
    a message with a look-alike and a marker spelled with escapes answers as the exact path
    (the value fill) does."""
    optimized = await optimize(api, [{"role": "user", "content": "go"}, *call(1, "out")])
    ref = optimized["toolReferences"]["call_1"]
    texts = [
        '{"role":"user","content":"go"}',
        '{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",'
        '"function":{"name":"read_file",' + spelling(ref) + "}}]}",
        '{"role":"tool","tool_call_id":"call_1",'
        + spelling(ref)
        + ',"data":[{"toolRef":"'
        + ref
        + '"}]}',
    ]
    response = await api.post(
        "/v1/messages:hydrate",
        content=raw_body(texts),
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 200, response.text
    messages = response.json()["messages"]
    assert messages[1]["tool_calls"][0]["function"] == {
        "name": "read_file",
        "arguments": json.dumps({"n": 1}),
    }
    assert messages[2] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "out",
        "data": [{"toolRef": ref}],
    }


async def test_a_message_nested_too_deep_is_refused_naming_the_body_limit(make_api: Api) -> None:
    """Found with the register route's switch to the messages' depth check: a message
    nested past the limit was refused naming the limit less 2 (the depth a message sits
    at), `deeper than 30` for `TOOLREF_MAX_DEPTH=32`. The detail names the limit set."""
    api = await make_api(max_depth=32)
    deep: Any = "x"
    for _ in range(40):
        deep = [deep]
    response = await hydrate(api, [{"role": "user", "content": deep}])
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["type"] == "urn:toolref:problem:nesting-too-deep"
    assert problem["limit"] == 32
    assert "deeper than 32 levels" in problem["detail"]
