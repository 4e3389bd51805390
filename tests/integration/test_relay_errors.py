"""Every error of the chain reaches the agent in its provider's error shape, with the text
that names the fix (issue 31): the official SDKs pointed at the relay, the real service's
gateway behind it on the test engine, real sockets. And a failed turn shows its status in
its line and counts no savings.

Before the fix the gateway's problem documents passed through as they came: a 404
`application/problem+json` that Claude Code showed as "There's an issue with the selected
model", a 401 shown as "Please run /login"; and the session ratio counted failed turns.
"""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest
from redis.asyncio import Redis

from tests.support.servers import serve
from toolref_relay import Relay, RelayConfig
from toolref_relay.ledger import FAILED, UPLOAD_BYTES

from .relay_gateway import Scripted, gateway, header_lines, wire_bytes
from .test_relay import relayed

TIMEOUT = 30
HI = [{"role": "user", "content": "hi"}]


async def test_an_unknown_upstream_is_a_400_the_anthropic_sdk_shows(redis: Redis) -> None:
    async with (
        relayed(redis, {"openai": Scripted().app()}) as stack,
        anthropic.AsyncAnthropic(
            base_url=stack.relay_url + "/llm/anthropic",
            api_key="k",
            max_retries=0,
            timeout=TIMEOUT,
        ) as client,
    ):
        with pytest.raises(anthropic.BadRequestError) as raised:
            await client.messages.create(model="m", max_tokens=5, messages=HI)  # type: ignore[arg-type]
    assert raised.value.status_code == 400  # a 404 reads as "model not found" in Claude Code
    body = raised.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    message = body["error"]["message"]
    assert message.startswith(
        f"toolref gateway {stack.gateway.url}: no upstream for /llm/anthropic"
    )
    assert "configured: openai" in message  # the names the gateway has
    assert "TOOLREF_UPSTREAMS" in message
    assert "/llm/NAME" in message
    assert stack.gateway.arrivals  # it went to the gateway: the gateway's refusal, told


async def test_an_unknown_key_is_a_400_naming_toolref_key_not_the_providers(
    redis: Redis,
) -> None:
    async with gateway(redis, {"openai": Scripted().app()}) as recorded:
        config = RelayConfig(recorded.url, key="not-the-tenant-key", channel=False)  # HTTP watched
        relay = Relay(config, report=lambda _: None)
        async with (
            serve(relay) as relay_url,
            openai.AsyncOpenAI(
                base_url=relay_url + "/llm/openai/v1",
                api_key="sk-provider",
                max_retries=0,
                timeout=TIMEOUT,
            ) as client,
        ):
            with pytest.raises(openai.BadRequestError) as raised:
                await client.chat.completions.create(model="m", messages=HI)  # type: ignore[arg-type]
    assert raised.value.code == "toolref_unauthorized"
    assert raised.value.type == "invalid_request_error"
    assert "Toolref-Key" in raised.value.message
    assert "TOOLREF_KEY" in raised.value.message
    assert "not the provider's key" in raised.value.message


async def test_a_gemini_agent_gets_googles_shape_for_any_request(redis: Redis) -> None:
    """A POST with a body and a GET, both passed through to the gateway."""
    async with (
        relayed(redis, {"openai": Scripted().app()}) as stack,
        httpx.AsyncClient(timeout=TIMEOUT) as agent,
    ):
        turn = await agent.post(
            stack.relay_url + "/llm/gemini/v1beta/models/g:streamGenerateContent?alt=sse",
            json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
            headers={"x-goog-api-key": "k"},
        )
        listed = await agent.get(stack.relay_url + "/llm/gemini/v1beta/models")
    for answer in (turn, listed):
        assert answer.status_code == 400
        error = answer.json()["error"]
        assert set(error) == {"code", "message", "status"}
        assert error["code"] == 400
        assert error["status"] == "INVALID_ARGUMENT"
        assert "no upstream for /llm/gemini" in error["message"]


async def test_an_unknown_upstream_passed_through_is_in_the_openai_shape(redis: Redis) -> None:
    async with (
        relayed(redis, {"anthropic": Scripted().app()}) as stack,
        openai.AsyncOpenAI(
            base_url=stack.relay_url + "/llm/openai/v1",
            api_key="k",
            max_retries=0,
            timeout=TIMEOUT,
        ) as client,
    ):
        with pytest.raises(openai.BadRequestError) as raised:
            await client.models.list()
    assert raised.value.code == "toolref_not-found"
    assert "configured: anthropic" in raised.value.message


async def test_the_providers_own_errors_pass_as_they_came(redis: Redis) -> None:
    """Not toolref's: the gateway forwards the provider's 413 and the relay leaves it be
    (after its retry with tool results as refs, which has none to move here)."""
    scripted = Scripted(limit=10)
    body = json.dumps({"model": "m", "max_tokens": 5, "messages": HI}).encode()
    async with (
        relayed(redis, {"anthropic": scripted.app()}) as stack,
        httpx.AsyncClient(timeout=TIMEOUT) as agent,
    ):
        answer = await agent.post(
            stack.relay_url + "/llm/anthropic/v1/messages",
            content=body,
            headers={"content-type": "application/json"},
        )
    assert answer.status_code == 413
    assert answer.json()["type"] == "error"


async def test_a_failed_turn_shows_its_status_and_counts_no_savings(redis: Redis) -> None:
    """Issue 31: the session ratio rose from 18x to 26x while nothing reached the provider."""
    body = json.dumps({"model": "m", "max_tokens": 5, "messages": HI}).encode()
    before_raw, before_failed = UPLOAD_BYTES.counts["raw"], FAILED.counts["400"]
    sent: list[httpx.Response] = []
    async with relayed(redis, {"anthropic": Scripted().app()}) as stack:
        async with httpx.AsyncClient(timeout=TIMEOUT) as agent:
            for name in ("anthropic", "nope", "anthropic"):
                answer = await agent.post(
                    f"{stack.relay_url}/llm/{name}/v1/messages",
                    content=body,
                    headers={"content-type": "application/json"},
                )
                sent.append(answer)
        tally = stack.relay.tally
        turns = [line for line in stack.lines if " turn " in line]
    # Each agent and upstream its own totals: the turn to `nope` is told apart.
    assert turns[0].startswith("toolref relay: python-httpx -> anthropic turn 1  200  agent sent")
    assert turns[1].startswith("toolref relay: python-httpx -> nope turn 1  400  agent sent")
    assert "failed, not counted" in turns[1]
    assert "x  (its" not in turns[1]  # no ratio for it
    assert "over 0 answered turns, 1 failed)" in turns[1]
    assert turns[2].startswith("toolref relay: python-httpx -> anthropic turn 2  200")
    assert turns[2].endswith("over 2 answered turns)")  # anthropic's: no failure
    assert tally.turns == 3  # every agent's and upstream's together
    assert tally.failed == 1
    raw = sum(header_lines(a.request.headers.raw) + len(body) for a in (sent[0], sent[2]))
    assert tally.raw == raw  # the two that reached the provider, header lines and body
    assert tally.wire == sum(wire_bytes(a) for a in stack.gateway.arrivals if "nope" not in a.path)
    assert UPLOAD_BYTES.counts["raw"] - before_raw == raw
    assert FAILED.counts["400"] - before_failed == 1
    summaries = [line for line in stack.lines if "since the relay started" in line]
    assert [line.split(",")[0] for line in summaries] == [
        "toolref relay: python-httpx -> anthropic",
        "toolref relay: python-httpx -> nope",
    ]
    assert "1 failed" in summaries[1]


async def test_a_refused_turn_shows_its_status(redis: Redis) -> None:
    async with (
        relayed(redis, {"anthropic": Scripted().app()}, max_body_bytes=10) as stack,
        httpx.AsyncClient(timeout=TIMEOUT) as agent,
    ):
        answer = await agent.post(
            f"{stack.relay_url}/llm/anthropic/v1/messages",
            content=json.dumps({"model": "m", "messages": HI}),
            headers={"content-type": "application/json"},
        )
    assert answer.status_code == 413
    [turn] = [line for line in stack.lines if " turn " in line]
    assert turn.startswith("toolref relay: python-httpx -> anthropic turn 1  413  agent sent")
    assert "refused by the relay, not counted" in turn
