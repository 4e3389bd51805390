"""Summary-mode hydrate: on every shared trace, and its options."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from toolref import formats
from toolref.kit.placeholder import parse, placeholder
from toolref.wire.encoding import dumps_json

from .test_messages import anthropic, gemini, openai_chat, optimize, trace_conversations


def results(messages: list[Any]) -> tuple[formats.Format, dict[str, Any], list[str]]:
    """The format, each complete pair's result by key, and the keys in result order."""
    fmt = formats.detect(messages)
    found = formats.scan(messages, fmt)
    complete = [p for p in found.pairs if p.complete]
    order = sorted(
        complete, key=lambda p: (p.result.message, str(p.result.path)) if p.result else (0, "")
    )
    return fmt, {p.key: p.invocation()["result"] for p in complete}, [p.key for p in order]


def placeholder_text(value: Any) -> str | None:
    if isinstance(value, dict) and isinstance(value.get("output"), str):  # gemini
        value = value["output"]
    return value if isinstance(value, str) and parse(value) is not None else None


async def summary_hydrate(
    api: httpx.AsyncClient, messages: list[Any], **options: Any
) -> dict[str, Any]:
    body = {"messages": messages, "mode": "summary", **options}
    response = await api.post("/v1/messages:hydrate", json=body)
    assert response.status_code == 200, response.text[:500]
    answer: dict[str, Any] = response.json()
    return answer


async def test_every_shared_trace_summarizes_older_results(api: httpx.AsyncClient) -> None:
    for name, messages in trace_conversations():
        optimized = (await optimize(api, messages))["messages"]
        first = await summary_hydrate(api, optimized, keepRecent=3, maxChars=400)
        fmt, originals, order = results(messages)
        _, summarized, _ = results(first["messages"])
        older, recent = order[:-3], order[-3:]
        replaced = 0
        for key in older:
            original, now = originals[key], summarized[key]
            assert len(dumps_json(now)) <= len(dumps_json(original)), (name, key)  # never longer
            text = placeholder_text(now)
            ref = first["toolReferences"][key]
            summary = (
                await api.get(f"/v1/invocations/{ref}/summary", params={"maxChars": 400})
            ).json()["summary"]
            expected = fmt.text_result(placeholder(_tool(messages, fmt, key), ref, summary))
            if len(dumps_json(expected)) < len(dumps_json(original)):
                assert now == expected, (name, key)  # every older result its summary beats
                _, named, _ = parse(text or "") or ("", "", "")
                assert named == ref
                full = (await api.get(f"/v1/invocations/{named}")).json()
                assert full["result"] == original  # the placeholder's ref is the original
                replaced += 1
            else:
                assert now == original, (name, key)
        for key in recent:
            assert summarized[key] == originals[key], (name, key)
        stats = first["optimizationStats"]
        assert stats["summarized"] == replaced > 0, name
        assert stats["hydratedBytes"] == len(dumps_json(first["messages"]))
        assert stats["hydratedBytes"] < stats["originalBytes"]
        second = await summary_hydrate(api, optimized, keepRecent=3, maxChars=400)
        assert json.dumps(second["messages"]) == json.dumps(first["messages"]), name  # byte-stable
        assert second["optimizationStats"]["summaryCacheHits"] == len(older)


def _tool(messages: list[Any], fmt: formats.Format, key: str) -> str:
    return next(p.name for p in formats.scan(messages, fmt).pairs if p.key == key)


@pytest.mark.parametrize("conversation", [openai_chat, anthropic, gemini])
async def test_keep_recent_exclude_tools_and_shadow(
    api: httpx.AsyncClient, conversation: Any
) -> None:
    messages = conversation()
    everything = await summary_hydrate(api, messages, keepRecent=0)
    assert everything["optimizationStats"]["summarized"] >= 1
    assert everything["messages"] != messages
    kept = await summary_hydrate(api, messages, keepRecent=10)
    assert kept["messages"] == messages
    assert kept["optimizationStats"]["summarized"] == 0
    tools = [p.name for p in formats.scan(messages, formats.detect(messages)).complete]
    excluded = await summary_hydrate(api, messages, keepRecent=0, excludeTools=tools)
    assert excluded["messages"] == messages
    shadow = await summary_hydrate(api, messages, keepRecent=0, shadow=True)
    assert shadow["messages"] == messages  # full messages answered ...
    assert (
        shadow["optimizationStats"]["summarized"] == everything["optimizationStats"]["summarized"]
    )
    assert (
        shadow["optimizationStats"]["hydratedBytes"]
        == everything["optimizationStats"]["hydratedBytes"]
    )
    assert (
        shadow["optimizationStats"]["hydratedBytes"] < shadow["optimizationStats"]["originalBytes"]
    )


async def test_gemini_placeholders_are_objects(api: httpx.AsyncClient) -> None:
    answer = await summary_hydrate(api, gemini(), keepRecent=0)
    response = answer["messages"][2]["parts"][0]["functionResponse"]["response"]
    assert set(response) == {"output"}
    assert parse(response["output"]) is not None


async def test_summary_mode_needs_protocol_2(api: httpx.AsyncClient) -> None:
    response = await api.post(
        "/v1/messages:hydrate",
        json={"messages": openai_chat(), "mode": "summary"},
        headers={"Toolref-Protocol": "1"},
    )
    assert response.status_code == 400
    assert response.json()["type"] == "urn:toolref:problem:protocol-required"


@pytest.mark.parametrize(
    ("options", "phrase"),
    [
        ({"keepRecent": -1}, "keepRecent"),
        ({"maxChars": 10}, "maxChars"),
        ({"mode": "brief"}, "mode"),
    ],
)
async def test_bad_summary_options(
    api: httpx.AsyncClient, options: dict[str, Any], phrase: str
) -> None:
    response = await api.post("/v1/messages:hydrate", json={"messages": openai_chat(), **options})
    assert response.status_code == 422
    assert phrase in response.text


async def test_a_server_tools_typed_result_is_never_summarized(api: httpx.AsyncClient) -> None:
    """Found in review: summary mode put its placeholder (a string) in place of a
    `web_search_tool_result`'s content (a list of `web_search_result` blocks), a request
    Anthropic refuses. It stays as sent; the client's own older result is summarized."""
    results_list = [
        {
            "type": "web_search_result",
            "url": "https://example.com",
            "title": "example",
            "encrypted_content": "e" * 5_000,
        }
    ]
    messages: list[Any] = [
        {"role": "user", "content": "search, then read"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "server_tool_use",
                    "id": "srvtoolu_1",
                    "name": "web_search",
                    "input": {"query": "toolref"},
                },
                {
                    "type": "web_search_tool_result",
                    "tool_use_id": "srvtoolu_1",
                    "content": results_list,
                },
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "line\n" * 1_000}
            ],
        },
    ]
    answer = await summary_hydrate(api, messages, keepRecent=0)
    blocks = answer["messages"][1]["content"]
    assert blocks[1]["content"] == results_list
    assert placeholder_text(answer["messages"][2]["content"][0]["content"]) is not None
    assert answer["optimizationStats"]["summarized"] == 1
