"""Context editing at the gateway (issue 41), over real sockets on the test engine: the
service's gateway with an upstream that records every body, and clients posting whole
conversations turn by turn (plain HTTP, as any agent or SDK does) or through the relay (as
edits).

For each format the gateway serves: old results reach the provider as their summaries, the
last `keep` whole; everything else byte for byte; a result once replaced is the same bytes
on every later turn, so each turn's body goes on from the one before (the prompt cache
holds) but on the turns the answer says rewrote it; the answer tells what was done; a
request that manages its own context, or refuses, passes as it came; a wrong header is a
400 and nothing is forwarded.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.servers import serve_all
from tests.unit.edits.agents import Agent
from toolref_server.app import create_app
from toolref_server.context import facts as facts_module
from toolref_server.settings import Settings

from .test_relay_edits import post, relayed

pytestmark = pytest.mark.engine

# Small enough that a short conversation passes it: what the defaults do at 10,000 tokens.
POLICY: dict[str, Any] = {
    "context_editing": "on",
    "context_trigger_tokens": 1_500,
    "context_keep": 2,
    "context_clear_at_least": 500,
    "context_rewrite_weight": 0.0,
}
PATHS = {
    "openai-chat": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "openai-responses": "/v1/responses",
    "gemini": "/v1beta/models/g:generateContent",
}
KEYS = {"openai-chat": "messages", "anthropic": "messages", "openai-responses": "input"}
KEYS["gemini"] = "contents"


@dataclass
class Upstream:
    bodies: list[bytes] = field(default_factory=list)
    encodings: list[str | None] = field(default_factory=list)

    def app(self) -> Starlette:
        async def record(request: Request) -> Response:
            self.bodies.append(await request.body())
            self.encodings.append(request.headers.get("content-encoding"))
            usage = {"input_tokens": 100, "cache_read_input_tokens": 900}
            return JSONResponse({"ok": True, "usage": usage})

        return Starlette(routes=[Route("/{path:path}", record, methods=["POST"])])


@dataclass
class Gateway:
    url: str
    upstream: Upstream


@pytest.fixture
async def gateway(redis: Redis) -> AsyncIterator[Gateway]:
    upstream = Upstream()
    async with serve_all(upstream.app()) as [upstream_url]:
        settings = Settings(redis_url="unused", upstreams=f"up={upstream_url}", **POLICY)
        async with serve_all(create_app(settings, redis=redis)) as [url]:
            yield Gateway(url, upstream)


def output(turn: int) -> str:
    """A tool's output: 3 KB of lines, different each turn."""
    return "".join(f"line {n} of file {turn}: {'x' * 50}\n" for n in range(50))


def conversation(fmt: str, turns: int) -> list[dict[str, Any]]:
    """A user's ask, then per turn the model's call and its result, in format `fmt`."""
    if fmt == "openai-chat":
        messages: list[dict[str, Any]] = [{"role": "user", "content": "fix the bug"}]
        for t in range(turns):
            function = {"name": "read", "arguments": json.dumps({"path": f"f{t}.py"})}
            call: dict[str, Any] = {"id": f"c{t}", "type": "function", "function": function}
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            messages.append({"role": "tool", "tool_call_id": f"c{t}", "content": output(t)})
        return messages
    if fmt == "anthropic":
        messages = [{"role": "user", "content": "fix the bug"}]
        for t in range(turns):
            use = {"type": "tool_use", "id": f"c{t}", "name": "read", "input": {"path": f"f{t}"}}
            result = {"type": "tool_result", "tool_use_id": f"c{t}", "content": output(t)}
            messages += [
                {"role": "assistant", "content": [use]},
                {"role": "user", "content": [result]},
            ]
        return messages
    if fmt == "openai-responses":
        items: list[dict[str, Any]] = [{"role": "user", "content": "fix the bug"}]
        for t in range(turns):
            args = json.dumps({"path": f"f{t}.py"})
            items.append(
                {"type": "function_call", "call_id": f"c{t}", "name": "read", "arguments": args}
            )
            items.append({"type": "function_call_output", "call_id": f"c{t}", "output": output(t)})
        return items
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "fix the bug"}]}]
    for t in range(turns):
        part: dict[str, Any] = {"functionCall": {"name": "read", "args": {"path": f"f{t}"}}}
        response = {"functionResponse": {"name": "read", "response": {"output": output(t)}}}
        contents += [{"role": "model", "parts": [part]}, {"role": "user", "parts": [response]}]
    return contents


def body_of(fmt: str, messages: list[dict[str, Any]], **extra: Any) -> bytes:
    return json.dumps({"model": "m", KEYS[fmt]: messages, **extra}, indent=1).encode()


def context(answer: httpx.Response) -> dict[str, int]:
    found = answer.headers["toolref-context"]
    return {k.strip(): int(v) for k, v in (p.split("=") for p in found.split(";"))}


@pytest.mark.parametrize("fmt", list(PATHS))
async def test_old_results_reach_the_provider_as_summaries_and_the_cache_prefix_holds(
    gateway: Gateway, fmt: str
) -> None:
    messages = conversation(fmt, 12)
    sent: list[bytes] = []
    told: list[dict[str, int]] = []
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as client:
        for turns in range(1, 13):
            body = body_of(fmt, messages[: 1 + 2 * turns])
            answer = await client.post("/llm/up" + PATHS[fmt], content=body)
            assert answer.status_code == 200, answer.text
            sent.append(gateway.upstream.bodies[-1])
            told.append(context(answer))
            assert f"tokens-saved={told[-1]['saved']}" in answer.headers["toolref-savings"]
        metrics = (await client.get("/metrics")).text
        page = (await client.get("/v1/savings")).json()
    last = json.loads(sent[-1])[KEYS[fmt]]
    whole = json.loads(body_of(fmt, messages))[KEYS[fmt]]
    texts = [json.dumps(m) for m in last]
    replaced = [i for i, m in enumerate(texts) if "[toolref:" in m]
    assert replaced, "no result was replaced"
    assert len(replaced) == told[-1]["cleared"]
    for i, m in enumerate(last):  # the rest is the client's, the last 2 results whole
        if i not in replaced:
            assert m == whole[i]
    assert replaced[-1] < len(last) - 3
    assert "call read(" in texts[replaced[0]]
    assert "Summary:" in texts[replaced[0]]
    for turn in range(1, len(sent)):
        before = sent[turn - 1].rstrip(b"}\n ").rstrip(b"]\n ")
        goes_on = sent[turn].startswith(before)
        assert goes_on != bool(told[turn]["rewrote"]), (turn, told[turn])
        assert told[turn]["cleared"] >= told[turn - 1]["cleared"]
    assert told[-1]["batches"] == sum(t["rewrote"] for t in told)
    assert told[-1]["saved"] > 0
    assert told[-1]["tokens"] < len(body_of(fmt, messages)) // 4
    saved = [
        line
        for line in metrics.splitlines()
        if line.startswith('toolref_context_tokens_total{kind="saved"')
    ]
    assert saved
    assert float(saved[0].split()[-1]) > 0
    provider = [
        line for line in metrics.splitlines() if "toolref_context_provider_tokens_total{" in line
    ]
    counted = {line.split('kind="')[1].split('"')[0]: float(line.split()[-1]) for line in provider}
    assert counted == {"input": 1000.0 * len(sent), "cache_read": 900.0 * len(sent)}
    (row,) = next(w for w in page["windows"] if w["name"] == "hour")["rows"]
    assert row["tokensSaved"] == float(saved[0].split()[-1]) > 0  # the savings page's too
    assert row["tokens"] > 0


async def test_a_request_that_manages_its_own_context_or_refuses_passes_as_it_came(
    gateway: Gateway,
) -> None:
    messages = conversation("anthropic", 12)
    clearing = {"edits": [{"type": "clear_tool_uses_20250919", "keep": {"value": 3}}]}
    managed = body_of("anthropic", messages, context_management=clearing)
    plain = body_of("anthropic", messages)
    # Claude Code's: old thinking cleared, its tool results left to whoever manages them
    thinking = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
    claude_code = body_of("anthropic", messages, context_management=thinking)
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as client:
        first = await client.post("/llm/up/v1/messages", content=managed)
        refused = await client.post(
            "/llm/up/v1/messages", content=plain, headers={"toolref-context-editing": "off"}
        )
        wrong = await client.post(
            "/llm/up/v1/messages", content=plain, headers={"toolref-context-editing": "yes"}
        )
        edited = await client.post("/llm/up/v1/messages", content=claude_code)
    assert first.status_code == refused.status_code == 200
    assert gateway.upstream.bodies[:2] == [managed, plain]
    assert "toolref-context" not in first.headers
    assert "toolref-context" not in refused.headers
    assert wrong.status_code == 400
    assert wrong.headers["content-type"].startswith("application/problem+json")
    assert "send `on`" in wrong.json()["detail"]
    assert len(gateway.upstream.bodies) == 3  # the wrong one was not forwarded
    assert context(edited)["cleared"] > 0
    assert b"[toolref:" in gateway.upstream.bodies[2]
    assert b"clear_thinking_20251015" in gateway.upstream.bodies[2]


async def test_a_compressed_body_passes_as_it_came_its_encoding_named(gateway: Gateway) -> None:
    """A client that compresses its body itself (straight to the gateway): no step can
    read those bytes, so they reach the provider as they came, `Content-Encoding` and all
    (it was dropped, and the provider got gzip bytes labelled JSON)."""
    plain = body_of("anthropic", conversation("anthropic", 12))
    packed = gzip.compress(plain)
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as client:
        answer = await client.post(
            "/llm/up/v1/messages", content=packed, headers={"content-encoding": "gzip"}
        )
    assert answer.status_code == 200
    assert gateway.upstream.bodies == [packed]
    assert gateway.upstream.encodings == ["gzip"]


async def test_a_client_asks_for_it_when_the_operator_left_it_off(redis: Redis) -> None:
    upstream = Upstream()
    async with serve_all(upstream.app()) as [upstream_url]:
        settings = Settings(
            redis_url="unused",
            upstreams=f"up={upstream_url}",
            **{**POLICY, "context_editing": "off"},
        )
        async with serve_all(create_app(settings, redis=redis)) as [url]:
            body = body_of("openai-chat", conversation("openai-chat", 12))
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                left = await client.post("/llm/up/v1/chat/completions", content=body)
                asked = await client.post(
                    "/llm/up/v1/chat/completions",
                    content=body,
                    headers={"Toolref-Context-Editing": "on"},
                )
    assert upstream.bodies[0] == body
    assert "toolref-context" not in left.headers
    assert b"[toolref:" in upstream.bodies[1]
    assert context(asked)["cleared"] > 0


@pytest.mark.parametrize("text_results", [False, True], ids=["tool-results", "text-results"])
async def test_through_the_relay_as_edits_the_recipe_is_the_client_s_the_provider_gets_summaries(
    redis: Redis, text_results: bool
) -> None:
    """The relay sends edits; the gateway restores the agent's body (its recipe, which the
    next edit names, is the agent's), then edits the context for the provider: results of
    the format's own, or returned as text (`[read_file for 'x.py'] Result:`)."""
    agent = Agent(7, text_results=text_results)
    async with (
        relayed(redis, **POLICY) as stack,
        httpx.AsyncClient(timeout=30) as client,
    ):
        for _ in range(14):
            agent.step()
            await post(client, stack, agent.body())
        last = stack.provider.seen[-1][2]
        edits = [r for r in stack.balancer.requests if "edit" in r.headers.get("content-type", "")]
    assert b"[toolref:" in last
    assert len(edits) >= 10  # later turns travelled as edits, based on the agent's bodies


async def test_the_relay_asks_for_it_for_its_agent_and_tells_the_tokens_saved(
    redis: Redis,
) -> None:
    """`toolref relay --context-editing` on a gateway whose operator left it off: the
    provider gets summaries, the relay's turn lines and its answer's `Toolref-Savings`
    tell the tokens saved; `--no-context-editing` on a gateway with it on refuses it."""
    agent = Agent(11)
    asked = {**POLICY, "context_editing": "off"}
    async with (
        relayed(redis, relay_context=True, **asked) as stack,
        httpx.AsyncClient(timeout=30) as client,
    ):
        for _ in range(14):
            agent.step()
            answer = await post(client, stack, agent.body())
        assert b"[toolref:" in stack.provider.seen[-1][2]
    assert "tokens-saved=" in answer.headers["toolref-savings"]
    assert "toolref-context" not in answer.headers  # the agent does not speak toolref
    assert any("old results summarized" in line for line in stack.lines)
    await redis.flushall()
    refusing = Agent(12)
    async with (
        relayed(redis, relay_context=False, **POLICY) as stack,
        httpx.AsyncClient(timeout=30) as client,
    ):
        for _ in range(14):
            refusing.step()
            body = refusing.body()
            await post(client, stack, body)
            assert stack.provider.seen[-1][2] == body


async def test_a_body_too_large_to_edit_passes_as_it_came(redis: Redis) -> None:
    """Past TOOLREF_MAX_BODY_BYTES a request sent as it is was streamed on whole before
    context editing; with it on, it still is (not edited, never refused for its size)."""
    upstream = Upstream()
    async with serve_all(upstream.app()) as [upstream_url]:
        settings = Settings(
            redis_url="unused", upstreams=f"up={upstream_url}", max_body_bytes=16_384, **POLICY
        )
        async with serve_all(create_app(settings, redis=redis)) as [url]:
            body = body_of("openai-chat", conversation("openai-chat", 12))
            assert len(body) > 16_384

            async def pieces() -> AsyncIterator[bytes]:  # streamed, as a large upload is
                for at in range(0, len(body), 4096):
                    yield body[at : at + 4096]

            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                answer = await client.post("/llm/up/v1/chat/completions", content=pieces())
    assert answer.status_code == 200, answer.text
    assert upstream.bodies == [body]
    assert "toolref-context" not in answer.headers


async def test_every_replica_sends_a_result_s_first_stand_in(redis: Redis) -> None:
    """Two replicas on one store whose summaries of the same result differ (here their tool
    kinds: as an LLM's would, or a fallback's): the second, with nothing of the first in
    its memory, sends the stand-in the first made, byte for byte (pinned in the store)."""
    upstream = Upstream()
    body = body_of("openai-chat", conversation("openai-chat", 12))
    async with serve_all(upstream.app()) as [upstream_url]:
        common = {"redis_url": "unused", "upstreams": f"up={upstream_url}", **POLICY}
        first = create_app(Settings(**common), redis=redis)
        second = create_app(Settings(**common, tool_kinds="read=shell"), redis=redis)
        async with (
            serve_all(first, second) as [one, two],
            httpx.AsyncClient(timeout=30) as client,
        ):
            facts_module.forget()
            await client.post(one + "/llm/up/v1/chat/completions", content=body)
            facts_module.forget()  # the second replica remembers nothing of the first
            await client.post(two + "/llm/up/v1/chat/completions", content=body)
    assert b"[toolref:" in upstream.bodies[0]
    assert upstream.bodies[1] == upstream.bodies[0]


async def test_a_stand_in_the_store_cannot_keep_is_not_sent(redis: Redis) -> None:
    """Found in review: a tenant past its stored-bytes quota had its stand-ins sent though
    the store kept none (`pin` answered ours, not kept), so a replica with nothing of the
    first in its memory made its own, in other bytes (a model's summary, or a fallback):
    the same result in two forms on two turns, the provider's cache broken each time. Now
    a stand-in not kept is not sent: the result waits, as it came, on every replica."""
    upstream = Upstream()
    key = "tenant-key-at-its-quota"
    body = body_of("openai-chat", conversation("openai-chat", 12))
    async with serve_all(upstream.app()) as [upstream_url]:
        common = {
            "redis_url": "unused",
            "upstreams": f"up={upstream_url}",
            "api_keys": f"t={hashlib.sha256(key.encode()).hexdigest()}",
            "tenant_max_bytes": 50,  # no stand-in fits
            **POLICY,
        }
        first = create_app(Settings(**common), redis=redis)
        second = create_app(Settings(**common, tool_kinds="read=shell"), redis=redis)
        async with (
            serve_all(first, second) as [one, two],
            httpx.AsyncClient(timeout=30, headers={"Toolref-Key": key}) as client,
        ):
            facts_module.forget()
            answers = [await client.post(one + "/llm/up/v1/chat/completions", content=body)]
            facts_module.forget()  # the second replica remembers nothing of the first
            answers.append(await client.post(two + "/llm/up/v1/chat/completions", content=body))
    assert [a.status_code for a in answers] == [200, 200]
    assert upstream.bodies == [body, body]
    for answer in answers:
        assert context(answer)["cleared"] == context(answer)["rewrote"] == 0


async def test_a_body_of_more_arrays_and_objects_than_the_bound_passes_as_it_came(
    redis: Redis,
) -> None:
    """TOOLREF_MAX_CONTAINERS bounds what one body's parse may hold in memory: a body of
    more arrays and objects passes as it came, never parsed message by message (a 14 MB
    message of `{}`s took 360 MB to read). Brackets within strings are not counted."""
    upstream = Upstream()
    messages = conversation("openai-chat", 12)
    within = [{"role": "user", "content": "[{" * 500}, *messages]  # brackets in a string
    parts = [{"type": "text", "text": "fix"}] * 150
    past = [{"role": "user", "content": parts}, *messages]
    async with serve_all(upstream.app()) as [upstream_url]:
        settings = Settings(
            redis_url="unused", upstreams=f"up={upstream_url}", max_containers=100, **POLICY
        )
        async with (
            serve_all(create_app(settings, redis=redis)) as [url],
            httpx.AsyncClient(base_url=url, timeout=30) as client,
        ):
            facts_module.forget()
            read = await client.post(
                "/llm/up/v1/chat/completions", content=body_of("openai-chat", within)
            )
            body = body_of("openai-chat", past)
            unread = await client.post("/llm/up/v1/chat/completions", content=body)
    assert read.status_code == unread.status_code == 200
    assert context(read)["cleared"] > 0
    assert upstream.bodies[1] == body
    assert "toolref-context" not in unread.headers


async def test_a_result_holding_a_lone_surrogate_is_replaced_as_any_other(
    gateway: Gateway,
) -> None:
    """A result holding a lone surrogate escape (`\\ud800`: JSON carries it, UTF-8 has no
    form for it) made its conversation pass unedited on every turn (its size, and its
    stand-in, could not be encoded). Now its turns make the same batches as a conversation
    without it, and its stand-in names the surrogate by its escape."""
    plain = conversation("openai-chat", 12)
    odd = conversation("openai-chat", 12)
    odd[2]["content"] = "\ud800 " + odd[2]["content"]  # the first result
    told: dict[str, list[dict[str, int]]] = {"plain": [], "odd": []}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as client:
        for name, messages in (("plain", plain), ("odd", odd)):
            for turns in range(1, 13):
                body = body_of("openai-chat", messages[: 1 + 2 * turns])
                answer = await client.post("/llm/up/v1/chat/completions", content=body)
                assert answer.status_code == 200, answer.text
                told[name].append(context(answer))
    made = {n: [(t["cleared"], t["batches"], t["rewrote"]) for t in told[n]] for n in told}
    assert made["odd"] == made["plain"]
    assert told["odd"][-1]["cleared"] > 0
    last = gateway.upstream.bodies[-1]
    sent = json.loads(last)["messages"]  # valid JSON
    assert sent[2]["content"].startswith("[toolref:")
    assert "\\ud800 line 0 of file 0" in sent[2]["content"]  # the summary names it
    assert all(json.loads(b) for b in gateway.upstream.bodies)
