"""`toolref.handoff.switch` on a body's text: what the switch drops (the old backend's
reasoning items), and the bytes of what it keeps or only re-ids."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolref.handoff.switch import mapped_id, switched, switched_text
from toolref.wire.endpoints import endpoint
from toolref_server.gateway.gateway import switch_body

# Responses items as Codex writes them (codex-rs `ResponseItem`, serde: `id` skipped unless
# `store` is on against Azure, where `attach_item_ids` puts it back; `encrypted_content`
# written as null when not asked for), and as SDKs that keep `store=true` write them (the
# OpenAI Agents SDK: an `rs_` id and no `encrypted_content`).
_USER = '{"type":"message","role":"user","content":[{"type":"input_text","text":"list files"}]}'
_REASONING = {
    "codex, store=false": (
        '{"type":"reasoning","summary":[],"encrypted_content":"gAAAAB-OPAQUE-FROM-A"}'
    ),
    "codex, store=true (azure)": (
        '{"type":"reasoning","summary":[{"type":"summary_text","text":"**Listing**"}],'
        '"encrypted_content":null,"id":"rs_0a1b2c3d4e5f"}'
    ),
    "store=true, no encrypted_content": (
        '{"type":"reasoning","id":"rs_0a1b2c3d4e5f",'
        '"summary":[{"type":"summary_text","text":"**Listing**"}]}'
    ),
    "reasoning text of an open-weight backend": (
        '{"type":"reasoning","id":"rs_0a1b2c3d4e5f","summary":[],'
        '"content":[{"type":"reasoning_text","text":"ls it is"}]}'
    ),
}
_CALL = (
    '{"type":"function_call","name":"shell",'
    '"arguments":"{\\"command\\":[\\"ls\\"]}","call_id":"call_Q1"}'
)
_OUTPUT = '{"type":"function_call_output","call_id":"call_Q1","output":"caf\\u00e9.py\\n"}'
_ANSWER = (
    '{"type":"message","role":"assistant",'
    '"content":[{"type":"output_text","text":"One file: caf\\u00e9.py"}]}'
)
_NEXT = '{"type":"message","role":"user","content":[{"type":"input_text","text":"and now?"}]}'
_NEW_REASONING = '{"type":"reasoning","id":"rs_NEW","summary":[],"encrypted_content":"FROM-B"}'


def _body(items: list[str]) -> str:
    return '{"model":"gpt-5-codex","store":true,"input":[' + ",".join(items) + "]}"


@pytest.mark.parametrize("reasoning", list(_REASONING.values()), ids=list(_REASONING))
def test_every_reasoning_item_before_the_switch_is_dropped(reasoning: str) -> None:
    """A `store=true` reasoning item (an `rs_` id the old backend holds, no
    `encrypted_content`) was kept while the call after it lost its `id`: the new backend
    cannot resolve an `rs_` id it never issued, and OpenAI refuses a reasoning item without
    its required following item (400). The items around it keep their bytes."""
    items = [_USER, reasoning, _CALL, _OUTPUT, reasoning, _ANSWER, _NEXT]
    text = _body(items)
    out = switched_text(text, "openai-responses", "input", 6)
    assert out is not None
    kinds = [item.get("type") for item in json.loads(out)["input"]]
    assert "reasoning" not in kinds
    assert "rs_0a1b2c3d4e5f" not in out
    assert "OPAQUE-FROM-A" not in out
    for kept in (_CALL, _OUTPUT, _ANSWER, _NEXT):
        assert kept in out
    assert json.loads(out) == switched(json.loads(text), "openai-responses", "input", 6)


def test_reasoning_items_after_the_switch_are_the_new_backends_and_stay() -> None:
    text = _body([_USER, _REASONING["store=true, no encrypted_content"], _ANSWER, _NEXT])
    text = text[:-2] + "," + _NEW_REASONING + "," + _ANSWER + "]}"
    out = switched_text(text, "openai-responses", "input", 4)
    assert out is not None
    assert _NEW_REASONING in out
    assert "rs_0a1b2c3d4e5f" not in out


def test_a_function_call_with_its_item_id_loses_the_id_with_the_reasoning_before_it() -> None:
    """Codex against Azure with `store` on: the call's `fc_` id is the old backend's too."""
    call = _CALL[:-1] + ',"id":"fc_0a1b2c"}'
    reasoning = _REASONING["codex, store=true (azure)"]
    out = switched(
        json.loads(_body([_USER, reasoning, call, _OUTPUT])), "openai-responses", "input"
    )
    (found,) = [item for item in out["input"] if item.get("type") == "function_call"]
    assert "id" not in found
    assert found["call_id"] == "call_Q1"


def test_the_gateway_drops_a_stored_reasoning_item_before_the_switch() -> None:
    llm = endpoint("POST", "/v1/responses")
    assert llm is not None
    items = [_USER, _REASONING["store=true, no encrypted_content"], _CALL, _OUTPUT, _NEXT]
    out = switch_body(_body(items).encode(), llm, 4)
    assert b"rs_0a1b2c3d4e5f" not in out
    assert _OUTPUT.encode() in out


# A message whose only change is a remapped tool id keeps every other byte.

_ODD_CHAT = (
    '{"role":"tool", "tool_call_id" : "functions.read_file:0",'
    '"content":"caf\\u00e9 \\/ 1e-7","n":1e-7,"dup":1,"dup":2.50}'
)
_ODD_ANTHROPIC = (
    '{"role":"user","content":[{"type":"tool_result","tool_use_id":"functions.read_file:0",'
    '"content":[{"type":"text","text":"caf\\u00e9"}],"n":1E+2,"n":-0.0}]}'
)


@pytest.mark.parametrize(
    ("fmt", "call", "result"),
    [
        (
            "openai-chat",
            '{"role":"assistant","content":null,"tool_calls":[{"id":"functions.read_file:0",'
            '"type":"function","function":{"name":"read_file","arguments":"{\\"p\\":\\"\\u00e9\\"}"}}]}',
            _ODD_CHAT,
        ),
        (
            "anthropic",
            '{"role":"assistant","content":[{"type":"tool_use","id":"functions.read_file:0",'
            '"name":"Read","input":{"file_path":"/caf\\u00e9","limit":1.0e1}}]}',
            _ODD_ANTHROPIC,
        ),
    ],
)
def test_a_message_with_a_remapped_id_keeps_every_other_byte(
    fmt: Any, call: str, result: str
) -> None:
    """It was written again by `json` in full: `\\u00e9` became `é`, `1e-7` `1e-07`, `\\/`
    `/`, and a duplicate key was lost, though only the id changed."""
    text = '{"model":"m","messages":[{"role":"user","content":"go"},' + call + "," + result + "]}"
    out = switched_text(text, fmt, "messages", None)
    assert out is not None
    mapped = json.dumps(mapped_id("functions.read_file:0", fmt))
    for message in (call, result):
        assert message.replace('"functions.read_file:0"', mapped) in out
    assert json.loads(out) == switched(json.loads(text), fmt, "messages")


# Property: JSON spelled every way a sender may (escapes, number forms, spaces, duplicate
# keys) around the id; the rewrite changes the id's string and not one byte besides.

_SPACE = st.sampled_from(["", " ", "\n  ", "\t"])
_NUMBERS = st.sampled_from(["1e-7", "1E+2", "1.0", "-0.0", "0.10", "12", "-3", "2.5e0"])


@st.composite
def _string(draw: st.DrawFn, value: str | None = None) -> str:
    """`value` (or any text, with an escaped `/`) as a JSON string, each character spelled
    raw or escaped."""
    out = []
    if value is None:
        value = draw(st.text(max_size=8))
        out.append("\\/")
    for char in value:
        must = char in '"\\' or ord(char) < 0x20
        if must or (ord(char) <= 0xFFFF and draw(st.booleans())):
            out.append(draw(st.sampled_from([f"\\u{ord(char):04x}", f"\\u{ord(char):04X}"])))
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _joined(draw: st.DrawFn, parts: list[str], open_: str, close: str) -> str:
    inner = ",".join(draw(_SPACE) + part + draw(_SPACE) for part in parts)
    return open_ + inner + close


@st.composite
def _json(draw: st.DrawFn, depth: int = 2) -> str:
    """Any JSON value, oddly spelled; objects may repeat a key."""
    kinds = ["number", "string", "literal"] + (["array", "object"] if depth else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "number":
        return draw(_NUMBERS)
    if kind == "string":
        return draw(_string())
    if kind == "literal":
        return draw(st.sampled_from(["true", "false", "null"]))
    items = draw(st.lists(_json(depth - 1), max_size=3))
    if kind == "array":
        return _joined(draw, items, "[", "]")
    members = [
        f"{draw(_string(draw(st.sampled_from(['a', 'b', 'é']))))}{draw(_SPACE)}:{draw(_SPACE)}{v}"
        for v in items
    ]
    return _joined(draw, members, "{", "}")


_IDS = st.text(min_size=1, max_size=30).map(lambda s: f"functions.{s}:0")


@given(
    _IDS,
    st.data(),
    st.sampled_from(["openai-chat", "anthropic"]),
    st.none() | st.integers(0, 3),
)
def test_only_the_ids_string_changes_in_a_message_with_a_remapped_id(
    tool_id: str, data: st.DataObject, fmt: Any, at: int | None
) -> None:
    draw = data.draw
    spelled = draw(_string(tool_id))
    # Members around the id, a key possibly repeated (the last value is the one parsed).
    extras = [
        f'"x{draw(st.integers(0, 1))}":{draw(_json())}' for _ in range(draw(st.integers(0, 3)))
    ]
    if fmt == "openai-chat":
        before = (
            '{"role":"assistant","content":null,"tool_calls":[{"type":"function",'
            f'"function":{{"name":"f","arguments":{draw(_string())}}},"id":{draw(_SPACE)}'
        )
        after = "}]}"
        result_before = '{"role":"tool",' + "".join(e + "," for e in extras)
        result_before += '"tool_call_id":' + draw(_SPACE)
        result_after = f',"content":{draw(_string())}}}'
    else:
        before = '{"role":"assistant","content":[{"type":"tool_use","name":"f","id":'
        after = f',"input":{{"q":{draw(_json())}}}}}]}}'
        result_before = '{"role":"user","content":[{"type":"tool_result","tool_use_id":'
        result_after = f',"content":{draw(_string())}' + "".join("," + e for e in extras) + "}]}"
    call = before + spelled + after
    result = result_before + spelled + result_after
    text = '{"model":"m","messages":[{"role":"user","content":"go"},' + f"{call},{result}]}}"
    out = switched_text(text, fmt, "messages", at)
    assert out is not None
    mapped = json.dumps(mapped_id(tool_id, fmt))
    assert before + mapped + after in out
    assert result_before + mapped + result_after in out
    assert json.loads(out) == switched(json.loads(text), fmt, "messages", at)
