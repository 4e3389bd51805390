"""`continuation.checkpoint_length`: the longest prefix before the last message with no
call waiting for a result, in each way a format places calls and results."""

from __future__ import annotations

from typing import Any

from toolref import formats
from toolref_server.registry.continuation import checkpoint_length
from toolref_server.registry.conversation import Conversation


def of(messages: list[Any]) -> Conversation:
    fmt = formats.detect(messages)
    texts = ["" for _ in messages]
    return Conversation(
        fmt, messages, texts, formats.scan(messages, fmt), formats.detection(messages)
    )


def use(n: int) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": f"t{n}", "name": "Read", "input": {}}],
    }


def result(*ns: int) -> dict[str, Any]:
    blocks = [{"type": "tool_result", "tool_use_id": f"t{n}", "content": "x"} for n in ns]
    return {"role": "user", "content": blocks}


USER = {"role": "user", "content": [{"type": "text", "text": "go"}]}


def test_it_ends_before_the_call_whose_result_is_the_last_message() -> None:
    # Claude Code: the last message holds the results (and the moving cache mark).
    assert checkpoint_length(of([USER, use(1), result(1), use(2), result(2)])) == 3
    assert checkpoint_length(of([USER, use(1), result(1)])) == 1


def test_a_call_still_waiting_at_the_end_does_not_move_it() -> None:
    assert checkpoint_length(of([USER, use(1), result(1), use(2)])) == 3


def test_calls_answered_later_keep_every_prefix_between_them_out() -> None:
    # t1 answered two messages later: the prefixes of 2 and 3 messages have it waiting.
    messages = [USER, use(1), {"role": "assistant", "content": "thinking"}, result(1), USER]
    assert checkpoint_length(of(messages)) == 4
    assert checkpoint_length(of(messages[:4])) == 1


def test_openai_chat_and_none_at_all() -> None:
    chat = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "out"},
        {"role": "assistant", "content": "done"},
    ]
    assert checkpoint_length(of(chat)) == 3
    assert checkpoint_length(of(chat[:1])) == 0
