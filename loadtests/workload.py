"""Synthetic traffic for the load tests: coding-agent conversations and tool invocations.

`synthetic(n)` is a coding agent's conversation in OpenAI Chat format (reads of files of
realistic sizes), `anthropic(...)` the same conversation as Anthropic Messages sends it, and
`invocation(size)` a registry invocation unique per call. locust (`locustfile.py`) and the
soak (`soak.py`) draw on them.
"""

from __future__ import annotations

import json
import random
import uuid
from typing import Any, Final

TURNS: Final = 40
TOOL_SCHEMA: Final = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
}


def synthetic(n: int, turns: int = TURNS, salt: str = "") -> list[dict[str, Any]]:
    """A coding-agent conversation: reads, greps and edits with realistic result sizes.
    Conversation `n` is the same every time; `salt` (put in every tool result) makes its
    payloads new ones."""
    rng = random.Random(n)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for turn in range(turns):
        call_id = f"call_{n}_{turn}"
        path = f"src/module_{rng.randrange(30)}.py"
        messages.append({"role": "user", "content": f"step {turn}"})
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": json.dumps({"path": path})},
                    }
                ],
            }
        )
        body = "".join(f"    line_{k} = compute({k})\n" for k in range(rng.randrange(20, 400)))
        messages.append(
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": f"# {salt}\n{body}" if salt else body,
            }
        )
    return messages


def cuts(messages: list[dict[str, Any]]) -> list[int]:
    """Where a client sends the conversation: after each tool result (the model's turn)."""
    return [i + 1 for i, message in enumerate(messages) if message["role"] == "tool"]


def anthropic(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """(system prompt, messages) of a `synthetic` conversation as Anthropic Messages carries
    it: tool calls as `tool_use` blocks, each result a `tool_result` block of a user message
    of its own, so that a prefix of the conversation converts to a prefix of the whole."""
    system, converted = "", []
    for message in messages:
        role, content = message["role"], message["content"]
        if role == "system":
            system = content
        elif role == "assistant":
            blocks = [
                {
                    "type": "tool_use",
                    "id": call["id"],
                    "name": call["function"]["name"],
                    "input": json.loads(call["function"]["arguments"]),
                }
                for call in message.get("tool_calls") or ()
            ]
            converted.append({"role": "assistant", "content": blocks})
        elif role == "tool":
            result = {"type": "tool_result", "tool_use_id": message["tool_call_id"]}
            converted.append({"role": "user", "content": [{**result, "content": content}]})
        else:
            converted.append({"role": "user", "content": [{"type": "text", "text": content}]})
    return system, converted


def invocation(size: int) -> dict[str, Any]:
    """A tool invocation of about `size` bytes, unique per call (new refs every time)."""
    token = uuid.uuid4().hex
    return {
        "name": "read_file",
        "args": {"path": f"src/{token}.py"},
        "result": f"{token}\n" + "x = compute(1)\n" * (size // 15),
        "isError": False,
    }
