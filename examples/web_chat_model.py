"""The web-chat demo's scripted model: AI SDK 5 UI message stream chunks for one turn.

A real backend would run `streamText` with tools; this one plays a model that calls tools
(run here, server-side, so the assistant `UIMessage` carries tool parts with `input` and
`output`) and then writes a short answer. The plan depends only on the conversation, so a
conversation replayed gives the same chunks. Commands in the user's text pick the tools
(`read PATH`, `list DIR`, `search WORD`); any other text gets a plan by turn number.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

from examples import web_chat_tools

Call = tuple[str, dict[str, Any]]


def user_text(message: dict[str, Any]) -> str:
    parts = message.get("parts") or []
    return " ".join(p.get("text", "") for p in parts if p.get("type") == "text")


def plan(text: str, turn: int) -> list[Call]:
    """The tool calls the model makes for the user's `text` on turn `turn` (1-based)."""
    words = text.split()
    calls: list[Call] = []
    for verb, arg in itertools.pairwise(words):
        if verb == "read":
            calls.append(("read_file", {"path": arg}))
        elif verb == "list":
            calls.append(("list_dir", {"path": arg}))
        elif verb == "search":
            calls.append(("search", {"query": arg}))
    if calls:
        return calls
    package = web_chat_tools.PACKAGES[turn % len(web_chat_tools.PACKAGES)]
    module = f"src/{package}/{web_chat_tools.WORDS[(turn * 7) % len(web_chat_tools.WORDS)]}.py"
    if turn % 2:
        return [("read_file", {"path": module}), ("search", {"query": f"{package}_{turn}"})]
    return [("list_dir", {"path": f"src/{package}"}), ("read_file", {"path": module})]


def summary(name: str, output: dict[str, Any]) -> str:
    if name == "read_file":
        return f"`{output['path']}` has {output['lines']} lines"
    if name == "list_dir":
        return f"`{output['path']}` holds {len(output['entries'])} entries"
    return f"{len(output['matches'])} matches for `{output['query']}`"


def chunks(messages: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The turn's chunks, in stream order, for a conversation ending in a user message."""
    turn = sum(1 for m in messages if m.get("role") == "user")
    calls = plan(user_text(messages[-1]), turn)
    yield {"type": "start", "messageId": f"assistant-{turn:03d}"}
    said = []
    for n, (name, args) in enumerate(calls):
        call_id = f"call_{turn:03d}_{n}"
        yield {"type": "start-step"}
        yield {"type": "tool-input-start", "toolCallId": call_id, "toolName": name}
        yield {
            "type": "tool-input-delta",
            "toolCallId": call_id,
            "inputTextDelta": json.dumps(args),
        }
        yield {
            "type": "tool-input-available",
            "toolCallId": call_id,
            "toolName": name,
            "input": args,
        }
        output = web_chat_tools.run(name, args)
        yield {"type": "tool-output-available", "toolCallId": call_id, "output": output}
        yield {"type": "finish-step"}
        said.append(summary(name, output))
    text = f"Turn {turn}: " + "; ".join(said) + ". Nothing there needs changing."
    yield {"type": "start-step"}
    yield {"type": "text-start", "id": f"text-{turn:03d}"}
    for word in text.split(" "):
        yield {"type": "text-delta", "id": f"text-{turn:03d}", "delta": word + " "}
    yield {"type": "text-end", "id": f"text-{turn:03d}"}
    yield {"type": "finish-step"}
    yield {"type": "finish"}
