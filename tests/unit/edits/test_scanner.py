"""A body scanned from a remembered scan (`toolref.edits.scanner`: the messages it shares
byte for byte reused, the rest scanned) has exactly the spans a scan from its start gives,
whatever the remembered body was: the same conversation grown, changed at its tail, a
number that grew a digit, another conversation, or no JSON object at all."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from hypothesis import given, settings
from hypothesis import strategies as st

from toolref.edits import scanner, window

text_value = st.text(alphabet=st.sampled_from('ab \n\\"é😀{}[],:x1'), max_size=60)
long_text = st.integers(0, 3).map(
    lambda n: "".join(f"line {i} of a file that is read {n}\n" for i in range(200 * n))
)
# A message's blocks: tool results (Anthropic's, Gemini's parts), cache marks among them.
block = st.one_of(
    st.fixed_dictionaries(
        {"type": st.just("tool_result"), "content": st.one_of(text_value, long_text)},
        optional={"cache_control": st.just({"type": "ephemeral"})},
    ),
    st.fixed_dictionaries(
        {"functionResponse": st.fixed_dictionaries({"response": st.one_of(text_value, long_text)})}
    ),
    st.fixed_dictionaries({"type": st.just("text"), "text": text_value}),
)
message = st.one_of(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "assistant", "tool", "model"]),
            "content": st.one_of(text_value, long_text, st.lists(block, max_size=4)),
        },
        optional={
            "id": st.text(max_size=5),
            "cache_control": st.just({"type": "ephemeral"}),
            # OpenAI Responses items: the model's by type (`scanner.MODEL_ITEMS`), or not
            "type": st.sampled_from(["message", "reasoning", "function_call_output"]),
        },
    ),
    st.integers(0, 10**30),
    text_value,
)
extra = st.dictionaries(
    st.sampled_from(["stream", "tools", "z"]), st.one_of(st.booleans(), text_value)
)


def body(messages: list[Any], tail: dict[str, Any], spacing: str) -> str:
    inner = ("," + spacing).join(json.dumps(m, ensure_ascii=False) for m in messages)
    rest = "".join(f',"{k}":{json.dumps(v)}' for k, v in tail.items())
    return '{"model":"m","system":"' + "s" * 300 + '","messages":[' + inner + "]" + rest + "}"


def fresh(text: str, key: str, window: bool) -> scanner.Scan | None:
    scanner._MEMOS.clear()
    return scanner.scan(text, key, window)


def same(one: scanner.Scan | None, other: scanner.Scan | None) -> bool:
    if one is None or other is None:
        return one is other
    return (one.cuts, one.messages, one.models, one.owners, one.ends, one.bounds, one.items) == (
        other.cuts,
        other.messages,
        other.models,
        other.owners,
        other.ends,
        other.bounds,
        other.items,
    )


@dataclass(frozen=True)
class Grown:
    """A conversation and its next body: its first messages, more, how many at the tail
    changed (rewritten, a number grown a digit, or with `role_last` its role said after its
    content), the members after the messages before and after, the spacing, the long window."""

    first: list[Any]
    more: list[Any]
    changed: int
    tail: dict[str, Any]
    other_tail: dict[str, Any]
    spacing: str
    window: bool
    role_last: bool

    def bodies(self, write: Callable[[list[Any], dict[str, Any], str], str]) -> tuple[str, str]:
        later = [*self.first, *self.more]
        if self.changed and later:
            index = len(later) - min(self.changed, len(later))
            old = later[index]
            if isinstance(old, int):
                later[index] = old * 10 + 7
            elif isinstance(old, dict) and self.role_last:
                later[index] = {"content": old.get("content"), "role": "assistant"}
            else:
                later[index] = {"role": "user", "content": "x"}
        return write(self.first, self.tail, self.spacing), write(
            later, self.other_tail, self.spacing
        )


GROWN: Final = st.builds(
    Grown,
    st.lists(message, min_size=1, max_size=8),
    st.lists(message, max_size=3),
    st.integers(0, 3),
    extra,
    extra,
    st.sampled_from(["", " ", "\n  "]),
    st.booleans(),
    st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(GROWN)
def test_a_resumed_scan_is_the_scan_from_the_start(grown: Grown) -> None:
    before, after = grown.bodies(body)
    fresh(before, "messages", grown.window)
    resumed = scanner.scan(after, "messages", grown.window)  # from the scan of `before`
    assert same(resumed, fresh(after, "messages", grown.window))


def test_a_grown_conversation_is_scanned_from_its_last_shared_message() -> None:
    messages = [{"role": "user", "content": f"message {n} " * 50} for n in range(200)]
    before = body(messages, {}, "")
    scanner._MEMOS.clear()
    scanner.scan(before, "messages", True)
    after = body([*messages, {"role": "assistant", "content": "done"}], {"stream": True}, "")
    memo, common = scanner._closest(after, "messages", True)
    assert memo is not None
    assert common == before.index("]")  # everything up to the list's end
    resumed = scanner.scan(after, "messages", True)
    assert same(resumed, fresh(after, "messages", True))
    assert resumed is not None
    assert len(resumed.messages) == 201


def test_a_body_that_is_no_object_is_none_whatever_is_remembered() -> None:
    before = body([{"role": "user", "content": "a" * 2000}], {}, "")
    fresh(before, "messages", False)
    assert scanner.scan(before[:-1] + "} extra", "messages", False) is None
    assert scanner.scan(before[:-1], "messages", False) is None


def test_the_memory_is_bounded() -> None:
    scanner._MEMOS.clear()
    for n in range(3 * scanner.MEMOS):
        scanner.scan(body([{"role": "user", "content": f"{n} " * 600}], {}, ""), "messages", False)
    assert len(scanner._MEMOS) == scanner.MEMOS
    assert sum(len(m.text) for m in scanner._MEMOS) <= scanner.MEMO_CHARS


def test_the_long_windows_memory_is_bounded_by_the_characters_of_its_texts() -> None:
    """What a long message's text cuts into is remembered by the text itself. The bound
    weighed only the cuts (one per 512 characters at least), so its 4,096 texts of any
    length were held whole: 4,096 tool results of 1 MiB, 4 GiB, in a relay or an agent's
    process running for days. Now the texts' characters count against it."""
    with window._WINDOWS_LOCK:
        window._WINDOWS.clear()
    try:
        limit = window._WINDOWS.limit
        assert limit is not None
        span = 8192
        for n in range(limit // span + 512):  # distinct texts, more characters than the bound
            text = f"{n:08d}" + "a" * (span - 8)
            window.windowed(text, 0, len(text))
        with window._WINDOWS_LOCK:
            held = sum(len(text) for text in window._WINDOWS)
        assert 0 < held <= limit
    finally:
        with window._WINDOWS_LOCK:
            window._WINDOWS.clear()


def test_shared_counts_first_characters_at_any_length() -> None:
    for size in (0, 1, 63, 64, 65, 1000, 100_000):
        one = "x" * size + "a" + "y" * 10
        assert scanner.shared(one, "x" * size + "b") == size
        assert scanner.shared(one, one) == len(one)
        assert scanner.shared(one, one[:size]) == size


def test_responses_items_of_the_model_are_its_messages_by_their_type() -> None:
    """A Responses item has no role but a `message`'s: the model's items are told by their
    `type` (`scanner.MODEL_ITEMS`), their spans the model's (`models`) and their numbers
    `items`; tool outputs and the user's items are not; a role of another's (a string not
    the model's) overrides a model's type; chat messages (no `type`) are as before."""
    items: list[Any] = [
        {"type": "message", "role": "user", "content": "go"},
        {"type": "reasoning", "summary": [], "encrypted_content": "e" * 300},
        {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "c"},
        {"type": "function_call_output", "call_id": "c", "output": "ok"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text"}]},
        {"role": "assistant", "content": "no type: the model's, no item"},
        {"type": "custom_tool_call", "role": "user", "input": "x"},
        *(
            {"type": kind, "id": "x", "call_id": "c"}
            for kind in ("local_shell_call", "shell_call", "apply_patch_call", "computer_call")
        ),
        {"type": "custom_tool_call_output", "call_id": "c", "output": "x"},
        # hosted tools: a web search (its query) and a tool search's call are the model's;
        # an item holding the tool's output is not
        {"type": "web_search_call", "status": "completed", "action": {"type": "search"}},
        {"type": "tool_search_call", "call_id": "t", "execution": "server", "arguments": {}},
        *(
            {"type": kind, "id": "x", "status": "completed"}
            for kind in ("mcp_call", "file_search_call", "code_interpreter_call")
        ),
        {"type": "image_generation_call", "result": "aVZC"},
        {"type": "mcp_list_tools", "tools": []},
        {"type": "tool_search_output", "call_id": "t", "tools": []},
    ]
    found = fresh(json.dumps({"input": items}), "input", False)
    assert found is not None
    assert found.items == [1, 2, 4, 7, 8, 9, 10, 12, 13]
    model_messages = [n for n, at in enumerate(found.messages) if at in found.models]
    assert model_messages == [1, 2, 4, 5, 7, 8, 9, 10, 12, 13]
