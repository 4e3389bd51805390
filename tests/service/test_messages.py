"""messages:optimize and messages:hydrate against a real engine."""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from toolref.wire.canonical import Ref, digest_of
from toolref_server.storage.store import Store

from ..conftest import SHARED, Api, need, snapshot

ARGS = '{"path": "src/app.py"}'
FILE = "import os\n" * 200


def openai_chat() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Read app.py"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": ARGS},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"cmd": "ls"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": FILE},
        {"role": "tool", "tool_call_id": "call_2", "content": "app.py\nREADME.md\n"},
        {"role": "assistant", "content": "Done."},
    ]


def anthropic() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Read app.py"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "Read",
                    "input": {"file_path": "app.py"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "Bash",
                    "input": {"command": "false"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": FILE}],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "exit 1",
                    "is_error": True,
                },
            ],
        },
    ]


def openai_responses() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Read app.py"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "read_file",
            "arguments": ARGS,
            "id": "fc_1",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": FILE},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Done."}],
        },
    ]


def ai_sdk_v4() -> list[dict[str, Any]]:
    return [
        {"id": "u1", "role": "user", "content": "Read app.py"},
        {
            "id": "a1",
            "role": "assistant",
            "content": "",
            "toolInvocations": [
                {
                    "state": "result",
                    "toolCallId": "c1",
                    "toolName": "readFile",
                    "args": {"path": "app.py"},
                    "result": FILE,
                },
                {
                    "state": "call",
                    "toolCallId": "c2",
                    "toolName": "readFile",
                    "args": {"path": "b.py"},
                },
            ],
        },
    ]


def ai_sdk_v5() -> list[dict[str, Any]]:
    return [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Read app.py"}]},
        {
            "id": "a1",
            "role": "assistant",
            "parts": [
                {"type": "step-start"},
                {
                    "type": "tool-readFile",
                    "toolCallId": "c1",
                    "state": "output-available",
                    "input": {"path": "app.py"},
                    "output": FILE,
                },
                {
                    "type": "dynamic-tool",
                    "toolName": "mcp_x",
                    "toolCallId": "c2",
                    "state": "output-error",
                    "input": {},
                    "errorText": "boom",
                },
            ],
        },
    ]


def gemini() -> list[dict[str, Any]]:
    return [
        {"role": "user", "parts": [{"text": "Read app.py"}]},
        {
            "role": "model",
            "parts": [
                {
                    "functionCall": {"name": "read_file", "args": {"path": "app.py"}},
                    "thoughtSignature": "c2ln",
                }
            ],
        },
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "read_file", "response": {"content": FILE}}}],
        },
    ]


CONVERSATIONS = {
    "openai-chat": openai_chat,
    "anthropic": anthropic,
    "openai-responses": openai_responses,
    "ai-sdk-v4": ai_sdk_v4,
    "ai-sdk-v5": ai_sdk_v5,
    "gemini": gemini,
}


async def optimize(api: httpx.AsyncClient, messages: list[Any], **extra: Any) -> dict[str, Any]:
    response = await api.post("/v1/messages:optimize", json={"messages": messages, **extra})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def hydrate(api: httpx.AsyncClient, messages: list[Any], **extra: Any) -> httpx.Response:
    return await api.post("/v1/messages:hydrate", json={"messages": messages, **extra})


@pytest.mark.parametrize("name", CONVERSATIONS)
async def test_optimize_then_hydrate_is_lossless(api: httpx.AsyncClient, name: str) -> None:
    original = CONVERSATIONS[name]()
    kept = copy.deepcopy(original)
    optimized = await optimize(api, original)
    assert optimized["format"] == name
    assert "toolRef" in json.dumps(optimized["messages"])
    assert FILE not in json.dumps(optimized["messages"])
    stats = optimized["optimizationStats"]
    assert stats["optimizedBytes"] < stats["originalBytes"]
    assert stats["newRefs"] == stats["refsUsed"] >= 1
    response = await hydrate(api, optimized["messages"])
    assert response.status_code == 200, response.text
    hydrated = response.json()
    assert hydrated["format"] == name
    assert hydrated["messages"] == kept
    assert json.dumps(hydrated["messages"]) == json.dumps(kept)
    assert hydrated["toolReferences"] == optimized["toolReferences"]
    assert hydrated["optimizationStats"]["refsUsed"] == stats["refsUsed"]
    assert hydrated["optimizationStats"]["originalBytes"] == stats["originalBytes"]


async def test_tool_references_and_stats(api: httpx.AsyncClient) -> None:
    messages = openai_chat()
    optimized = await optimize(api, messages)
    read = {"name": "read_file", "args": ARGS, "result": FILE}
    bash = {"name": "bash", "args": '{"cmd": "ls"}', "result": "app.py\nREADME.md\n"}
    assert optimized["toolReferences"] == {
        "call_1": digest_of(read).ref,
        "call_2": digest_of(bash).ref,
    }
    stats = optimized["optimizationStats"]
    assert stats["originalBytes"] == len(json.dumps(messages, separators=(",", ":")).encode())
    assert stats["optimizedBytes"] == len(
        json.dumps(optimized["messages"], separators=(",", ":")).encode()
    )
    assert (stats["refsUsed"], stats["newRefs"], stats["cacheHits"]) == (2, 2, 0)
    again = await optimize(api, messages)
    assert again["messages"] == optimized["messages"]
    assert (again["optimizationStats"]["newRefs"], again["optimizationStats"]["cacheHits"]) == (
        0,
        2,
    )


async def test_hydrate_registers_full_payloads_and_confirms_them(api: httpx.AsyncClient) -> None:
    messages = anthropic()
    response = await hydrate(api, messages)
    assert response.status_code == 200
    body = response.json()
    assert body["messages"] == messages
    refs = body["toolReferences"]
    assert set(refs) == {"toolu_1", "toolu_2"}
    assert body["optimizationStats"]["newRefs"] == 2
    found = await api.post("/v1/invocations:findMissing", json={"refs": list(refs.values())})
    assert found.json() == {"missing": []}
    error = await api.get(f"/v1/invocations/{refs['toolu_2']}")
    assert error.json()["isError"] is True


async def test_mixed_markers_and_new_payloads(api: httpx.AsyncClient) -> None:
    first = openai_chat()[:5]
    optimized = (await optimize(api, first))["messages"]
    later = [
        *optimized,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_3",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"cmd": "pwd"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_3", "content": "/work\n"},
    ]
    response = await hydrate(api, later)
    body = response.json()
    assert body["messages"][:5] == first
    assert body["messages"][5:] == later[5:]
    assert set(body["toolReferences"]) == {"call_1", "call_2", "call_3"}
    stats = body["optimizationStats"]
    assert (stats["refsUsed"], stats["newRefs"]) == (2, 1)


async def test_missing_refs_are_all_listed_and_nothing_is_registered(
    api: httpx.AsyncClient, redis: Redis
) -> None:
    optimized = (await optimize(api, openai_chat()))["messages"]
    refs = list((await optimize(api, openai_chat()))["toolReferences"].values())
    await redis.delete(*[Store.key("local", Ref(ref)) for ref in refs])
    new_call = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "bash", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_9", "content": "fresh"},
    ]
    before = await snapshot(redis)
    response = await hydrate(api, [*optimized, *new_call])
    assert response.status_code == 409
    problem = response.json()
    assert problem["type"] == "urn:toolref:problem:missing-refs"
    assert sorted(problem["missingRefs"]) == sorted(refs)
    assert "resend" in problem["detail"]
    assert await snapshot(redis) == before


async def test_hydrate_extends_the_lifetime_of_the_refs_it_uses(
    make_api: Api, redis: Redis
) -> None:
    api = await make_api(ttl_seconds=1000)
    optimized = await optimize(api, anthropic())
    keys = [Store.key("local", Ref(r)) for r in optimized["toolReferences"].values()]
    for key in keys:
        await redis.expire(key, 5)
    assert (await hydrate(api, optimized["messages"])).status_code == 200
    for key in keys:
        assert await redis.ttl(key) > 990


async def test_another_tenants_marker_is_missing(make_api: Api) -> None:
    from toolref_server.http.auth import hash_key

    keys = f"acme={hash_key('a')},globex={hash_key('g')}"
    acme = await make_api(api_keys=keys, headers={"Authorization": "Bearer a"})
    globex = await make_api(api_keys=keys, headers={"Authorization": "Bearer g"})
    optimized = await optimize(acme, gemini())
    response = await hydrate(globex, optimized["messages"])
    assert response.status_code == 409
    assert response.json()["missingRefs"] == list(optimized["toolReferences"].values())


async def test_protocol_1(api: httpx.AsyncClient, redis: Redis) -> None:
    v1 = {"Toolref-Protocol": "1"}
    refused = await api.post("/v1/messages:optimize", json={"messages": openai_chat()}, headers=v1)
    assert refused.status_code == 400
    assert refused.json()["type"] == "urn:toolref:problem:protocol-required"
    passed = await api.post("/v1/messages:hydrate", json={"messages": openai_chat()}, headers=v1)
    assert passed.status_code == 200
    assert passed.headers["toolref-protocol"] == "1"
    body = passed.json()
    assert "toolReferences" not in body
    assert body["messages"] == openai_chat()
    assert "tr_" not in passed.text
    assert await redis.dbsize() == 0
    optimized = (await optimize(api, openai_chat()))["messages"]
    with_markers = await api.post("/v1/messages:hydrate", json={"messages": optimized}, headers=v1)
    assert with_markers.status_code == 400
    assert with_markers.json()["type"] == "urn:toolref:problem:protocol-required"


HEAD = "th_" + "a" * 26  # a history ref of 0.2
RETIRED = [
    ("keep", {"Toolref-History": "?1"}, {}),
    ("continue", {"Toolref-History": HEAD}, {}),
    ("dictionary", {"Toolref-Dictionary": HEAD}, {}),
    ("checkpoint", {"Toolref-History": "?1", "Toolref-Checkpoint": "?1"}, {}),
    ("historyRef", {}, {"historyRef": HEAD}),
    ("returnMessages", {}, {"returnMessages": "new"}),
    ("checkpoint-member", {}, {"checkpoint": True}),
]


@pytest.mark.parametrize("protocol", ["1", "2"])
@pytest.mark.parametrize(
    ("headers", "members"), [c[1:] for c in RETIRED], ids=[c[0] for c in RETIRED]
)
async def test_a_request_of_the_retired_history_refs_is_refused_and_stores_nothing(
    api: httpx.AsyncClient,
    redis: Redis,
    protocol: str,
    headers: dict[str, str],
    members: dict[str, Any],
) -> None:
    """History refs were retired in 0.3 (edits replace them): a 0.2 client's request is 400
    `history-refs-retired`, naming what it sent and the upgrade, whatever its protocol."""
    await optimize(api, openai_chat())  # something held, that must stay as it is
    before = await snapshot(redis)
    response = await api.post(
        "/v1/messages:hydrate",
        json={**members, "messages": openai_chat()},
        headers={"Toolref-Protocol": protocol, **headers},
    )
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == "urn:toolref:problem:history-refs-retired"
    named = next(iter(headers or members))
    assert named in problem["detail"], problem["detail"]
    assert "upgrade" in problem["detail"], problem["detail"]
    assert "toolref-history" not in response.headers
    assert await snapshot(redis) == before


# A well-formed ref (no record needed: the marker is refused before any lookup).
HELD = "tr_" + "a" * 26


def marker_with(ref: str) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "toolRef": ref}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "toolRef": ref},
    ]


BAD: list[tuple[str, dict[str, Any], int, str, str]] = [
    ("messages not a list", {"messages": {"role": "user"}}, 422, "validation-failed", "list"),
    (
        "message not an object",
        {"messages": [{"role": "user", "content": "x"}, "hi"]},
        422,
        "validation-failed",
        "message 1",
    ),
    (
        "unknown format",
        {"format": "cohere", "messages": []},
        422,
        "validation-failed",
        "openai-chat",
    ),
    (
        "mixed formats",
        {"messages": [*anthropic(), *openai_chat()[2:4]]},
        422,
        "validation-failed",
        "message 3",
    ),
    (
        "named format does not fit",
        {"format": "gemini", "messages": anthropic()},
        422,
        "validation-failed",
        "message 0",
    ),
    ("malformed marker ref", {"messages": marker_with("tr_nope")}, 422, "invalid-ref", "message 0"),
    (
        "marker beside its payload",
        {"messages": [marker_with(HELD)[0], {**marker_with(HELD)[1], "content": "ls"}]},
        422,
        "validation-failed",
        "'content'",
    ),
    (
        "too many messages",
        {"messages": [{"role": "user", "content": "x"}] * 11},
        413,
        "batch-too-large",
        "limit of 10",
    ),
    (
        "unknown summarizer",
        {"messages": openai_chat(), "mode": "summary", "summarizer": "gpt-9"},
        422,
        "validation-failed",
        "summarizer",
    ),
]


@pytest.mark.parametrize(
    ("body", "status", "slug", "phrase"), [c[1:] for c in BAD], ids=[c[0] for c in BAD]
)
@pytest.mark.parametrize("path", ["/v1/messages:optimize", "/v1/messages:hydrate"])
async def test_bad_conversations_are_refused_and_register_nothing(
    make_api: Api,
    redis: Redis,
    path: str,
    body: dict[str, Any],
    status: int,
    slug: str,
    phrase: str,
) -> None:
    api = await make_api(max_messages=10)
    before = await snapshot(redis)
    response = await api.post(path, json=body)
    if path.endswith("optimize") and "mode" in body:
        status, slug, phrase = 422, "validation-failed", "mode"  # optimize has no mode
    assert response.status_code == status, response.text
    problem = response.json()
    assert problem["type"] == f"urn:toolref:problem:{slug}"
    assert phrase in problem["detail"], problem["detail"]
    assert await snapshot(redis) == before


async def test_marker_naming_another_tool_is_refused(api: httpx.AsyncClient) -> None:
    optimized = (await optimize(api, openai_chat()))["messages"]
    optimized[2]["tool_calls"][0]["function"]["name"] = "write_file"
    response = await hydrate(api, optimized)
    assert response.status_code == 422
    assert "write_file" in response.json()["detail"]


def trace_conversations() -> list[tuple[str, list[Any]]]:
    folder = SHARED / "traces"
    if not folder.is_dir():
        need(f"the shared traces are not at {folder}")
    found = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        for n, conversation in enumerate(data.get("conversations", [data])):
            found.append((f"{path.stem}[{n}]", conversation["messages"]))
    return found


def strip_markers(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: strip_markers(v) for k, v in value.items() if k not in ("toolRef", "toolRefOrder")
        }
    if isinstance(value, list):
        return [strip_markers(v) for v in value]
    return value


def compact(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


async def test_every_shared_trace_round_trips_with_small_markers(api: httpx.AsyncClient) -> None:
    conversations = trace_conversations()
    assert len(conversations) >= 7
    for name, messages in conversations:
        optimized = await optimize(api, messages)
        markers = json.dumps(optimized["messages"]).count('"toolRef"')
        assert markers >= 2 * 20, name  # every trace has 20+ tool calls
        # Marker bytes: everything that is not a tool payload, plus at most 64 per marker.
        overhead = optimized["optimizationStats"]["optimizedBytes"] - compact(
            strip_markers(optimized["messages"])
        )
        assert overhead <= 64 * markers, (name, overhead / markers)
        response = await hydrate(api, optimized["messages"])
        assert response.status_code == 200, (name, response.text[:300])
        hydrated = response.json()["messages"]
        assert hydrated == messages, name
        assert json.dumps(hydrated, ensure_ascii=False) == json.dumps(
            messages, ensure_ascii=False
        ), name
        assert compact(hydrated) == optimized["optimizationStats"]["originalBytes"]
