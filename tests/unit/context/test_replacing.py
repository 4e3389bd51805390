"""Context editing's facts and rewrite on arbitrary conversations, written by any JSON writer:
every tool result of the four formats the gateway serves is found, a body's facts are the
same whether made from the turn before or from scratch, and a body with results replaced
is the client's byte for byte outside the replaced values (checked independently: the
rewritten text split at the stand-ins gives the pieces of the client's text between its
result values).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolref_server.context import facts as facts_module
from toolref_server.context.client import clears_tool_results
from toolref_server.context.facts import Facts, facts_of
from toolref_server.context.replacing import as_json, escaped, rewritten, stand_in

from ..format_strategies import CONVERSATIONS

GATEWAY_FORMATS = {
    "openai-chat": "messages",
    "openai-responses": "input",
    "anthropic": "messages",
    "gemini": "contents",
}
_DECODER = json.JSONDecoder()


def written(messages: list[Any], key: str, data: st.DataObject) -> str:
    """The body as one of several writers writes it: compact or spaced, ASCII or not, the
    messages key before or after the other members, indented or not."""
    spaced = data.draw(st.sampled_from([(",", ":"), (", ", ": "), (" , ", " : ")]), label="sep")
    ascii_only = data.draw(st.booleans(), label="ascii")
    indent = data.draw(st.sampled_from([None, None, 2]), label="indent")
    first = data.draw(st.booleans(), label="messages first")
    members: list[tuple[str, Any]] = [("model", "m-1"), ("stream", True)]
    members.insert(0 if first else 2, (key, messages))
    return json.dumps(dict(members), separators=spaced, ensure_ascii=ascii_only, indent=indent)


def server_results(messages: list[Any]) -> int:
    """Anthropic's results of server tools (`web_search_tool_result`, `mcp_tool_result`):
    typed content no text may stand in for, so never candidates."""
    return sum(
        1
        for message in messages
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict)
        and str(block.get("type", "")).endswith("_tool_result")
        and ("content" in block)
    )


def every_result(found: Facts) -> dict[int, list[tuple[int, str]]]:
    """A stand-in for every result found, each unique (so the check can split at it)."""
    replaced: dict[int, list[tuple[int, str]]] = {}
    for index, message in enumerate(found.messages):
        for at, result in enumerate(message.results):
            text = stand_in("tool", '{"x": 1}', result.size, f"summary <{index}.{at}>")
            replaced.setdefault(index, []).append((at, as_json(text)))
    return replaced


@pytest.mark.parametrize("name", list(GATEWAY_FORMATS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_results_are_found_and_replaced_and_every_other_byte_is_the_client_s(
    name: str, data: st.DataObject
) -> None:
    conversation = data.draw(CONVERSATIONS[name], label="conversation")
    key = GATEWAY_FORMATS[name]
    text = written(conversation.messages, key, data)
    facts_module.forget()
    found = facts_of(text.encode(), "tenant", name, key)
    assert found is not None
    results = sum(len(m.results) for m in found.messages)
    typed = server_results(conversation.messages) if name == "anthropic" else 0
    assert results == len(conversation.invocations) + len(conversation.orphans) - typed
    replaced = every_result(found)
    out = rewritten(found, replaced).decode()
    stand_ins = [new for index in sorted(replaced) for _, new in sorted(replaced[index])]
    # The check: out split at the stand-ins gives the client's text between its result values.
    at = 0
    pieces = []
    for new in stand_ins:
        where = out.index(new, at)
        pieces.append(out[at:where])
        at = where + len(new)
    pieces.append(out[at:])
    at = 0
    for piece in pieces[:-1]:
        assert text.startswith(piece, at), "a byte outside the replaced results changed"
        _, at = _DECODER.raw_decode(text, at + len(piece))  # the result value, skipped whole
    assert text[at:] == pieces[-1]
    # and once more, remembered: the same facts, and the same text
    again = facts_of(text.encode(), "tenant", name, key)
    assert again is not None
    assert rewritten(again, replaced).decode() == out


@pytest.mark.parametrize("name", list(GATEWAY_FORMATS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_facts_from_the_turn_before_are_the_facts_from_scratch(
    name: str, data: st.DataObject
) -> None:
    conversation = data.draw(CONVERSATIONS[name], label="conversation")
    key = GATEWAY_FORMATS[name]
    messages = conversation.messages
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(messages)), min_size=2, max_size=4))))
    facts_module.forget()
    for cut in cuts:
        body = json.dumps({"model": "m", key: messages[:cut], "tools": ["x" * 300]}).encode()
        remembered = facts_of(body, "tenant", name, key)
        facts_module.forget()
        fresh = facts_of(body, "tenant", name, key)
        assert remembered is not None
        assert fresh is not None
        assert summary(remembered) == summary(fresh)


def summary(found: Facts) -> list[tuple[Any, ...]]:
    return [
        (
            m.text,
            m.bstart,
            m.bend,
            m.size,
            m.model,
            [(c.call_id, c.name, c.site) for c in m.calls],
            [(r.site, r.call_id, r.size, r.error) for r in m.results],
        )
        for m in found.messages
    ]


def test_a_cache_mark_moving_on_does_not_change_what_a_message_counts() -> None:
    """Claude Code moves its cache mark to the last message each turn: the message it left
    counts the same characters as before (the plan replays earlier turns with them)."""
    user = {"role": "user", "content": [{"type": "text", "text": "hello " * 40}]}
    marked = {
        "role": "user",
        "content": [
            {"type": "text", "text": "hello " * 40, "cache_control": {"type": "ephemeral"}}
        ],
    }
    answer = {"role": "assistant", "content": [{"type": "text", "text": "hi " * 30}]}
    facts_module.forget()
    one = facts_of(json.dumps({"messages": [marked]}).encode(), "t", "anthropic", "messages")
    two = facts_of(json.dumps({"messages": [user, answer]}).encode(), "t", "anthropic", "messages")
    assert one is not None
    assert two is not None
    assert one.messages[0].size == two.messages[0].size
    assert two.messages[1].model
    assert not two.messages[0].model


OUTPUT = "".join(f"line {n}\n" for n in range(200))
TEXT_RESULTS: dict[str, tuple[list[dict[str, Any]], tuple[str, str]]] = {
    # Cline and Roo: the tool and its argument, then the output, as user text parts
    "anthropic": (
        [
            {"role": "user", "content": [{"type": "text", "text": "task"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "<read_file>"}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": f"[read_file for 'src/a.py'] Result:\n{OUTPUT}"},
                    {"type": "text", "text": "<environment_details>...</environment_details>"},
                ],
            },
        ],
        ("read_file", "src/a.py"),
    ),
    # mini-SWE-agent in text mode: the command's output as the user's string content
    "openai-chat": (
        [
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": "```bash\nls\n```"},
            {"role": "user", "content": f"<returncode>0</returncode>\n<output>\n{OUTPUT}</output>"},
        ],
        ("shell", ""),
    ),
    "gemini": (
        [
            {"role": "user", "parts": [{"text": "task"}]},
            {"role": "model", "parts": [{"text": "Action: ls"}]},
            {"role": "user", "parts": [{"text": f"Observation: {OUTPUT}"}]},
        ],
        ("observation", ""),
    ),
}


@pytest.mark.parametrize("name", list(TEXT_RESULTS))
def test_results_an_agent_returns_as_text_are_results_replaced_by_text(name: str) -> None:
    messages, (tool, args) = TEXT_RESULTS[name]
    key = GATEWAY_FORMATS[name]
    text = json.dumps({"model": "m", key: messages}).encode()
    facts_module.forget()
    found = facts_of(text, "tenant", name, key)
    assert found is not None
    (result,) = found.messages[2].results
    assert (result.name, result.text) == (tool, args)
    assert not found.messages[0].results  # a user's first message is no result
    new = as_json(stand_in(tool, args, result.size, "200 lines"))
    out = json.loads(rewritten(found, {2: [(0, new)]}))[key]
    assert out[:2] == messages[:2]
    replaced = json.dumps(out[2])
    assert "[toolref:" in replaced
    assert "line 199" not in replaced
    if name == "anthropic":  # the part after it is the agent's still
        assert out[2]["content"][1] == messages[2]["content"][1]


def test_a_header_alone_in_its_part_makes_the_part_after_it_the_result() -> None:
    """Cline and Roo write `[read_file for 'x'] Result:` as a text part of its own and the
    output in the part after it: that part is the result, replaced by text; the header and
    everything else stay the agent's."""
    output = "".join(f"line {n} of a.py\n" for n in range(200))
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "<task>read a.py</task>"}]},
        {"role": "assistant", "content": "<read_file><path>a.py</path></read_file>"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "[read_file for 'a.py'] Result:"},
                {"type": "text", "text": output},
                {"type": "text", "text": "<environment_details>x</environment_details>"},
            ],
        },
    ]
    facts_module.forget()
    found = facts_of(json.dumps({"messages": messages}).encode(), "t", "anthropic", "messages")
    assert found is not None
    (result,) = found.messages[2].results
    assert (result.name, result.text) == ("read_file", "a.py")
    assert result.site.path == (0, "content", 1)
    new = as_json(stand_in("read_file", "a.py", result.size, "200 lines"))
    out = json.loads(rewritten(found, {2: [(0, new)]}))["messages"]
    parts = out[2]["content"]
    assert parts[0] == messages[2]["content"][0]
    assert parts[2] == messages[2]["content"][2]
    assert "[toolref:" in parts[1]["text"]
    assert "line 199" not in parts[1]["text"]


def test_text_that_only_looks_like_a_result_elsewhere_is_not_one() -> None:
    """A user message that does not follow the model's, or whose pattern is not at its start,
    is the user's own text."""
    messages = [
        {"role": "user", "content": "Observation: the first message is the task"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "please look at the <returncode>0</returncode> above"},
    ]
    facts_module.forget()
    found = facts_of(json.dumps({"messages": messages}).encode(), "t", "openai-chat", "messages")
    assert found is not None
    assert all(not m.results for m in found.messages)


@pytest.mark.parametrize(
    ("management", "left"),
    [
        (None, False),
        ({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}, False),  # Claude Code
        ({"edits": [{"type": "clear_tool_uses_20250919"}]}, True),
        ({"edits": [{"type": "clear_thinking_20251015"}, {"type": "clear_tool_uses_2026"}]}, True),
        ({"edits": [{"type": "compact_20260112"}]}, True),  # the provider compacts it
        ({"edits": "all"}, True),  # unreadable: the client meant to manage it
        ("yes", True),
    ],
)
def test_a_request_is_left_to_the_client_when_it_clears_its_own_tool_results(
    management: Any, left: bool
) -> None:
    messages = [{"role": "user", "content": 'say "context_management": {"edits": []}'}]
    body: dict[str, Any] = {"model": "m", "messages": messages}
    if management is not None:
        body["context_management"] = management
    facts_module.forget()
    found = facts_of(json.dumps(body).encode(), "t", "anthropic", "messages")
    assert found is not None
    assert clears_tool_results(found) is left


def test_only_the_body_s_own_context_management_counts() -> None:
    """A tool whose schema has a `context_management` property, after the messages or
    before them, does not make the client one that manages its own context."""
    schema = {"type": "object", "properties": {"context_management": {"type": "string"}}}
    tools = [{"name": "t", "input_schema": schema}]
    messages = [{"role": "user", "content": "hi"}]
    for body in (
        {"tools": tools, "messages": messages},
        {"messages": messages, "tools": tools, "x": {"context_management": {"edits": "all"}}},
    ):
        facts_module.forget()
        found = facts_of(json.dumps(body, indent=1).encode(), "t", "anthropic", "messages")
        assert found is not None
        assert not clears_tool_results(found)
    clearing = {"edits": [{"type": "clear_tool_uses_20250919"}]}
    after = {"messages": messages, "tools": tools, "context_management": clearing}
    facts_module.forget()
    found = facts_of(json.dumps(after, indent=1).encode(), "t", "anthropic", "messages")
    assert found is not None
    assert clears_tool_results(found)


THINKING = '{"edits":[{"type":"clear_thinking_20251015"}]}'
CLEARING = '{"edits":[{"type":"clear_tool_uses_20250919"}]}'
MESSAGES = '"messages":[{"role":"user","content":"hi"}]'


@pytest.mark.parametrize(
    "body",
    [
        '{"model":"m","context\\u005fmanagement":' + CLEARING + "," + MESSAGES + "}",
        '{"context_management":'
        + THINKING
        + ',"context_management":'
        + CLEARING
        + ","
        + MESSAGES
        + "}",
        '{"context_management":'
        + THINKING
        + ","
        + MESSAGES
        + ',"context_management":'
        + CLEARING
        + "}",
    ],
)
def test_the_member_is_read_as_a_parser_reads_it(body: str) -> None:
    """Its name escaped, or given twice (a parser keeps the last value, the tail's over the
    head's): a request the provider would have clear its tool results is left to it."""
    assert json.loads(body)["context_management"] == json.loads(CLEARING)
    facts_module.forget()
    found = facts_of(body.encode(), "t", "anthropic", "messages")
    assert found is not None
    assert clears_tool_results(found)


def test_typed_results_no_text_may_stand_in_for_are_never_candidates() -> None:
    """Anthropic's server tools' results (`web_search_tool_result`: a list of typed results
    the provider checks) and a `tool_result` holding `tool_reference` blocks (the tools it
    loads) are no candidates; a plain `tool_result` beside them is."""
    big = "x" * 5_000
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "find it"},
            {
                "role": "assistant",
                "content": [
                    {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}},
                    {
                        "type": "web_search_tool_result",
                        "tool_use_id": "s1",
                        "content": [{"type": "web_search_result", "url": "u", "title": big}],
                    },
                    {"type": "tool_use", "id": "t1", "name": "tool_search", "input": {}},
                    {"type": "tool_use", "id": "t2", "name": "read", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "tool_reference", "tool_name": "deploy" + big}],
                    },
                    {"type": "tool_result", "tool_use_id": "t2", "content": big},
                ],
            },
        ],
    }
    facts_module.forget()
    found = facts_of(json.dumps(body).encode(), "tenant", "anthropic", "messages")
    assert found is not None
    results = [r for m in found.messages for r in m.results]
    assert [r.call_id for r in results] == ["t2"]


def test_a_lone_surrogate_is_counted_and_written_as_its_escape() -> None:
    """JSON carries a lone surrogate (`\\ud800`), UTF-8 has no form for it: a result holding
    one is counted at the escape's bytes as sent, its stand-in written with the escape kept
    (it decodes to the same text), and its invocation read with the escape as text."""
    content = "\ud800 x"
    body = json.dumps(
        {"model": "m", "messages": [{"role": "tool", "tool_call_id": "c", "content": content}]}
    ).encode()
    found = facts_of(body, "t", "openai-chat", "messages")
    assert found is not None
    (result,) = found.messages[0].results
    assert result.size == len(b'"\\ud800 x"')
    written = as_json("[toolref: ...]\n" + content)
    assert written.encode("utf-8") == b'"[toolref: ...]\\n\\ud800 x"'
    assert json.loads(written) == "[toolref: ...]\n" + content
    assert escaped({"k\udc00": [content, "\\"]}) == {"k\\udc00": ["\\ud800 x", "\\"]}


def test_responses_outputs_that_keep_their_shape_are_never_candidates() -> None:
    """Found in review: a `shell_call_output`'s `output` is an array of `{stdout, stderr,
    outcome}` and a `computer_call_output`'s a `computer_screenshot` object; a text stand-in
    there is a request the provider refuses. They are no candidates; an
    `apply_patch_call_output` (its `output` a string) and a `function_call_output` are."""
    big = "x" * 5_000
    exit_0 = {"type": "exit", "exit_code": 0}
    shot = {"type": "computer_screenshot", "image_url": "data:image/png;base64," + big}
    patch = {"type": "update_file", "path": "a.py", "diff": big}
    items = [
        {"role": "user", "content": "go"},
        {"type": "shell_call", "call_id": "s1", "action": {"commands": ["ls"]}},
        {
            "type": "shell_call_output",
            "call_id": "s1",
            "output": [{"stdout": big, "stderr": "", "outcome": exit_0}],
        },
        {"type": "computer_call", "call_id": "k1", "actions": [{"type": "screenshot"}]},
        {"type": "computer_call_output", "call_id": "k1", "output": shot},
        {"type": "apply_patch_call", "call_id": "p1", "operation": patch},
        {"type": "apply_patch_call_output", "call_id": "p1", "status": "completed", "output": big},
        {"type": "function_call", "call_id": "f1", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "f1", "output": big},
    ]
    facts_module.forget()
    body = json.dumps({"model": "m", "input": items}).encode()
    found = facts_of(body, "tenant", "openai-responses", "input")
    assert found is not None
    calls = [(c.call_id, c.name) for m in found.messages for c in m.calls]
    assert calls == [("s1", "shell"), ("k1", "computer"), ("p1", "apply_patch"), ("f1", "read")]
    results = [r.call_id for m in found.messages for r in m.results]
    assert results == ["p1", "f1"]
