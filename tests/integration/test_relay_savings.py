"""What the relay tells of each turn's bytes, over real sockets (the service's gateway on
the test engine, a provider behind it): counted like for like, never a ratio for a request
it could not shrink, totals per agent and upstream.

Found trying the product: a 72-byte request read `72 B -> 293 B 0.2x` (the edit's header
lines were counted, the agent's not, and an edit of so small a request costs more than the
request itself); one session line mixed every agent and conversation.
"""

from __future__ import annotations

import json
import random
import string

import httpx
import pytest
from redis.asyncio import Redis

from toolref.edits.wire import MEDIA_TYPE, described

from .relay_gateway import KEY, Scripted, header_lines, wire_bytes
from .test_relay import SAVINGS, relayed

pytestmark = pytest.mark.engine

TIMEOUT = 30
ANTHROPIC = {"content-type": "application/json", "anthropic-version": "2023-06-01"}


def _body(*texts: str) -> bytes:
    messages = [{"role": "user", "content": text} for text in texts]
    return json.dumps({"model": "m", "max_tokens": 5, "messages": messages}).encode()


def _savings(answer: httpx.Response) -> tuple[int, int]:
    found = SAVINGS.match(answer.headers["toolref-savings"])
    assert found is not None, answer.headers["toolref-savings"]
    return int(found[1]), int(found[2])


async def test_a_request_too_small_to_shrink_goes_as_it_came(redis: Redis) -> None:
    scripted = Scripted()
    body = _body("hi")  # 80 bytes
    async with (
        relayed(redis, {"anthropic": scripted.app()}) as stack,
        httpx.AsyncClient(timeout=TIMEOUT) as agent,
    ):
        url = stack.relay_url + "/llm/anthropic/v1/messages"
        answer = await agent.post(url, content=body, headers=ANTHROPIC)
    assert answer.status_code == 200
    [arrival] = stack.gateway.arrivals
    assert arrival.body == body  # the agent's own bytes, not an edit
    assert arrival.headers["content-type"] == "application/json"
    assert arrival.headers["anthropic-version"] == "2023-06-01"
    assert arrival.headers["toolref-key"] == KEY
    assert not any(k.startswith("toolref-") and k != "toolref-key" for k in arrival.headers)
    assert scripted.received == [body]
    raw, wire = _savings(answer)
    assert raw == header_lines(answer.request.headers.raw) + len(body)  # like for like
    assert wire == wire_bytes(arrival)
    # What it costs more is its toolref key's line, less the hop-by-hop lines left behind.
    assert wire - raw <= len(f"toolref-key: {KEY}\r\n")
    [line] = [line for line in stack.lines if " turn 1 " in line]
    assert "  not shrunk  (" in line
    assert f"sent {wire} B  not shrunk" in line
    assert "0.2x" not in line


async def test_one_that_a_later_turn_can_be_an_edit_of_goes_as_an_edit(redis: Redis) -> None:
    """As it came, an incompressible first turn would cost less than its edit; but then no
    later turn would have a base, and each would cost the whole conversation again. A turn
    with a message of 64 bytes or more goes as an edit, and the next is an edit of it."""
    rng = random.Random(7)
    noise = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(80))
    async with (
        relayed(redis, {"anthropic": Scripted().app()}) as stack,
        httpx.AsyncClient(timeout=TIMEOUT) as agent,
    ):
        url = stack.relay_url + "/llm/anthropic/v1/messages"
        first = await agent.post(url, content=_body(noise), headers=ANTHROPIC)
        second = await agent.post(url, content=_body(noise, "and then?"), headers=ANTHROPIC)
    raw, wire = _savings(first)
    assert wire > raw  # the edit was larger: not its size, its use made it an edit
    one, two = stack.gateway.arrivals
    assert one.headers["content-type"] == two.headers["content-type"] == MEDIA_TYPE
    assert described(two.body)["b"] is not None  # an edit of the first
    assert "not shrunk" in next(line for line in stack.lines if " turn 1 " in line)
    raw, wire = _savings(second)
    assert wire < raw


async def test_totals_are_told_per_agent_and_upstream(redis: Redis) -> None:
    providers = {"anthropic": Scripted().app(), "openai": Scripted().app()}
    long = "read the file src/app.py and tell me what it does " * 20
    async with (
        relayed(redis, providers) as stack,
        httpx.AsyncClient(timeout=TIMEOUT) as agent,
    ):
        for user_agent, upstream in (
            ("claude-cli/2.1.330 (external, cli)", "anthropic"),
            ("QwenCode/0.24.4 (linux; x64)", "anthropic"),
            ("claude-cli/2.1.330 (external, cli)", "anthropic"),
            ("claude-cli/2.1.330 (external, cli)", "openai"),
        ):
            path = "/v1/messages" if upstream == "anthropic" else "/v1/chat/completions"
            headers = {**ANTHROPIC, "user-agent": user_agent}
            answer = await agent.post(
                f"{stack.relay_url}/llm/{upstream}{path}", content=_body(long), headers=headers
            )
            assert answer.status_code == 200
    turns = [line for line in stack.lines if " turn " in line and "since the relay" not in line]
    assert [line.split("  ")[0] for line in turns] == [
        "toolref relay: claude-cli -> anthropic turn 1",
        "toolref relay: QwenCode -> anthropic turn 1",
        "toolref relay: claude-cli -> anthropic turn 2",
        "toolref relay: claude-cli -> openai turn 1",
    ]
    assert turns[1].endswith("over 1 answered turn)")  # Qwen Code's own, not Claude Code's
    assert turns[2].endswith("over 2 answered turns)")
    assert "(its conversations so far: " in turns[0]
    summaries = [line for line in stack.lines if "since the relay started" in line]
    assert [line.split(", every")[0] for line in summaries] == [
        "toolref relay: claude-cli -> anthropic",
        "toolref relay: QwenCode -> anthropic",
        "toolref relay: claude-cli -> openai",
    ]
    assert stack.relay.tally.turns == 4  # every one's together, as the counters count
    assert not any("2.1.330" in line for line in stack.lines)  # the product name alone
