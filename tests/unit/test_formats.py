"""The format layer: lossless markers for every format, pairing, detection, and its errors."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path as FilePath
from types import ModuleType
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from toolref import formats
from toolref.formats import (
    Scan,
    ai_sdk_v4,
    ai_sdk_v5,
    anthropic,
    gemini,
    openai_chat,
    openai_responses,
)
from toolref.formats import site as site_module
from toolref.formats.evidence import FOREIGN
from toolref.sending.rewrite import rewrite
from toolref.wire.canonical import digest_of, is_ref
from toolref.wire.errors import InvalidRefError, ValidationError
from toolref.wire.models import FormatName

from ..conftest import need
from .format_strategies import CONVERSATIONS, Conversation, Path

MODULES: dict[str, ModuleType] = {
    m.NAME: m for m in (openai_chat, openai_responses, anthropic, ai_sdk_v4, ai_sdk_v5, gemini)
}
NAMES = list(MODULES)
SPLIT = ["openai-chat", "openai-responses", "anthropic", "gemini"]  # calls and results apart
COMBINED = ["ai-sdk-v4", "ai-sdk-v5"]  # a call and its result in one object
# The members that may carry a payload, by format: only these ever leave an object.
PAYLOAD_MEMBERS = {
    "openai-chat": {"arguments", "content"},
    "openai-responses": {"arguments", "input", "output"},
    "anthropic": {"input", "content"},
    "ai-sdk-v4": {"args", "result"},
    "ai-sdk-v5": {"input", "output", "errorText"},
    "gemini": {"args", "response"},
}
MARKERS = ("toolRef", "toolRefOrder")
TRACES = FilePath(__file__).resolve().parents[3] / "shared" / "traces"

PROPERTY = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def at(messages: Any, path: Path) -> Any:
    node = messages
    for step in path:
        node = node[step]
    return node


def ref_of(invocation: dict[str, Any]) -> str:
    return str(digest_of(invocation).ref)


def real_refs(found: Scan) -> dict[str, str]:
    return {pair.key: ref_of(pair.invocation()) for pair in found.complete}


def held(found: Scan) -> tuple[dict[str, dict[str, Any]], bool]:
    """ref -> invocation for the complete pairs, and whether two of them share a ref but not
    their bytes (JCS identity: other key order, 1 and 1.0), the one case that is not
    byte-identical after a round trip."""
    invocations: dict[str, dict[str, Any]] = {}
    collision = False
    for pair in found.complete:
        invocation = pair.invocation()
        ref = ref_of(invocation)
        if ref in invocations:
            collision |= json.dumps(invocations[ref]) != json.dumps(invocation)
        invocations.setdefault(ref, invocation)
    return invocations, collision


def invocations_of(found: Scan) -> list[dict[str, Any]]:
    return [pair.invocation() for pair in found.complete]


def round_trip(messages: list[Any], name: FormatName) -> tuple[list[Any], list[Any]]:
    """(replaced, filled) with the real refs of every complete invocation."""
    fmt = formats.get(name)
    found = formats.scan(messages, fmt)
    replaced = formats.replace(messages, found, real_refs(found))
    invocations, _ = held(found)
    return replaced, formats.fill(replaced, formats.scan(replaced, fmt), invocations)


# --- properties over generated conversations ----------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@PROPERTY
@given(data=st.data())
def test_fill_after_replace_gives_back_the_exact_messages(
    name: FormatName, data: st.DataObject
) -> None:
    conversation: Conversation = data.draw(CONVERSATIONS[name], label="conversation")
    messages = conversation.messages
    original = copy.deepcopy(messages)
    original_bytes = json.dumps(messages)
    fmt = formats.get(name)
    if conversation.tool_sites:
        assert formats.detect(messages).name == name
    # A message holding a tool call or result fits no other format, so detection can tell
    # a conversation that mixes formats (or is named wrongly) by the first such message.
    tool_paths = conversation.marked + conversation.pending + conversation.orphans
    for index in {path[0] for path in tool_paths}:
        assert isinstance(index, int)
        for other in formats.NAMES:
            if other != name:
                assert formats.get(other).claim(messages[index]) == FOREIGN, (index, other)

    found = formats.scan(messages, fmt)
    # Pairing as planned: the same invocations (name, args, result, isError), no others.
    assert sorted(ref_of(p.invocation()) for p in found.complete) == sorted(
        ref_of(i) for i in conversation.invocations
    )
    keys = [pair.key for pair in found.pairs]
    assert len(set(keys)) == len(keys)
    refs = real_refs(found)

    replaced = formats.replace(messages, found, refs)
    replaced_bytes = json.dumps(replaced)
    again = formats.scan(replaced, fmt)
    assert [pair.key for pair in again.pairs] == keys
    assert {pair.key: pair.ref for pair in again.marked} == refs
    assert again.complete == []
    if conversation.tool_sites:
        assert formats.detect(replaced).name == name
    for path in conversation.marked:
        marker, full = at(replaced, path), at(messages, path)
        assert marker["toolRef"] in refs.values()
        removed = set(full) - set(marker)
        assert removed, path
        assert removed <= PAYLOAD_MEMBERS[name]
        assert {k: v for k, v in marker.items() if k not in MARKERS} == {
            k: v for k, v in full.items() if k not in removed
        }
    for path in conversation.pending + conversation.orphans + conversation.inert:
        assert json.dumps(at(replaced, path)) == json.dumps(at(messages, path)), path
    assert len(found.pairs) - len(found.complete) == len(conversation.pending) + len(
        conversation.orphans
    )

    invocations, collision = held(found)
    filled = formats.fill(replaced, again, invocations)
    assert filled == messages
    if collision:
        event("two invocations share a ref but not their bytes")
    else:
        assert json.dumps(filled) == original_bytes
    assert messages == original
    assert json.dumps(messages) == original_bytes
    assert json.dumps(replaced) == replaced_bytes  # fill leaves its input alone too

    # A marker costs at most 64 bytes (and the member order, when it has to be listed).
    payload = sum(
        len(json.dumps(i["args"])) + len(json.dumps(i["result"])) for i in invocations_of(found)
    )
    overhead = 0
    for path in conversation.marked:
        full = at(messages, path)
        overhead += 64
        if len(set(full) - set(at(replaced, path))) == 2:
            overhead += 20 + len(json.dumps(list(full)))
    assert len(original_bytes) - len(replaced_bytes) >= payload - overhead
    if payload > overhead:
        event("payloads outweigh markers")
        assert len(replaced_bytes) < len(original_bytes)


# --- the markers each module documents --------------------------------------------------


def documented_markers(module: ModuleType) -> list[dict[str, Any]]:
    """The JSON objects of the literal block (after `::`) in a format module's docstring."""
    lines = (module.__doc__ or "").splitlines()
    start = next(n for n, line in enumerate(lines) if line.rstrip().endswith("::")) + 1
    block = []
    for line in lines[start:]:
        if line.strip() and not line.startswith("    "):
            break
        block.append(line)
    text, decoder, found, position = "\n".join(block).strip(), json.JSONDecoder(), [], 0
    while position < len(text):
        value, position = decoder.raw_decode(text, position)
        found.append(value)
        while position < len(text) and text[position].isspace():
            position += 1
    return found


def documented_payloads(name: str, marker: dict[str, Any], parent: str | None) -> dict[str, Any]:
    """What a documented marker stands for: its payload members, with example values."""
    if name == "openai-chat":
        if parent == "function":
            return {"arguments": '{"path": "a.py"}'}
        return {"content": "print(1)\n"}
    if name == "openai-responses":
        if marker["type"] == "function_call":
            return {"arguments": '{"command": ["ls"]}'}
        return {"output": "a.py\nb.py\n"}
    if name == "anthropic":
        if marker["type"] == "tool_use":
            return {"input": {"file_path": "a.py"}}
        return {"content": "print(1)\n"}
    if name == "ai-sdk-v4":
        return {"args": {"city": "Paris"}, "result": {"celsius": 21}}
    if name == "ai-sdk-v5":
        return {"input": {"city": "Paris"}, "output": {"celsius": 21}}
    if parent in ("functionCall", "function_call"):
        return {"args": {"city": "Paris"}}
    return {"response": {"celsius": 21}}


def unmark(value: Any, name: str, parent: str | None = None) -> Any:
    """`value` with every `toolRef` marker replaced by the payload members it stands for."""
    if isinstance(value, list):
        return [unmark(item, name, parent) for item in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key == "toolRef":
            out.update(documented_payloads(name, value, parent))
        else:
            out[key] = unmark(item, name, key)
    return out


DOCUMENTED = {name: documented_markers(module) for name, module in MODULES.items()}
DOCUMENTED_REF = "tr_x7k2m4qpeoaccwyd6n3h5ggwmu"


def full_example(name: str) -> list[dict[str, Any]]:
    """The documented conversation with its payloads in place: one complete invocation."""
    return unmark(DOCUMENTED[name], name)  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", NAMES)
def test_replace_produces_the_documented_marker(name: str) -> None:
    markers = DOCUMENTED[name]
    assert is_ref(DOCUMENTED_REF)
    assert markers, f"{name}: no marker example in the module docstring"
    assert json.dumps(markers).count('"toolRef"') == (2 if name in SPLIT else 1)
    full = full_example(name)
    assert "toolRef" not in json.dumps(full)
    fmt = formats.detect(full)
    assert fmt.name == name
    found = formats.scan(full, fmt)
    [pair] = found.complete
    replaced = formats.replace(full, found, {pair.key: DOCUMENTED_REF})
    assert replaced == markers
    assert json.dumps(replaced) == json.dumps(markers)
    filled = formats.fill(
        replaced, formats.scan(replaced, fmt), {DOCUMENTED_REF: pair.invocation()}
    )
    assert json.dumps(filled) == json.dumps(full)


@pytest.mark.parametrize("name", NAMES)
def test_the_documented_markers_are_detected_and_scanned(name: str) -> None:
    markers = DOCUMENTED[name]
    assert formats.detect(markers).name == name
    found = formats.scan(markers, formats.get(name))
    assert [pair.ref for pair in found.pairs] == [DOCUMENTED_REF]
    assert found.refs == [DOCUMENTED_REF]
    assert found.complete == []


# --- malformed markers ------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "bad",
    [
        "tr_short",
        "TR_X7K2M4QPEOACCWYD6N3H5GGWMU",
        "tr_x7k2m4qpeoaccwyd6n3h5ggwmb",  # its last character sets padding bits
        "sha256:" + "0" * 64,
        "",
        42,
        None,
        ["tr_x7k2m4qpeoaccwyd6n3h5ggwmu"],
    ],
)
def test_a_marker_with_a_malformed_ref_is_refused_naming_its_message(
    name: FormatName, bad: Any
) -> None:
    messages = full_example(name) + copy.deepcopy(DOCUMENTED[name])
    last = len(messages) - 1
    messages[last] = set_marker(messages[last], bad)
    with pytest.raises(InvalidRefError) as info:
        formats.scan(messages, formats.get(name))
    assert info.value.extra["message"] == last
    assert f"message {last} " in info.value.detail


def set_marker(value: Any, ref: Any) -> Any:
    if isinstance(value, list):
        return [set_marker(item, ref) for item in value]
    if isinstance(value, dict):
        return {k: ref if k == "toolRef" else set_marker(v, ref) for k, v in value.items()}
    return value


def test_a_call_and_result_with_different_refs_are_refused() -> None:
    messages = copy.deepcopy(DOCUMENTED["openai-chat"])
    messages[1]["toolRef"] = "tr_" + "a" * 26
    with pytest.raises(ValidationError) as info:
        formats.scan(messages, formats.get("openai-chat"))
    assert "different refs" in info.value.detail


# --- small conversations, by hand ---------------------------------------------------------

Message = dict[str, Any]


def call(name: str, call_id: str | None, args: Any = None, tool: str = "read_file") -> Message:
    """One assistant message with one tool call (split formats)."""
    args = {"path": "a.py"} if args is None else args
    if name == "openai-chat":
        function = {"name": tool, "arguments": json.dumps(args)}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": function}],
        }
    if name == "openai-responses":
        return {
            "type": "function_call",
            "call_id": call_id,
            "name": tool,
            "arguments": json.dumps(args),
        }
    if name == "anthropic":
        block = {"type": "tool_use", "id": call_id, "name": tool, "input": args}
        return {"role": "assistant", "content": [block]}
    assert name == "gemini"
    function_call = {"name": tool, "args": args} | ({} if call_id is None else {"id": call_id})
    return {"role": "model", "parts": [{"functionCall": function_call}]}


def result(name: str, call_id: str | None, value: Any, tool: str = "read_file") -> Message:
    """One message with one tool result (split formats)."""
    if name == "openai-chat":
        return {"role": "tool", "tool_call_id": call_id, "content": value}
    if name == "openai-responses":
        return {"type": "function_call_output", "call_id": call_id, "output": value}
    if name == "anthropic":
        block = {"type": "tool_result", "tool_use_id": call_id, "content": value}
        return {"role": "user", "content": [block]}
    assert name == "gemini"
    response = {"name": tool, "response": value} | ({} if call_id is None else {"id": call_id})
    return {"role": "user", "parts": [{"functionResponse": response}]}


def invocation(name: str, call_id: str, value: Any = None, tool: str = "read_file") -> Message:
    """One assistant message with one call and, unless `value` is None, its result (AI SDK)."""
    args = {"path": "a.py"}
    if name == "ai-sdk-v4":
        item: Message = {"state": "call", "toolCallId": call_id, "toolName": tool, "args": args}
        if value is not None:
            item |= {"state": "result", "result": value}
        return {"role": "assistant", "content": "", "toolInvocations": [item]}
    assert name == "ai-sdk-v5"
    part: Message = {"type": f"tool-{tool}", "toolCallId": call_id, "state": "input-available"}
    part["input"] = args
    if value is not None:
        part |= {"state": "output-available", "output": value}
    return {"id": "m1", "role": "assistant", "parts": [part]}


def answered(name: str, call_id: str, value: Any) -> list[Message]:
    if name in COMBINED:
        return [invocation(name, call_id, value)]
    return [call(name, call_id), result(name, call_id, value)]


def tool_call_of(name: str, call_id: str) -> list[Message]:
    if name in COMBINED:
        return [invocation(name, call_id)]
    return [call(name, call_id)]


@pytest.mark.parametrize("name", NAMES)
def test_a_call_without_a_result_stays_in_full(name: FormatName) -> None:
    messages = answered(name, "c1", "one\n" * 50) + tool_call_of(name, "c2")
    found = formats.scan(messages, formats.get(name))
    assert [(p.key, p.complete) for p in found.pairs] == [("c1", True), ("c2", False)]
    replaced, filled = round_trip(messages, name)
    assert json.dumps(replaced[-1]) == json.dumps(messages[-1])
    assert "toolRef" in json.dumps(replaced[:-1])
    assert json.dumps(filled) == json.dumps(messages)
    with pytest.raises(ValueError, match="c2"):
        found.pairs[1].invocation()


@pytest.mark.parametrize("name", SPLIT)
def test_a_result_without_a_call_stays_in_full(name: FormatName) -> None:
    messages = [result(name, "gone", "orphan\n" * 50), *answered(name, "c1", "one\n" * 50)]
    found = formats.scan(messages, formats.get(name))
    orphan = found.pairs[0]
    assert (orphan.key, orphan.call, orphan.complete) == ("gone", None, False)
    replaced, filled = round_trip(messages, name)
    assert replaced[0] == messages[0]
    assert json.dumps(replaced[1:]).count('"toolRef"') == 2
    assert json.dumps(filled) == json.dumps(messages)


def test_an_anthropic_tool_result_without_content_stays_as_it_is() -> None:
    messages = [
        call("anthropic", "t1"),
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
    ]
    found = formats.scan(messages, formats.get("anthropic"))
    # It answers its call (the call is not pending), but there is no payload to replace.
    [pair] = found.pairs
    assert pair.key == "t1"
    assert pair.result is not None
    assert pair.result.bare
    assert not pair.complete
    replaced, _ = round_trip(messages, "anthropic")
    assert replaced == messages


ERROR_RESULTS = [
    (
        "anthropic",
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "c1",
                    "is_error": True,
                    "content": "No such file",
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        },
        True,
    ),
    (
        "anthropic",
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "ok", "is_error": False}
            ],
        },
        False,
    ),
    ("anthropic", result("anthropic", "c1", "ok"), False),
]


@pytest.mark.parametrize(("name", "outcome", "is_error"), ERROR_RESULTS)
def test_anthropic_is_error_makes_an_error_invocation(
    name: FormatName, outcome: Message, is_error: bool
) -> None:
    messages = [call(name, "c1"), outcome]
    [pair] = formats.scan(messages, formats.get(name)).complete
    assert pair.invocation()["isError"] is is_error
    replaced, filled = round_trip(messages, name)
    block = replaced[1]["content"][0]
    assert "content" not in block
    assert block.get("is_error", False) is is_error  # the marker still says it failed
    assert json.dumps(filled) == json.dumps(messages)


@pytest.mark.parametrize(
    ("state", "outcome", "is_error"),
    [("output-error", "errorText", True), ("output-available", "output", False)],
)
def test_ai_sdk_v5_output_error_makes_an_error_invocation(
    state: str, outcome: str, is_error: bool
) -> None:
    part = {
        "type": "tool-bash",
        "toolCallId": "c1",
        "state": state,
        "input": {"command": "cat missing"},
        outcome: "cat: missing: No such file or directory",
    }
    messages = [{"id": "m1", "role": "assistant", "parts": [part]}]
    [pair] = formats.scan(messages, formats.get("ai-sdk-v5")).complete
    assert pair.invocation() == {
        "name": "bash",
        "args": {"command": "cat missing"},
        "result": "cat: missing: No such file or directory",
        "isError": is_error,
    }
    replaced, filled = round_trip(messages, "ai-sdk-v5")
    ref = ref_of(pair.invocation())
    assert replaced[0]["parts"][0] == {
        "type": "tool-bash",
        "toolCallId": "c1",
        "state": state,
        "toolRef": ref,
    }
    assert json.dumps(filled) == json.dumps(messages)


@pytest.mark.parametrize("name", ["openai-chat", "openai-responses", "gemini", "ai-sdk-v4"])
def test_formats_without_an_error_flag_make_plain_invocations(name: FormatName) -> None:
    [pair] = formats.scan(answered(name, "c1", "x"), formats.get(name)).complete
    assert pair.invocation()["isError"] is False


# --- exact markers: unknown members kept, member order kept -------------------------------

Expected = Callable[[list[str]], list[Message]]

MARKER_CASES: list[tuple[str, list[Message], Expected]] = [
    (
        "openai-chat",
        [
            {
                "role": "user",
                "content": [{"type": "text", "text": "read", "cache_control": {"type": "x"}}],
                "extra": {"turn": 1},
            },
            {
                "content": None,
                "role": "assistant",
                "extra": {"cost": 0.01},
                "tool_calls": [
                    {
                        "index": 0,
                        "function": {
                            "arguments": '{"path":"a.py"}',
                            "provider_specific_fields": {"x": 1},
                            "name": "read_file",
                        },
                        "id": "c1",
                        "type": "function",
                    }
                ],
            },
            {
                "name": "read_file",
                "role": "tool",
                "content": "print(1)\n",
                "extra": None,
                "tool_call_id": "c1",
            },
        ],
        lambda r: [
            {
                "role": "user",
                "content": [{"type": "text", "text": "read", "cache_control": {"type": "x"}}],
                "extra": {"turn": 1},
            },
            {
                "content": None,
                "role": "assistant",
                "extra": {"cost": 0.01},
                "tool_calls": [
                    {
                        "index": 0,
                        "function": {
                            "toolRef": r[0],
                            "provider_specific_fields": {"x": 1},
                            "name": "read_file",
                        },
                        "id": "c1",
                        "type": "function",
                    }
                ],
            },
            {
                "name": "read_file",
                "role": "tool",
                "toolRef": r[0],
                "extra": None,
                "tool_call_id": "c1",
            },
        ],
    ),
    (
        "openai-responses",
        [
            {"role": "user", "content": "list the files, then patch"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
            {
                "arguments": '{"command":["ls"]}',
                "call_id": "call_1",
                "type": "function_call",
                "id": "fc_1",
                "name": "shell",
                "extra": 1,
            },
            {
                "type": "custom_tool_call",
                "call_id": "call_2",
                "name": "patch",
                "input": "*** Begin",
            },
            {"output": "a.py\n", "type": "function_call_output", "call_id": "call_1", "x": {}},
            {"type": "custom_tool_call_output", "output": [{"type": "input_text", "text": "ok"}]}
            | {"call_id": "call_2"},
        ],
        lambda r: [
            {"role": "user", "content": "list the files, then patch"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
            {
                "toolRef": r[0],
                "call_id": "call_1",
                "type": "function_call",
                "id": "fc_1",
                "name": "shell",
                "extra": 1,
            },
            {"type": "custom_tool_call", "call_id": "call_2", "name": "patch", "toolRef": r[1]},
            {"toolRef": r[0], "type": "function_call_output", "call_id": "call_1", "x": {}},
            {"type": "custom_tool_call_output", "toolRef": r[1], "call_id": "call_2"},
        ],
    ),
    (
        "anthropic",
        [
            {"role": "user", "content": "fix it"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "c2ln"},
                    {"input": {"file_path": "a.py"}, "type": "tool_use", "name": "Read"}
                    | {"cache_control": {"type": "ephemeral"}, "id": "t1"},
                    {"type": "mcp_tool_use", "id": "t2", "name": "ls", "server_name": "fs"}
                    | {"input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"tool_use_id": "t2", "type": "mcp_tool_result", "is_error": True}
                    | {"content": [{"type": "text", "text": "denied"}]},
                    {"type": "tool_result", "content": "print(1)\n", "tool_use_id": "t1"},
                    {"type": "text", "text": "go on"},
                ],
                "extra": [],
            },
        ],
        lambda r: [
            {"role": "user", "content": "fix it"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "c2ln"},
                    {"toolRef": r[0], "type": "tool_use", "name": "Read"}
                    | {"cache_control": {"type": "ephemeral"}, "id": "t1"},
                    {"type": "mcp_tool_use", "id": "t2", "name": "ls", "server_name": "fs"}
                    | {"toolRef": r[1]},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"tool_use_id": "t2", "type": "mcp_tool_result", "is_error": True}
                    | {"toolRef": r[1]},
                    {"type": "tool_result", "toolRef": r[0], "tool_use_id": "t1"},
                    {"type": "text", "text": "go on"},
                ],
                "extra": [],
            },
        ],
    ),
    (
        "ai-sdk-v4",
        [
            {
                "id": "m2",
                "role": "assistant",
                "content": "",
                "toolInvocations": [
                    # args then result: no order needed
                    {"state": "result", "step": 0, "toolCallId": "c1", "toolName": "w"}
                    | {"args": {"city": "Oslo"}, "result": {"celsius": 3}},
                    # result first
                    {"result": {"celsius": 21}, "state": "result", "args": {"city": "Rome"}}
                    | {"toolCallId": "c2", "toolName": "w"},
                    # args and result apart
                    {"toolCallId": "c3", "args": {"city": "Lima"}, "toolName": "w", "extra": 1}
                    | {"result": {"celsius": 18}, "state": "result"},
                ],
                "parts": [
                    {"type": "step-start"},
                    {"toolInvocation": {"toolName": "w", "state": "call", "args": {}}, "x": 0}
                    | {"type": "tool-invocation"},
                ],
            }
        ],
        lambda r: [
            {
                "id": "m2",
                "role": "assistant",
                "content": "",
                "toolInvocations": [
                    {"state": "result", "step": 0, "toolCallId": "c1", "toolName": "w"}
                    | {"toolRef": r[0]},
                    {"toolRef": r[1], "state": "result", "toolCallId": "c2", "toolName": "w"}
                    | {"toolRefOrder": ["result", "state", "args", "toolCallId", "toolName"]},
                    {"toolCallId": "c3", "toolRef": r[2], "toolName": "w", "extra": 1}
                    | {"state": "result"}
                    | {
                        "toolRefOrder": [
                            "toolCallId",
                            "args",
                            "toolName",
                            "extra",
                            "result",
                            "state",
                        ]
                    },
                ],
                "parts": [
                    {"type": "step-start"},
                    {"toolInvocation": {"toolName": "w", "state": "call", "args": {}}, "x": 0}
                    | {"type": "tool-invocation"},
                ],
            }
        ],
    ),
    (
        "ai-sdk-v5",
        [
            {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "weather?"}]},
            {
                "metadata": {"model": "x"},
                "id": "m2",
                "role": "assistant",
                "parts": [
                    {"type": "step-start"},
                    {"output": {"celsius": 3}, "type": "tool-w", "toolCallId": "c1"}
                    | {"input": {"city": "Oslo"}, "state": "output-available"},
                    {"type": "dynamic-tool", "toolName": "w", "input": {"city": "Rome"}}
                    | {"callProviderMetadata": {"a": {}}, "state": "output-error"}
                    | {"errorText": "timeout", "toolCallId": "c2"},
                    {"type": "tool-w", "toolCallId": "c3", "state": "input-available"}
                    | {"input": {"city": "Lima"}, "providerExecuted": False},
                ],
            },
        ],
        lambda r: [
            {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "weather?"}]},
            {
                "metadata": {"model": "x"},
                "id": "m2",
                "role": "assistant",
                "parts": [
                    {"type": "step-start"},
                    {"toolRef": r[0], "type": "tool-w", "toolCallId": "c1"}
                    | {"state": "output-available"}
                    | {"toolRefOrder": ["output", "type", "toolCallId", "input", "state"]},
                    {"type": "dynamic-tool", "toolName": "w", "toolRef": r[1]}
                    | {"callProviderMetadata": {"a": {}}, "state": "output-error"}
                    | {"toolCallId": "c2"}
                    | {
                        "toolRefOrder": [
                            "type",
                            "toolName",
                            "input",
                            "callProviderMetadata",
                            "state",
                            "errorText",
                            "toolCallId",
                        ]
                    },
                    {"type": "tool-w", "toolCallId": "c3", "state": "input-available"}
                    | {"input": {"city": "Lima"}, "providerExecuted": False},
                ],
            },
        ],
    ),
    (
        "gemini",
        [
            {"role": "user", "parts": [{"text": "weather in Oslo and Rome?"}]},
            {
                "role": "model",
                "parts": [
                    {"text": "Let me look.", "thought": True},
                    {
                        "thoughtSignature": "c2ln",
                        "functionCall": {"args": {"c": "Oslo"}, "name": "w"},
                    },
                    {"function_call": {"name": "w", "args": {"c": "Rome"}, "id": "g2"}},
                ],
            },
            {
                "role": "function",
                "parts": [
                    {"function_response": {"id": "g2", "name": "w", "response": {"t": 21}}},
                    {"functionResponse": {"response": {"t": 3}, "name": "w", "extra": 1}},
                ],
            },
        ],
        lambda r: [
            {"role": "user", "parts": [{"text": "weather in Oslo and Rome?"}]},
            {
                "role": "model",
                "parts": [
                    {"text": "Let me look.", "thought": True},
                    {"thoughtSignature": "c2ln", "functionCall": {"toolRef": r[0], "name": "w"}},
                    {"function_call": {"name": "w", "toolRef": r[1], "id": "g2"}},
                ],
            },
            {
                "role": "function",
                "parts": [
                    {"function_response": {"id": "g2", "name": "w", "toolRef": r[1]}},
                    {"functionResponse": {"toolRef": r[0], "name": "w", "extra": 1}},
                ],
            },
        ],
    ),
]


@pytest.mark.parametrize(
    ("name", "messages", "expected"), MARKER_CASES, ids=[c[0] for c in MARKER_CASES]
)
def test_markers_keep_every_other_member_in_its_place(
    name: str, messages: list[Message], expected: Expected
) -> None:
    assert formats.detect(messages).name == name
    found = formats.scan(messages, formats.get(name))
    refs = [ref_of(pair.invocation()) for pair in found.complete]
    replaced, filled = round_trip(messages, name)
    assert json.dumps(replaced) == json.dumps(expected(refs))
    assert json.dumps(filled) == json.dumps(messages)


def v4_marked(extra: dict[str, Any]) -> tuple[list[Message], list[Message], dict[str, Any]]:
    """A v4 invocation whose marker lists its order, the marker with `extra` members, and
    the invocations to fill it from."""
    item = {"result": {"celsius": 21}, "toolCallId": "c1", "args": {"city": "Rome"}}
    messages: list[Message] = [
        {"role": "assistant", "content": "", "toolInvocations": [item | {"state": "result"}]}
    ]
    messages[0]["toolInvocations"][0]["toolName"] = "w"
    found = formats.scan(messages, formats.get("ai-sdk-v4"))
    replaced = formats.replace(messages, found, real_refs(found))
    assert "toolRefOrder" in replaced[0]["toolInvocations"][0]
    replaced[0]["toolInvocations"][0] |= extra
    return messages, replaced, held(found)[0]


def test_a_member_added_to_a_marker_is_kept_by_fill() -> None:
    messages, replaced, invocations = v4_marked({"step": 2})
    filled = formats.fill(replaced, formats.scan(replaced, formats.get("ai-sdk-v4")), invocations)
    assert filled[0]["toolInvocations"][0] == messages[0]["toolInvocations"][0] | {"step": 2}
    assert list(filled[0]["toolInvocations"][0])[:5] == list(messages[0]["toolInvocations"][0])


@pytest.mark.parametrize(
    "order", [["toolCallId"], [], ["nonsense", "args"]], ids=["too-short", "empty", "unknown"]
)
def test_fill_restores_every_member_whatever_the_order_member_lists(order: Any) -> None:
    messages, replaced, invocations = v4_marked({"toolRefOrder": order})
    filled = formats.fill(replaced, formats.scan(replaced, formats.get("ai-sdk-v4")), invocations)
    assert filled == messages


@pytest.mark.parametrize(
    "order",
    [[{}], [["args"]], [None, 1], "result,args", None, ["result", "state", "result"]],
    ids=["object", "list", "scalars", "string", "null", "repeated"],
)
def test_an_order_member_that_is_not_a_list_of_names_is_refused(order: Any) -> None:
    """A repeated name (found in review) filled that member twice into the text."""
    _, replaced, _ = v4_marked({"toolRefOrder": order})
    with pytest.raises(ValidationError, match="toolRefOrder"):
        formats.scan(replaced, formats.get("ai-sdk-v4"))


class Compared(str):
    """A member name that counts how often it is compared for equality (in `seen`)."""

    seen: ClassVar[list[int]] = [0]

    def __eq__(self, other: object) -> bool:
        Compared.seen[0] += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_a_long_order_member_is_read_in_linear_time() -> None:
    """Found in review: each member of a marker was looked up in its `toolRefOrder` list
    (a list's `in`): members x names comparisons, 1.2 s for 20,000 of each, minutes for a
    few MB of body. The names are looked up in a set now."""
    names = [f"m{i}" for i in range(2000)]
    marker = {"toolRef": "tr_" + "a" * 26, **dict.fromkeys(names, 1)}
    Compared.seen[0] = 0
    restored = site_module.from_marker(
        marker | {"toolRefOrder": [Compared(n) for n in reversed(names)]}, {"args": 2}
    )
    assert list(restored) == [*reversed(names), "args"]
    assert Compared.seen[0] < 10 * len(names)
    # The text path reads its order from the text (plain strings, no count to take): the
    # same set, checked here for what it fills.
    text = json.dumps({"toolRef": "tr_" + "a" * 26, **dict.fromkeys(names, 1)})
    text = text[:-1] + ', "toolRefOrder": ' + json.dumps(names[::-1]) + "}"
    filled = json.loads(site_module.from_marker_text(text, 0, {"args": "2"}))
    assert list(filled) == [*reversed(names), "args"]


def test_rewrite_reads_a_list_of_usable_refs_once() -> None:
    """Found in review: `rewrite` asked `ref in usable` once per invocation, and a list (or
    `refs.values()`) answers that by reading itself through: invocations x refs comparisons,
    10 s for 32,000 of each. A collection that is not a set is read once into one now."""
    chat = formats.get("openai-chat")
    messages = [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": f"{i}"}}
                for i in range(300)
            ],
        },
        *({"role": "tool", "tool_call_id": f"c{i}", "content": "x"} for i in range(300)),
    ]
    refs = list(rewrite(messages, chat, set()).refs.values())
    held = refs[::2]
    wanted = rewrite(messages, chat, set(held))
    assert len(wanted.used) == 150
    Compared.seen[0] = 0
    assert rewrite(messages, chat, [Compared(r) for r in reversed(held)]) == wanted
    assert Compared.seen[0] < 10 * len(refs)
    assert rewrite(messages, chat, tuple(held)) == wanted
    assert rewrite(messages, chat, dict(enumerate(held)).values()) == wanted
    with pytest.raises(TypeError, match=r"not of dict: usable=set\(refs\)"):
        rewrite(messages, chat, [held[0], {"ref": held[1]}])  # type: ignore[list-item]


# --- pairing ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_an_id_used_again_pairs_with_the_later_call(name: FormatName) -> None:
    messages = answered(name, "c1", "first\n") + answered(name, "c1", "second\n")
    found = formats.scan(messages, formats.get(name))
    assert [(p.key, p.invocation()["result"]) for p in found.complete] == [
        ("c1", "first\n"),
        ("c1#2", "second\n"),
    ]
    replaced, filled = round_trip(messages, name)
    again = formats.scan(replaced, formats.get(name))
    assert [p.key for p in again.marked] == ["c1", "c1#2"]
    assert len(set(again.refs)) == 2
    assert json.dumps(filled) == json.dumps(messages)


@pytest.mark.parametrize("name", NAMES)
def test_keys_stay_unique_when_an_id_looks_like_a_repeat(name: FormatName) -> None:
    messages = (
        answered(name, "c1", "one\n")
        + answered(name, "c1", "two\n")
        + answered(name, "c1#2", "three\n")
    )
    found = formats.scan(messages, formats.get(name))
    assert [p.key for p in found.complete] == ["c1", "c1#2", "c1#2#2"]
    replaced, filled = round_trip(messages, name)
    assert len(formats.scan(replaced, formats.get(name)).refs) == 3
    assert json.dumps(filled) == json.dumps(messages)


def wire_args(name: str, args: Any) -> Any:
    """Arguments as the format carries them: OpenAI keeps a JSON string."""
    return json.dumps(args) if name.startswith("openai") else args


@pytest.mark.parametrize("name", SPLIT)
def test_results_pair_by_id_in_any_order(name: FormatName) -> None:
    messages = [
        call(name, "a", {"n": 1}),
        call(name, "b", {"n": 2}),
        result(name, "b", "for b"),
        result(name, "a", "for a"),
    ]
    found = formats.scan(messages, formats.get(name))
    assert [(p.key, p.invocation()["args"], p.invocation()["result"]) for p in found.pairs] == [
        ("a", wire_args(name, {"n": 1}), "for a"),
        ("b", wire_args(name, {"n": 2}), "for b"),
    ]
    assert [(p.call and p.call.message, p.result and p.result.message) for p in found.pairs] == [
        (0, 3),
        (1, 2),
    ]


@pytest.mark.parametrize("name", SPLIT)
def test_a_second_result_for_an_answered_call_travels_as_it_is(name: FormatName) -> None:
    # Some clients repeat a result; the app alone would take it, so the rewriting must too.
    messages = [*answered(name, "c1", "once"), result(name, "c1", "twice")]
    fmt = formats.get(name)
    found = formats.scan(messages, fmt)
    [pair] = found.complete
    assert pair.invocation()["result"] == "once"
    second = found.pairs[-1]
    assert second.call is None
    assert second.result is not None
    assert not second.complete
    refs = {pair.key: "tr_" + "a" * 26}
    replaced = formats.replace(messages, found, refs)
    assert replaced[-1] == messages[-1]  # the repeated result is sent in full
    again = formats.scan(replaced, fmt)
    assert formats.fill(replaced, again, {refs[pair.key]: pair.invocation()}) == messages


def test_an_object_with_its_own_order_member_is_never_replaced() -> None:
    invocation = {
        "state": "result",
        "toolCallId": "c1",
        "toolName": "t",
        "args": {"a": 1},
        "result": "r",
        "toolRefOrder": "the app's own member",
    }
    messages = [{"role": "assistant", "content": "", "toolInvocations": [invocation]}]
    found = formats.scan(messages, formats.get("ai-sdk-v4"))
    assert not found.complete
    assert formats.replace(messages, found, {"c1": "tr_" + "a" * 26}) == messages


def test_gemini_without_ids_pairs_by_name_oldest_first() -> None:
    messages = [
        call("gemini", None, {"n": 1}, tool="a"),
        call("gemini", None, {"n": 2}, tool="b"),
        call("gemini", None, {"n": 3}, tool="a"),
        result("gemini", None, "b1", tool="b"),
        result("gemini", None, "a1", tool="a"),
        result("gemini", "x9", "a2", tool="a"),  # an id the calls lack: paired by name too
        result("gemini", None, "a3", tool="a"),  # no call left: an orphan
    ]
    found = formats.scan(messages, formats.get("gemini"))
    summary = [(p.key, p.invocation()["args"], p.invocation()["result"]) for p in found.complete]
    assert summary == [
        ("a@0.parts.0.functionCall", {"n": 1}, "a1"),
        ("b@1.parts.0.functionCall", {"n": 2}, "b1"),
        ("a@2.parts.0.functionCall", {"n": 3}, "a2"),
    ]
    [orphan] = [p for p in found.pairs if not p.complete]
    assert (orphan.key, orphan.call, orphan.result_obj) == (
        "a@6.parts.0.functionResponse",
        None,
        messages[6]["parts"][0]["functionResponse"],
    )
    replaced, filled = round_trip(messages, "gemini")
    assert replaced[6] == messages[6]
    assert json.dumps(filled) == json.dumps(messages)


def test_gemini_with_ids_pairs_by_id() -> None:
    messages = [
        {"role": "model", "parts": [{"functionCall": {"id": "1", "name": "a", "args": {}}}]},
        call("gemini", "2", {"n": 2}, tool="a"),
        result("gemini", "2", "for 2", tool="a"),
        result("gemini", "1", "for 1", tool="a"),
    ]
    found = formats.scan(messages, formats.get("gemini"))
    assert [(p.key, p.invocation()["result"]) for p in found.complete] == [
        ("1", "for 1"),
        ("2", "for 2"),
    ]


# --- detection ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_a_lone_call_is_enough_to_detect_the_format(name: str) -> None:
    assert formats.detect(tool_call_of(name, "c1")).name == name
    if name in SPLIT:
        assert formats.detect([result(name, "c1", "x")]).name == name


@pytest.mark.parametrize(("first", "second"), [(a, b) for a in NAMES for b in NAMES if a != b])
def test_mixed_formats_are_refused_naming_the_first_foreign_message(
    first: str, second: str
) -> None:
    one, two = full_example(first), full_example(second)
    with pytest.raises(ValidationError) as info:
        formats.detect(one + two)
    assert info.value.extra["message"] == len(one)
    assert f"message {len(one)} does not fit the format of the messages before it" in str(
        info.value.detail
    )
    assert f"it looks like {second}" in info.value.detail


@pytest.mark.parametrize(("named", "actual"), [(a, b) for a in NAMES for b in NAMES if a != b])
def test_a_named_format_that_does_not_fit_is_refused(named: FormatName, actual: FormatName) -> None:
    with pytest.raises(ValidationError) as info:
        formats.detect(full_example(actual), named)
    assert info.value.extra["message"] == 0
    assert info.value.detail.startswith(f"message 0 is not {named}; it looks like {actual}")
    assert formats.detect(full_example(actual), actual).name == actual


def test_a_named_format_is_refused_at_the_message_that_breaks_it() -> None:
    messages = [{"role": "user", "content": "hi"}, *full_example("anthropic")]
    with pytest.raises(ValidationError) as info:
        formats.detect(messages, "openai-chat")
    assert info.value.extra["message"] == 1


def test_an_unknown_format_name_is_refused_listing_the_formats() -> None:
    with pytest.raises(ValidationError) as info:
        formats.detect(full_example("anthropic"), "claude")  # type: ignore[arg-type]
    assert info.value.extra["formats"] == list(formats.NAMES)
    assert sorted(formats.NAMES) == sorted(NAMES)
    assert "'claude'" in info.value.detail


def test_plain_text_fits_several_formats_and_takes_the_first() -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert formats.detect(messages).name == formats.NAMES[0] == "openai-chat"
    assert formats.detect(messages, "anthropic").name == "anthropic"


@pytest.mark.parametrize("value", [{"messages": []}, "[]", None, ({"role": "user"},), 3])
def test_check_messages_wants_a_list(value: Any) -> None:
    with pytest.raises(ValidationError) as info:
        formats.check_messages(value)
    assert type(value).__name__ in info.value.detail


@pytest.mark.parametrize("bad", ["hi", None, ["role", "user"], 1.5])
def test_check_messages_wants_objects_and_names_the_first_other(bad: Any) -> None:
    messages = [{"role": "user", "content": "hi"}, bad, "also bad"]
    with pytest.raises(ValidationError) as info:
        formats.check_messages(messages)
    assert info.value.extra["message"] == 1
    assert f"message 1 is a {type(bad).__name__}" in info.value.detail
    fine = [{"role": "user"}]
    assert formats.check_messages(fine) is fine


# --- real conversations -------------------------------------------------------------------


def trace_conversations() -> list[tuple[str, list[Any]]]:
    if not TRACES.is_dir():
        need(f"the shared traces are not at {TRACES}")
    found = []
    for path in sorted(TRACES.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        for n, conversation in enumerate(data.get("conversations", [data])):
            found.append((f"{path.name}[{n}]", conversation["messages"]))
    return found


def test_every_shared_trace_round_trips_byte_for_byte() -> None:
    conversations = trace_conversations()
    assert len(conversations) >= 7
    for label, messages in conversations:
        expected = "anthropic" if ".anthropic." in label else "openai-chat"
        original = json.dumps(messages)
        fmt = formats.detect(messages)
        assert fmt.name == expected, label
        found = formats.scan(messages, fmt)
        assert len(found.complete) >= 20, label
        replaced, filled = round_trip(messages, fmt.name)
        again = formats.scan(replaced, fmt)
        assert len(again.marked) == len(found.complete), label
        assert [p.key for p in again.pairs] == [p.key for p in found.pairs], label
        payload = sum(
            len(json.dumps(i["args"])) + len(json.dumps(i["result"])) for i in invocations_of(found)
        )
        saved = len(original) - len(json.dumps(replaced))
        assert saved >= payload - 64 * 2 * len(found.complete) > 0, label
        assert filled == messages, label
        assert json.dumps(filled) == original, label
        assert json.dumps(filled, ensure_ascii=False) == json.dumps(messages, ensure_ascii=False)
        assert json.dumps(messages) == original, label


def test_chat_custom_tool_calls_are_replaced_inside_custom() -> None:
    messages: list[Any] = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "custom",
                    "custom": {"name": "apply_patch", "input": "*** Begin"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "applied"},
    ]
    fmt = formats.get("openai-chat")
    found = formats.scan(messages, fmt)
    [pair] = found.complete
    assert pair.invocation() == {
        "name": "apply_patch",
        "args": "*** Begin",
        "result": "applied",
        "isError": False,
    }
    ref = str(digest_of(pair.invocation()).ref)
    replaced = formats.replace(messages, found, {pair.key: ref})
    assert replaced[0]["tool_calls"][0]["custom"] == {"name": "apply_patch", "toolRef": ref}
    filled = formats.fill(replaced, formats.scan(replaced, fmt), {ref: pair.invocation()})
    assert filled == messages


@pytest.mark.parametrize("value", [[], {}, ["user"], {"a": 1}, 3, None])
@pytest.mark.parametrize("member", ["role", "type"])
def test_any_json_in_role_or_type_is_judged_not_crashed(member: str, value: Any) -> None:
    message = {member: value, "content": [{"type": value, "text": "x"}], "parts": [{"type": value}]}
    for fmt in formats.FORMATS.values():
        assert fmt.claim(message) in (0, 1, 2)
        list(fmt.sites([message]))
    with pytest.raises(ValidationError):
        formats.detect([message, {"role": "model", "parts": [{"text": "x"}]}, {"role": "tool"}])


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=8)
    | st.sampled_from(
        [
            "user",
            "assistant",
            "tool",
            "model",
            "tool_use",
            "tool_result",
            "text",
            "function_call",
            "tool-x",
            "dynamic-tool",
            "toolRef",
            "content",
            "parts",
        ]
    ),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "role",
                    "type",
                    "content",
                    "parts",
                    "tool_calls",
                    "function",
                    "id",
                    "tool_use_id",
                    "input",
                    "arguments",
                    "toolRef",
                    "call_id",
                    "output",
                    "toolInvocations",
                    "state",
                    "args",
                    "result",
                    "functionCall",
                    "name",
                ]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=25,
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(
                [
                    "role",
                    "type",
                    "content",
                    "parts",
                    "tool_calls",
                    "toolInvocations",
                    "tool_call_id",
                    "toolRef",
                ]
            ),
            _json_values,
            max_size=4,
        ),
        max_size=4,
    )
)
def test_arbitrary_messages_are_judged_never_crash(messages: list[Any]) -> None:
    from toolref.wire.errors import ToolrefError

    try:
        fmt = formats.detect(messages)
        found = formats.scan(messages, fmt)
        refs = {p.key: "tr_" + "a" * 26 for p in found.complete}
        formats.replace(messages, found, refs)
    except ToolrefError:
        pass


def test_text_fill_in_place_and_by_walking_agree_with_value_fill() -> None:
    """`source.fill` replaces markers in place when their refs tell them apart, and walks
    the message otherwise (a ref on two markers, a marker with its own member order, a
    `toolRef` member inside data): every way, the same values as `formats.fill`."""
    from toolref.formats import source
    from toolref.formats.source import Payload

    ref, other = "tr_" + "a" * 26, "tr_" + "b" * 26
    fake = {"toolRef": other}  # data that looks like a marker, in a result sent in full
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "toolRef": ref}},
                {"id": "c2", "type": "function", "function": {"name": "f", "toolRef": ref}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "toolRef": ref},
        {
            "tool_call_id": "c2",
            "toolRefOrder": ["toolRef", "tool_call_id", "role"],
            "toolRef": ref,
            "role": "tool",
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c3", "type": "function", "function": {"name": "g", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c3", "content": [fake]},
    ]
    fmt = formats.get("openai-chat")
    found = formats.scan(messages, fmt)
    payload = Payload('"{\\"x\\": 1.0}"', '"out"')
    texts = [json.dumps(m) for m in messages]
    filled = [json.loads(t) for t in source.fill(texts, found, {ref: payload})]
    invocation = {"name": "f", "args": '{"x": 1.0}', "result": "out", "isError": False}
    assert filled == formats.fill(messages, found, {ref: invocation})
    assert filled[5]["content"] == [fake]  # the data kept as it was


def test_the_fast_fill_path_steps_aside_only_for_escapes_that_could_spell_a_marker() -> None:
    """Found in review: the fast path could fill a look-alike when the marker's key was
    written escaped. It now leaves to the walk any message with an escape of an ASCII
    letter, digit or underscore (which no JSON writer makes on its own), and keeps the
    escapes writers do make (non-ASCII, HTML-safe `<>&`, quotes) on the fast path."""
    from toolref.formats import source

    ref = "tr_" + "a" * 26
    wanted = {ref: {"content": '"out"'}}
    for kept in ("caf\\u00e9", "\\u003cb\\u003e \\u0026", '\\"q\\"', "\\n\\t\\\\"):
        text = '{"role":"tool","note":"' + kept + '","toolRef":"' + ref + '"}'
        filled = source._filled_in_place(text, wanted)
        assert filled == '{"role":"tool","note":"' + kept + '","content":"out"}', kept
    for unsure in ("tool\\u0052ef", "\\u0074oolRef", "tr\\u005f", "\\u0041", "\\u0039"):
        text = '{"role":"tool","note":"' + unsure + '","toolRef":"' + ref + '"}'
        assert source._filled_in_place(text, wanted) is None, unsure


def test_a_responses_local_shell_call_pairs_with_its_output() -> None:
    """Found in review: `local_shell_call` (Codex CLI's local shell) was no call and
    `local_shell_call_output` no result, so neither was ever made a ref. The call's `action`
    is its arguments, named `local_shell`; its output pairs by `call_id` (or, as OpenAI's
    SDK writes it, by `id`, the call's id); replace and fill give back the same messages."""
    action = {"type": "exec", "command": ["ls"], "env": {}}
    messages: list[Any] = [{"role": "user", "content": "go"}]
    for n, output in enumerate(({"call_id": "c0"}, {"id": "c1"})):
        messages += [
            {"type": "local_shell_call", "id": f"lsh_{n}", "call_id": f"c{n}", "action": action},
            {"type": "local_shell_call_output", **output, "output": f"out {n}"},
        ]
    found = formats.scan(messages, formats.detect(messages))
    assert [p.invocation() for p in found.complete] == [
        {"name": "local_shell", "args": action, "result": f"out {n}", "isError": False}
        for n in range(2)
    ]
    replaced, filled = round_trip(messages, "openai-responses")
    assert "action" not in replaced[1]
    assert "output" not in replaced[2]
    assert json.dumps(filled) == json.dumps(messages)


def _text_round_trip(messages: list[Any]) -> list[str]:
    """The messages' texts replaced (every complete invocation) and filled back, as the
    registry does it (`source.replace`, `source.fill`)."""
    from toolref.formats import source

    fmt = formats.get("openai-responses")
    texts = [json.dumps(m, separators=(",", ":")) for m in messages]
    found = formats.scan(messages, fmt)
    refs = real_refs(found)
    replaced, payloads = source.replace(texts, found, refs)
    marked = formats.scan([json.loads(t) for t in replaced], fmt)
    by_ref = {refs[key]: payload for key, payload in payloads.items()}
    return source.fill(replaced, marked, by_ref)


def test_responses_shell_patch_and_computer_calls_pair_with_their_outputs() -> None:
    """Found in review: `shell_call`, `apply_patch_call` and `computer_call` were no calls
    and their outputs no results, so none was ever made a ref (a screenshot travelled in
    full every turn). Their arguments are `action` (tool `shell`), `operation` (tool
    `apply_patch`: a failed output is an error; one without `output` answers its call with
    nothing to replace) and `actions` or `action` (tool `computer`); the outputs keep their
    shapes (an array, an object) through replace and fill, value and text alike."""
    shell = {"commands": ["ls -la"], "timeout_ms": 1000, "max_output_length": 4096}
    chunks = [{"stdout": "a\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]
    patch = {"type": "update_file", "path": "a.py", "diff": "@@ -1 +1 @@\n-a\n+b\n"}
    shot = {"type": "computer_screenshot", "image_url": "data:image/png;base64,iVBOR"}
    click = {"type": "click", "button": "left", "x": 1, "y": 2}
    messages: list[Any] = [
        {"role": "user", "content": "go"},
        {"type": "shell_call", "call_id": "s1", "action": shell, "status": "completed"},
        {"type": "shell_call_output", "call_id": "s1", "output": chunks},
        {"type": "apply_patch_call", "call_id": "p1", "operation": patch, "status": "completed"},
        {"type": "apply_patch_call_output", "call_id": "p1", "status": "failed", "output": "no"},
        {"type": "apply_patch_call", "call_id": "p2", "operation": patch, "status": "completed"},
        {"type": "apply_patch_call_output", "call_id": "p2", "status": "completed"},
        {"type": "computer_call", "id": "cu1", "call_id": "k1", "actions": [click]},
        {"type": "computer_call_output", "call_id": "k1", "output": shot},
        {"type": "computer_call", "call_id": "k2", "action": None, "actions": [click]},
        {"type": "computer_call_output", "call_id": "k2", "output": shot},
        {"type": "computer_call", "call_id": "k3", "action": click, "actions": None},
        {"type": "computer_call_output", "call_id": "k3", "output": shot},
    ]
    found = formats.scan(messages, formats.detect(messages))
    by_key = {p.key: p for p in found.pairs}
    assert [p.invocation() for p in found.complete] == [
        {"name": "shell", "args": shell, "result": chunks, "isError": False},
        {"name": "apply_patch", "args": patch, "result": "no", "isError": True},
        {"name": "computer", "args": [click], "result": shot, "isError": False},
        {"name": "computer", "args": [click], "result": shot, "isError": False},
        {"name": "computer", "args": click, "result": shot, "isError": False},
    ]
    bare = by_key["p2"]  # answered (not pending), nothing to replace
    assert bare.result is not None
    assert bare.result.bare
    assert not bare.complete
    replaced, filled = round_trip(messages, "openai-responses")
    assert "output" not in replaced[2]
    assert "operation" not in replaced[3]
    assert [sorted(replaced[i]) for i in (7, 9, 11)] == [
        ["call_id", "id", "toolRef", "type"],
        ["action", "call_id", "toolRef", "type"],
        ["actions", "call_id", "toolRef", "type"],
    ]
    assert json.dumps(filled) == json.dumps(messages)
    compact = [json.dumps(m, separators=(",", ":")) for m in messages]
    assert _text_round_trip(messages) == compact


def test_a_responses_computer_call_with_only_action_is_no_call() -> None:
    """A `computer_call` holding only `action` (the preview tool's) would leave a marker
    naming neither `action` nor `actions`, which could be filled back as the other: it is
    read as no call, and it and its output travel as they are."""
    click = {"type": "click", "button": "left", "x": 1, "y": 2}
    shot = {"type": "computer_screenshot", "file_id": "file_1"}
    messages: list[Any] = [
        {"type": "computer_call", "call_id": "k1", "action": click},
        {"type": "computer_call_output", "call_id": "k1", "output": shot},
    ]
    found = formats.scan(messages, formats.get("openai-responses"))
    assert found.complete == []
    replaced, _ = round_trip(messages, "openai-responses")
    assert replaced == messages
