"""Context editing pairs each result with its call as the SDK does: a call is answered once,
so its arguments are read (and digested) for one result, however many repeat its id: the
work is linear in the body, not the arguments' bytes times the results."""

from __future__ import annotations

import json
from typing import Any

from toolref_server.context import facts as facts_module
from toolref_server.context.batches import plan
from toolref_server.context.facts import facts_of
from toolref_server.gateway.stand_ins import invocations_of as _invocations
from toolref_server.settings.context import Policy

POLICY = Policy(mode="on", trigger_tokens=0, keep=1, clear_at_least=1, rewrite_weight=0.0)


def invocations(body: dict[str, Any], format_name: str, key: str) -> list[dict[str, Any]]:
    """The invocations of the results the plan replaces, in conversation order."""
    facts_module.forget()
    text = json.dumps(body).encode()
    found = facts_of(text, "t", format_name, key)
    assert found is not None
    chosen = plan(found.messages, POLICY)
    read = _invocations(found, chosen.cleared)
    assert len(read) == len(chosen.cleared)
    return [read[item].invocation for item in chosen.cleared]


def test_a_call_whose_id_many_results_repeat_is_read_for_the_first_only() -> None:
    args = json.dumps({"path": "a" * 20_000})
    call = {"id": "c", "type": "function", "function": {"name": "read", "arguments": args}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
    ]
    messages += [
        {"role": "tool", "tool_call_id": "c", "content": f"{n}" + "x" * 600} for n in range(40)
    ]
    messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "go on"}]
    body = {"model": "m", "messages": messages}
    read = invocations(body, "openai-chat", "messages")
    assert len(read) == 39  # the last kept
    assert [i["args"] for i in read[:2]] == [args, {}]  # the rest: no call, as an orphan
    # each call's arguments read once: what is digested is within the body's own bytes
    digested = sum(len(json.dumps(i["args"])) + len(json.dumps(i["result"])) for i in read)
    assert digested < len(json.dumps(body))


def test_parallel_calls_of_one_tool_without_ids_pair_in_order() -> None:
    def call(path: str) -> dict[str, Any]:
        return {"functionCall": {"name": "read", "args": {"path": path}}}

    def result(path: str) -> dict[str, Any]:
        return {"functionResponse": {"name": "read", "response": {"content": path * 3000}}}

    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": [call("a"), call("b"), call("c")]},
            {"role": "user", "parts": [result("a"), result("b"), result("c")]},
            {"role": "model", "parts": [{"text": "ok"}]},
            {"role": "user", "parts": [{"text": "go on"}]},
        ]
    }
    read = invocations(body, "gemini", "contents")
    assert [i["args"] for i in read] == [{"path": "a"}, {"path": "b"}]  # the last is kept


def test_a_local_shell_result_is_named_for_the_local_shell_call_it_answers() -> None:
    """Found in review: a Responses `local_shell_call` (Codex CLI's local shell) was no call,
    so its result, sent as a `function_call_output` (Codex) or a `local_shell_call_output`
    (the AI SDK, OpenAI's SDK by `id`), was an orphan: replaced with a stand-in telling the
    model to `call tool({}) again`, a tool it has none of, or (the latter) never replaced.
    It is named `local_shell` now, with the call's `action` as its arguments."""
    action = {"type": "exec", "command": ["ls", "-la"], "env": {}}
    items: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    outputs = (
        {"type": "function_call_output", "call_id": "c0"},
        {"type": "local_shell_call_output", "call_id": "c1"},
        {"type": "local_shell_call_output", "id": "c2"},
    )
    for n, output in enumerate(outputs):
        call = {"type": "local_shell_call", "id": f"lsh_{n}", "call_id": f"c{n}"}
        items += [
            {**call, "status": "completed", "action": action},
            {**output, "output": f"{n}" + "file\n" * 600},
        ]
    items += [
        {"type": "function_call", "call_id": "k", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "k", "output": "x" * 3000},
        {"role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
    ]
    read = invocations({"model": "m", "input": items}, "openai-responses", "input")
    assert [(i["name"], i["args"]) for i in read] == [("local_shell", action)] * 3
