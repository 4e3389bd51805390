"""Found in review (linear and bounded, second pass): once an OpenAI Chat server resent a
call's whole argument text, each shorter fragment was checked for a resend by joining the
text so far (a copy of it) and asking whether it began with the fragment. Alternating short,
non-repeating pieces after one resend made the stream quadratic (8,000 pieces of 100
characters, 0.8 MB, took 0.6 s; doubling them, 4x). The check reads the parts in place now,
costing the fragment's length."""

from __future__ import annotations

from typing import Any

import pytest

from toolref.streaming import OpenAIChatAdapter, accumulate
from toolref.streaming.adapters import openai_chat


def args_event(args: str, **function: Any) -> dict[str, Any]:
    fragment = {"index": 0, "function": {"arguments": args, **function}}
    return {"choices": [{"index": 0, "delta": {"tool_calls": [fragment]}}]}


def joined(monkeypatch: pytest.MonkeyPatch, pieces: int) -> int:
    """Characters of the text so far that the adapter read whole, over a stream that resends
    the text once and then sends `pieces` short non-repeating fragments."""
    total = 0
    text = openai_chat._Call.text

    def counted(call: Any) -> str:
        nonlocal total
        whole = text(call)
        total += len(whole)
        return whole

    monkeypatch.setattr(openai_chat._Call, "text", counted)
    adapter = OpenAIChatAdapter()
    adapter.feed(args_event('{"a": "', name="f"))
    adapter.feed(args_event('{"a": "xx'))  # the whole text again: a cumulative server
    for n in range(pieces):
        adapter.feed(args_event(f"y{n % 7}" * 10))
    return total


def test_short_fragments_after_a_resend_cost_their_own_length(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    small, large = joined(monkeypatch, 200), joined(monkeypatch, 800)
    assert large < 6 * small + 1000  # joining per fragment: 4x the fragments, 16x


def test_resends_after_a_resend_are_still_dropped() -> None:
    events = [
        args_event('{"a": ', name="f"),
        args_event('{"a": 1'),  # cumulative
        args_event('{"a"'),  # a shorter resend of text already here: dropped
        args_event(', "b": 2}'),
        args_event('{"a": 1, "b"'),  # a resend spanning two parts: dropped
        "[DONE]",
    ]
    calls = accumulate(events, "openai_chat")
    assert [c.arguments for c in calls] == [{"a": 1, "b": 2}]


@pytest.mark.parametrize(
    ("parts", "text", "expected"),
    [
        (["ab", "cd"], "abc", True),
        (["ab", "cd"], "abcd", True),
        (["ab", "cd"], "abd", False),
        (["ab", "cd"], "ac", False),
        (["abcd"], "ab", True),
        (["a", "b", "c"], "abc", True),
        (["a", "b"], "abc", False),
    ],
)
def test_starts_with_reads_the_parts_as_one_text(
    parts: list[str], text: str, expected: bool
) -> None:
    call = openai_chat._Call(0)
    for part in parts:
        call.append(part)
    assert call.starts_with(text) is expected
    assert ("".join(parts).startswith(text)) is expected
