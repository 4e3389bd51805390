"""`toolref.handoff.switch`: a request for the backend a conversation switched to."""

from __future__ import annotations

import json
from typing import Any, get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolref.handoff.render import OPEN
from toolref.handoff.switch import (
    ID_PATTERN,
    id_cap,
    mapped_id,
    original_id,
    switched,
    switched_text,
)
from toolref.wire.endpoints import endpoint
from toolref.wire.models import FormatName
from toolref_server.gateway.gateway import switch_body


def anthropic_conversation() -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [
            {"role": "user", "content": "read the file"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "SIG-FROM-A"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {
                        "type": "tool_use",
                        "id": "functions.read_file:0",
                        "name": "Read",
                        "input": {"file_path": "/src/app.py"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "functions.read_file:0",
                        "content": "APP-SOURCE",
                    }
                ],
            },
            {"role": "user", "content": "now on the new backend"},
        ],
    }


def test_ids_are_mapped_opaque_blocks_dropped_and_the_handoff_prepended() -> None:
    out = switched(anthropic_conversation(), "anthropic", "messages", at=3)
    text = json.dumps(out)
    assert "SIG-FROM-A" not in text
    assert "redacted_thinking" not in text
    call = out["messages"][1]["content"][0]
    result = out["messages"][2]["content"][0]
    assert call["type"] == "tool_use"
    assert ID_PATTERN.fullmatch(call["id"])
    assert result["tool_use_id"] == call["id"]
    assert original_id(call["id"]) == "functions.read_file:0"
    first = out["messages"][0]["content"]
    assert OPEN in json.dumps(first)
    assert "APP-SOURCE" in json.dumps(first)  # the tool context, verbatim
    assert out["messages"][-1] == {"role": "user", "content": "now on the new backend"}


def test_the_same_request_always_gives_the_same_result() -> None:
    """Every later turn gets the same prefix: the new backend's prompt cache keeps hitting."""
    one = switched(anthropic_conversation(), "anthropic", "messages", at=3)
    two = switched(anthropic_conversation(), "anthropic", "messages", at=3)
    assert json.dumps(one) == json.dumps(two)


def test_opaque_fields_after_the_switch_are_the_new_backends_and_stay() -> None:
    body = anthropic_conversation()
    body["messages"].append(
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "B"}]}
    )
    out = switched(body, "anthropic", "messages", at=3)
    assert out["messages"][-1]["content"][0]["signature"] == "B"


def test_encrypted_reasoning_items_of_the_responses_api_are_dropped() -> None:
    body = {
        "input": [
            {"role": "user", "content": "hi"},
            {"type": "reasoning", "id": "rs_1", "encrypted_content": "OPAQUE", "summary": []},
            {"type": "function_call", "call_id": "call:1", "name": "shell", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call:1", "output": "done"},
        ]
    }
    out = switched(body, "openai-responses", "input")
    assert "OPAQUE" not in json.dumps(out)
    calls = [i for i in out["input"] if i.get("type", "").startswith("function_call")]
    assert calls[0]["call_id"] == calls[1]["call_id"] == mapped_id("call:1")


def test_a_function_call_item_before_the_switch_loses_its_item_id() -> None:
    """Its `id` (`fc_...`) names an item of the old backend whose reasoning item is dropped:
    OpenAI refuses such a pair half-kept (400). `call_id` pairs the result."""
    body = {
        "input": [
            {"role": "user", "content": "hi"},
            {"type": "reasoning", "id": "rs_1", "encrypted_content": "OPAQUE", "summary": []},
            {"type": "function_call", "id": "fc_9", "call_id": "c1", "name": "ls", "arguments": ""},
            {"type": "function_call_output", "call_id": "c1", "output": "done"},
        ]
    }
    out = switched(body, "openai-responses", "input")
    call = next(i for i in out["input"] if i.get("type") == "function_call")
    assert "id" not in call
    assert call["call_id"] == "c1"


def test_an_assistant_message_of_thinking_alone_is_dropped_not_left_empty() -> None:
    """Stripped of its thinking, it would have no content, which the API refuses."""
    body = anthropic_conversation()
    body["messages"].insert(
        1,
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "S"}]},
    )
    out = switched(body, "anthropic", "messages", at=4)
    assert all(m.get("content") != [] for m in out["messages"])
    assert len([m for m in out["messages"] if m["role"] == "assistant"]) == 1


FORMATS: tuple[FormatName | None, ...] = (None, *get_args(FormatName))


@given(st.text(max_size=300) | st.from_regex(r"[a-zA-Z0-9_-]{1,300}", fullmatch=True))
def test_mapped_ids_fit_the_pattern_and_the_cap_of_every_format(value: str) -> None:
    """Ids of any length: each mapped one fits the pattern and its API's cap, and maps back
    unless it had to be a digest. Before, `tid_` and hex (twice the length, four times for
    non-ASCII ids) went over 40 characters for Chat Completions and 64 for Responses, and
    over the pattern's own 256."""
    for fmt in FORMATS:
        mapped = mapped_id(value, fmt)
        assert ID_PATTERN.fullmatch(mapped)
        assert len(mapped) <= id_cap(fmt)
        assert mapped_id(value, fmt) == mapped  # deterministic
        if not mapped.startswith("tid_h"):
            assert original_id(mapped) == value
        takes = len(value) <= id_cap(fmt) and ID_PATTERN.fullmatch(value)
        if takes and not value.startswith("tid_"):
            assert mapped == value  # the new backend's own ids pass as they are


def test_openai_caps_are_40_for_chat_and_64_for_responses() -> None:
    assert id_cap("openai-chat") == 40
    assert id_cap("openai-responses") == 64
    assert id_cap("anthropic") == 256  # the pattern's own bound
    kimi = "functions.write_todos:0"  # 23 characters; `tid_` and hex made 50
    assert len(mapped_id(kimi, "anthropic")) == 50  # fits there, and maps back
    assert len(mapped_id(kimi, "openai-chat")) == 40
    assert mapped_id(kimi, "openai-responses") == mapped_id(kimi, "anthropic")
    own = "call_" + "a" * 50  # in the pattern, 55 characters
    assert mapped_id(own, "openai-responses") == own
    assert len(mapped_id(own, "openai-chat")) == 40


def test_long_ids_that_share_a_prefix_stay_apart() -> None:
    """A digest, not a cut: ids alike in their first 40 (or 64) characters do not collide."""
    stem = "codex_mcp__codex_apps__google_calendar.search_events_exec-"
    ids = [f"{stem}{n:036d}" for n in range(500)]
    for fmt in ("openai-chat", "openai-responses", "anthropic"):
        mapped = {mapped_id(value, fmt) for value in ids}
        assert len(mapped) == len(ids)
        assert all(len(m) <= id_cap(fmt) and ID_PATTERN.fullmatch(m) for m in mapped)


@pytest.mark.parametrize(("fmt", "key"), [("openai-chat", "messages"), ("anthropic", "messages")])
def test_long_ids_are_mapped_alike_in_calls_and_results(fmt: FormatName, key: str) -> None:
    long_id = "functions.read_file:" + "7" * 60
    if fmt == "openai-chat":
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": "read it"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": long_id,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "a"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": long_id, "content": "A-SOURCE"},
            {"role": "user", "content": "go on"},
        ]
        out = switched({key: messages}, fmt, key, at=3)[key]
        call_id = out[1]["tool_calls"][0]["id"]
        assert out[2]["tool_call_id"] == call_id
    else:
        body = anthropic_conversation()
        for message in body["messages"][1:3]:
            for block in message["content"]:
                for field in ("id", "tool_use_id"):
                    if field in block:
                        block[field] = long_id
        out = switched(body, fmt, key, at=3)[key]
        call_id = out[1]["content"][0]["id"]
        assert out[2]["content"][0]["tool_use_id"] == call_id
    assert len(call_id) <= id_cap(fmt)
    assert ID_PATTERN.fullmatch(call_id)


def test_an_id_with_a_lone_surrogate_is_mapped_not_raised() -> None:
    """JSON can carry `\\ud800`: encoding it for the hex spelling raised UnicodeEncodeError
    out of `switched_text`, which must take any JSON."""
    text = json.dumps(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "a.\ud800", "content": "x"}],
                }
            ]
        }
    )
    out = switched_text(text, "anthropic", "messages", None)
    assert out is not None
    blocks = json.loads(out)["messages"][0]["content"]
    (mapped,) = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
    assert ID_PATTERN.fullmatch(mapped)
    assert original_id(mapped) == "a.\ud800"


def test_the_text_rewrite_keeps_the_bytes_of_everything_it_leaves_alone() -> None:
    body = anthropic_conversation()
    body["messages"].append(
        {"role": "assistant", "content": [{"type": "text", "text": "x", "n": 1.0, "z": -0.0}]}
    )
    text = json.dumps(body, separators=(",", ":")).replace('"n":1.0', '"n":1.0e0')
    text = text.replace('"model":"m"', '"model":"m","temperature":1e-7')
    out = switched_text(text, "anthropic", "messages", at=3)
    assert out is not None
    assert '"temperature":1e-7' in out  # members kept as written
    assert '{"type":"text","text":"x","n":1.0e0,"z":-0.0}' in out  # after the switch: kept
    assert '"content":"now on the new backend"' in out
    assert json.loads(out) == switched(json.loads(text), "anthropic", "messages", at=3)
    assert "SIG-FROM-A" not in out


def test_a_body_that_is_no_object_with_messages_is_left_to_travel_as_it_is() -> None:
    assert switched_text("[1]", "anthropic", "messages", None) is None
    assert switched_text('{"messages": "hi"}', "anthropic", "messages", None) is None
    assert switched_text("{", "anthropic", "messages", None) is None


_KEYS = st.sampled_from(
    [
        "type",
        "role",
        "content",
        "id",
        "tool_use_id",
        "tool_call_id",
        "call_id",
        "name",
        "input",
        "text",
        "tool_calls",
        "function",
        "arguments",
        "output",
        "encrypted_content",
        "parts",
    ]
)
_WORDS = st.sampled_from(
    [
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
        "user",
        "assistant",
        "tool",
        "function_call",
        "function_call_output",
        "reasoning",
        "message",
        "text",
    ]
)
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | _WORDS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=5),
    max_leaves=30,
)
_ENDPOINTS = st.sampled_from(
    [("anthropic", "messages"), ("openai-chat", "messages"), ("openai-responses", "input")]
)


@given(st.lists(_JSON, max_size=6), _ENDPOINTS, st.none() | st.integers(0, 8))
def test_the_text_rewrite_is_total_for_any_json(
    messages: list[Any], endpoint: tuple[Any, str], at: int | None
) -> None:
    """Any JSON body: rewritten, or None (it travels as sent); never an exception (the
    gateway rewrites after the history is kept). Failed before: a content block whose
    `type` is a list raised TypeError, messages not in the format a ValidationError."""
    fmt, key = endpoint
    text = json.dumps({"model": "m", key: messages})
    out = switched_text(text, fmt, key, at)
    if out is not None:
        assert isinstance(json.loads(out)[key], list)


def test_a_lone_surrogate_in_a_rewritten_message_is_written_as_its_escape() -> None:
    """The message the block goes into is written again: a lone surrogate in it came out
    raw, and the gateway's `.encode()` of the body raised UnicodeEncodeError (a 500 for
    valid JSON)."""
    text = '{"model":"m","messages":[{"role":"user","content":"a\\ud800b"}]}'
    out = switched_text(text, "anthropic", "messages", None)
    assert out is not None
    assert "\\ud800" in out
    assert json.loads(out.encode("utf-8")) == switched(json.loads(text), "anthropic", "messages")


def test_the_gateway_rewrites_a_body_with_a_lone_surrogate() -> None:
    llm = endpoint("POST", "/v1/messages")
    assert llm is not None
    body = b'{"model":"m","messages":[{"role":"user","content":"a\\udc00b"}]}'
    out = json.loads(switch_body(body, llm, None))
    assert OPEN in out["messages"][0]["content"]
    assert out["messages"][0]["content"].endswith("a\udc00b")


def test_items_before_a_dropped_reasoning_item_keep_their_bytes() -> None:
    """Matched from the end, every item before a dropped reasoning item was compared with
    its neighbour and written again by `json` (`\\u00e9` became `é`, `1e-7` became
    `1e-07`), though the switch left it alone."""
    kept = (
        '{"type":"message","role":"assistant",'
        '"content":[{"type":"output_text","text":"caf\\u00e9"}],"n":1e-7}'
    )
    text = (
        '{"model":"m","input":[{"role":"user","content":"hi"},'
        + kept
        + ',{"role":"user","content":"more"},'
        '{"type":"reasoning","id":"rs_1","encrypted_content":"OPAQUE","summary":[]},'
        '{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]},'
        '{"role":"user","content":"and now"}]}'
    )
    out = switched_text(text, "openai-responses", "input", None)
    assert out is not None
    assert kept in out
    assert '{"role":"user","content":"more"}' in out
    assert json.loads(out) == switched(json.loads(text), "openai-responses", "input")


_PLAIN_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=6)


@given(
    st.lists(st.tuples(_PLAIN_TEXT, st.booleans()), min_size=1, max_size=8),
    st.none() | st.integers(0, 20),
)
def test_messages_the_switch_leaves_alone_keep_their_bytes_wherever_others_drop(
    texts: list[tuple[str, bool]], at: int | None
) -> None:
    """Thinking-only assistant messages (dropped before the switch) anywhere between plain
    text messages: each plain message but the first user one, which takes the block, keeps
    the text it was sent as (here, ASCII escapes and spaces `json` would not write)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for index, (words, thinking_after) in enumerate(texts):
        role = "assistant" if index % 2 == 0 else "user"
        messages.append({"role": role, "content": [{"type": "text", "text": words}]})
        if thinking_after:
            thought = {"type": "thinking", "thinking": "t", "signature": "S"}
            messages.append({"role": "assistant", "content": [thought]})
    pieces = [json.dumps(m, separators=(", ", ": ")) for m in messages]
    text = '{"model": "m", "messages": [' + ", ".join(pieces) + "]}"
    out = switched_text(text, "anthropic", "messages", at)
    assert out is not None
    for message, piece in zip(messages[1:], pieces[1:], strict=True):
        if message["content"][0]["type"] == "text":
            assert piece in out
    assert json.loads(out) == switched(json.loads(text), "anthropic", "messages", at)
