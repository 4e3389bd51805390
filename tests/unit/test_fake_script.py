"""The fake provider's scripted session (tests/support/fake_provider/script.py) for the
agents added last: the Continue CLI's read tool (`filepath`), and mini-swe-agent, which ends
on a command printing its word rather than on a text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.fake_provider import FINAL_TEXT, Script
from tests.support.more_agents import MINI_FINISH

BASH = {"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"],
}}}  # fmt: skip
READ = {"name": "Read", "input_schema": {
    "type": "object", "properties": {"filepath": {"type": "string"}}, "required": ["filepath"],
}}  # fmt: skip


def chat_turn(results: int) -> dict[str, Any]:
    """A Chat Completions request offering `bash`, with `results` tool results."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    messages += [{"role": "tool", "tool_call_id": f"c{k}", "content": "x"} for k in range(results)]
    return {"model": "fake-model", "messages": messages, "tools": [BASH]}


def test_a_read_tool_taking_filepath_gets_the_path(tmp_path: Path) -> None:
    body = {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "Bash"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]},
        ],
        "tools": [READ, {"name": "Bash", "input_schema": {"properties": {"command": {}}}}],
    }
    reply = Script(4, tmp_path)("messages", body)
    assert reply.call is not None
    assert reply.call.name == "Read"
    assert reply.call.arguments == {"filepath": str(tmp_path / "step-00.txt")}


def test_without_finish_the_session_ends_on_a_text(tmp_path: Path) -> None:
    reply = Script(2, tmp_path)("chat", chat_turn(2))
    assert reply.call is None
    assert reply.answer == "text"
    assert reply.text.startswith(FINAL_TEXT)


def test_with_finish_it_ends_on_a_command_printing_the_word_then_the_text(
    tmp_path: Path,
) -> None:
    script = Script(2, tmp_path, finish=MINI_FINISH)
    assert script("chat", chat_turn(1)).answer == "tool:bash"
    reply = script("chat", chat_turn(2))
    assert reply.answer == "finish"
    assert reply.call is not None
    command = reply.call.arguments["command"]
    assert command.startswith(f"echo {MINI_FINISH} && echo ")
    assert FINAL_TEXT in command
    assert json.loads(reply.arguments) == {"command": command}
