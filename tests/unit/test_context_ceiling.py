"""The context bench's ceiling (`loadtests/context_ceiling.py`): with every tool result
replaced from the turn after it arrived, a conversation costs no more tokens than with any
policy's plan, and what is left is what replacing results cannot touch."""

from __future__ import annotations

import json
from typing import Any

from loadtests.context_ceiling import ceiling, cost


def bodies(turns: int, result: int, thought: int) -> list[bytes]:
    """An OpenAI chat conversation, one body per turn: the model's message (`thought`
    characters and a call), then its result (`result` characters)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    out = []
    for t in range(turns):
        call = {"id": f"c{t}", "type": "function", "function": {"name": "r", "arguments": "{}"}}
        out.append(json.dumps({"model": "m", "messages": messages}).encode())
        messages = [
            *messages,
            {"role": "assistant", "content": "t" * thought, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{t}", "content": f"{t}" + "x" * result},
        ]
    out.append(json.dumps({"model": "m", "messages": messages}).encode())
    return out


def test_the_ceiling_leaves_what_results_do_not_hold() -> None:
    heavy = ceiling(bodies(30, 8_000, 100), "openai-chat", "messages")
    chatty = ceiling(bodies(30, 8_000, 8_000), "openai-chat", "messages")
    assert heavy is not None
    assert chatty is not None
    assert heavy.results_share > 0.9 > 0.6 > chatty.results_share > 0.4
    assert heavy.tokens < 0.15  # every result but the newest is a stand-in
    assert 0.5 < chatty.tokens < 0.6  # the model's half stays as it was
    assert heavy.cost < 1
    assert chatty.cost < 1


def test_bodies_the_gateway_does_not_read_have_no_ceiling() -> None:
    assert ceiling([b"not json"], "openai-chat", "messages") is None
    assert ceiling([], "openai-chat", "messages") is None


def test_cost_prices_what_a_body_shares_with_the_one_before_as_read() -> None:
    assert cost([b"abcd"]) == 4 * 1.25
    assert cost([b"abcd", b"abcdef"]) == 4 * 1.25 + 4 * 0.1 + 2 * 1.25
