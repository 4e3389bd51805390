"""The web-chat demo's scripted model: valid UI message stream chunks, deterministic, with
tool results of several KB that differ from turn to turn."""

from __future__ import annotations

import json
from typing import Any

from examples import web_chat_model, web_chat_tools


def conversation(*texts: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for n, text in enumerate(texts, 1):
        if n > 1:
            messages.append({"id": f"a{n}", "role": "assistant", "parts": []})
        messages.append({"id": f"u{n}", "role": "user", "parts": [{"type": "text", "text": text}]})
    return messages


def test_commands_pick_the_tools() -> None:
    assert web_chat_model.plan("read src/a.py then search cache", 1) == [
        ("read_file", {"path": "src/a.py"}),
        ("search", {"query": "cache"}),
    ]
    assert web_chat_model.plan("list src", 4) == [("list_dir", {"path": "src"})]
    assert len(web_chat_model.plan("what now?", 7)) == 2


def test_a_turn_is_tool_steps_then_text_and_is_deterministic() -> None:
    messages = conversation("hello", "and then?")
    chunks = list(web_chat_model.chunks(messages))
    assert chunks == list(web_chat_model.chunks(messages))
    kinds = [c["type"] for c in chunks]
    assert kinds[0] == "start"
    assert kinds[-1] == "finish"
    assert kinds.count("start-step") == kinds.count("finish-step") == 3  # two tools, the text
    outputs = [c for c in chunks if c["type"] == "tool-output-available"]
    inputs = {c["toolCallId"] for c in chunks if c["type"] == "tool-input-available"}
    assert {c["toolCallId"] for c in outputs} == inputs
    assert all(len(json.dumps(c["output"])) > 1500 for c in outputs)
    text = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
    assert text.startswith("Turn 2: ")


def test_results_differ_by_argument_and_not_by_run() -> None:
    assert web_chat_tools.read_file("src/a.py") == web_chat_tools.read_file("src/a.py")
    assert web_chat_tools.read_file("src/a.py") != web_chat_tools.read_file("src/b.py")
    assert web_chat_tools.search("x") != web_chat_tools.search("y")
