"""A handoff's dialogue summary is cached and computed once, like an invocation's summary.

Found: every `POST /v1/context:handoff` with the LLM summarizer as default called the
model, uncached: the same conversation handed off ten times made ten calls.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from redis.asyncio import Redis

from tests.support.fake_provider.raw import Connection, RawProvider, completion, raw_provider

from ..conftest import key_names
from .summarizer_app import apps
from .test_server_quotas import counted_bytes, stored_bytes

SUMMARY = "User asked for a Rust port of app.py; it was written and tested."


def conversation(extra: int = 0) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Port app.py to Rust"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "app.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "import os\nprint(os.name)\n"},
        {"role": "assistant", "content": "Done: src/main.rs prints the OS name."},
    ]
    for n in range(extra):
        messages.append({"role": "user", "content": f"And step {n}?"})
    return messages


async def handoff(app: Any, messages: list[dict[str, Any]], **body: Any) -> dict[str, Any]:
    response = await app.http.post("/v1/context:handoff", json={"messages": messages, **body})
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def slow_answer(server: RawProvider, connection: Connection) -> None:
    await asyncio.sleep(0.2)  # long enough that the concurrent handoffs overlap
    await connection.answer(completion(SUMMARY))


async def test_the_same_dialogue_is_summarized_once(redis: Redis) -> None:
    async with raw_provider(slow_answer) as llm, apps(redis) as build:
        app = await build(llm, summarizer="openai-compatible")
        answers = await asyncio.gather(*(handoff(app, conversation()) for _ in range(10)))
        assert llm.calls == 1  # ten at once: one computation
        assert {a["summarySource"] for a in answers} == {"openai-compatible:fake-model:v1:3000"}
        assert all(SUMMARY in a["block"] for a in answers)
        again = await handoff(app, conversation())
        assert again["block"] == answers[0]["block"]
        assert llm.calls == 1  # later: from the cache
        # Another transcript, or another budget (part of the summarizer id): computed anew.
        await handoff(app, conversation(extra=1))
        await handoff(app, conversation(), maxToolContextChars=4000)
        assert llm.calls == 3
        keys = [k for k in await key_names(redis) if k.startswith("tr:local:d:")]
    assert len(keys) == 3
    assert not [k for k in keys if k.endswith(":lock")]


async def test_a_tenant_never_gets_another_tenants_dialogue_summary(redis: Redis) -> None:
    keys = {t: f"{t}-key" for t in ("acme", "globex")}
    setting = ",".join(f"{t}={hashlib.sha256(k.encode()).hexdigest()}" for t, k in keys.items())
    async with raw_provider(slow_answer) as llm, apps(redis) as build:
        for key in keys.values():
            app = await build(
                llm,
                summarizer="openai-compatible",
                api_keys=setting,
                headers={"Authorization": f"Bearer {key}"},
            )
            await handoff(app, conversation())
    assert llm.calls == 2


async def test_a_failed_dialogue_summary_is_remembered(redis: Redis) -> None:
    async def failing(server: RawProvider, connection: Connection) -> None:
        await connection.answer(b"{}", status=500)

    async with raw_provider(failing) as llm, apps(redis) as build:
        app = await build(llm, summarizer="openai-compatible")
        for _ in range(3):
            answer = await handoff(app, conversation())
            assert answer["summarySource"] == "digest"
            assert "## Conversation summary" in answer["block"]
        assert llm.calls == 1


async def test_dialogue_summaries_count_in_the_stored_bytes_quota(redis: Redis) -> None:
    """Issue 28, finding 6, for handoffs: a dialogue summary is cached per budget, so each
    `maxToolContextChars` value stored one more outside the quota (on the code before the
    fix the ten budgets below stored ten summaries, 660 bytes for a quota of 300). Now they
    count: kept while they fit, then made and not kept, every handoff still summarized."""
    key = "acme-key"
    async with raw_provider(slow_answer) as llm, apps(redis) as build:
        app = await build(
            llm,
            summarizer="openai-compatible",
            api_keys=f"acme={hashlib.sha256(key.encode()).hexdigest()}",
            headers={"Authorization": f"Bearer {key}"},
            tenant_max_bytes=300,
        )
        answers = [
            await handoff(app, conversation(), maxToolContextChars=4_000 + 40 * n)
            for n in range(10)
        ]
        assert {a["summarySource"].split(":")[0] for a in answers} == {"openai-compatible"}
        assert all(SUMMARY in a["block"] for a in answers)
        assert llm.calls == 10
        kept = [k for k in await key_names(redis) if k.startswith("tr:acme:d:")]
        assert 0 < len(kept) < 10
        print(f"\n{len(kept)} of 10 dialogue summaries kept")
        # Everything the tenant holds (summaries and the model-call counter, a few bytes)
        # within the quota; every summary counted.
        assert await stored_bytes(redis, "acme") <= 300
        assert await stored_bytes(redis, "acme", kind="d") == await counted_bytes(redis, "acme")
