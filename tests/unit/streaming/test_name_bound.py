"""Found in review (linear and bounded): an OpenAI Chat call's name streamed in fragments is
told, fragment by fragment, as the name so far (a copy of it), so an unbounded name made the
adapter quadratic in its length (80,000 fragments, 560 KB of name, took 0.6 s, doubling the
fragments quadrupled it). The name is bounded by `max_name_chars`, refused past it."""

from __future__ import annotations

from typing import Any

import pytest

from toolref.streaming import OpenAIChatAdapter, accumulate
from toolref.streaming.adapters.openai_chat import MAX_NAME_CHARS
from toolref.wire.errors import ChunkSequenceError


def named(name: str) -> dict[str, Any]:
    fragment = {"index": 0, "function": {"name": name}}
    return {"choices": [{"index": 0, "delta": {"tool_calls": [fragment]}}]}


def told(fragments: int) -> int:
    """The characters of names the adapter tells for a name streamed in `fragments` pieces
    (each chunk carries the name so far), up to the stream's refusal."""
    adapter = OpenAIChatAdapter()
    total = 0
    try:
        for n in range(fragments):
            for chunk in adapter.feed(named("a" if n == 0 else "bc")):
                total += len(chunk.name or "")
    except ChunkSequenceError:
        pass
    return total


def test_a_name_in_many_fragments_costs_a_bounded_amount() -> None:
    small, large = told(300), told(1200)
    assert small > 0
    assert large < 6 * small  # unbounded: the name so far, told 4 times as often, 16x


def test_a_name_past_max_name_chars_is_refused_naming_the_setting() -> None:
    adapter = OpenAIChatAdapter()
    adapter.feed(named("a" * MAX_NAME_CHARS))  # at the bound: taken
    with pytest.raises(ChunkSequenceError, match="max_name_chars=1024") as info:
        adapter.feed(named("b"))
    assert info.value.extra == {"limit": "max_name_chars", "maximum": MAX_NAME_CHARS}


def test_max_name_chars_is_a_setting() -> None:
    adapter = OpenAIChatAdapter()
    adapter.max_name_chars = 8
    adapter.feed(named("get_"))
    adapter.feed(named("time"))
    with pytest.raises(ChunkSequenceError, match="max_name_chars=8"):
        adapter.feed(named("s"))


def test_a_name_in_fragments_is_still_joined() -> None:
    events = [named("get_"), named("wea"), named("ther")]
    arguments = {
        "choices": [
            {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}
        ]
    }
    calls = accumulate([*events, arguments, "[DONE]"], "openai_chat")
    assert [c.name for c in calls] == ["get_weather"]
