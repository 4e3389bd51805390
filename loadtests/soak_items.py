"""The soak's OpenAI Responses and Gemini conversations: an agent's turns to `toolref relay`,
each streamed, each answer written back as the next turn's history (issue 39's dictionary).

As Codex CLI (Responses: `input` items) and Gemini CLI (`contents`) do, the agent reads the
stream its turn got and writes the model's answer back: each `response.output_item.done`
item (its `id` dropped, its members in Codex's order: a `function_call` as `type`, `name`,
`arguments`, `call_id`, a `custom_tool_call` as `type`, `status`, `call_id`, `name`,
`input`, a `message` as `type`, `role`, `content`), or the model's parts of every chunk
(consecutive plain text parts joined, as Gemini CLI joins them) as one `model` content;
then each call's result (`function_call_output`, `custom_tool_call_output`, a
`functionResponse`), a file of realistic size, new bytes every conversation. The fake
provider's `Script` answers call k for a request holding k results, so every turn is a tool
call; every `TEXT_EVERY`th turn offers no tools and is answered a text (a `message` item, a
text part), which the user follows with a message of their own (not with `exec`, whose
tools are an item of the history). Responses conversations
alternate between Codex's function tools (`shell`, `read_file`) and its freeform `exec`
(offered in an `additional_tools` item, called as a `custom_tool_call`).

A turn whose stream did not end whole (no `response.completed`, no `finishReason`) fails
and its conversation is replaced by a new one: the agent has nothing to write back.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

from loadtests.workload import TOOL_SCHEMA

RESPONSES: Final = "responses"
GEMINI: Final = "gemini"
ITEM_APIS: Final = (RESPONSES, GEMINI)
MODEL: Final = "soak-1"
PATHS: Final = {
    RESPONSES: "/llm/fake/v1/responses",
    GEMINI: f"/llm/fake/v1beta/models/{MODEL}:streamGenerateContent?alt=sse",
}
HEADERS: Final = {
    RESPONSES: {"Authorization": "Bearer sk-soak-" + "r" * 32},
    GEMINI: {"x-goog-api-key": "AIza" + "g" * 35},
}
TEXT_EVERY: Final = 5  # every 5th turn offers no tools: answered a text
_SHELL: Final = {
    "type": "object",
    "properties": {"command": {"type": "array", "items": {"type": "string"}}},
    "required": ["command"],
}
_COMMAND: Final = {
    "type": "object",
    "properties": {"command": {"type": "string"}},
    "required": ["command"],
}
_FUNCTIONS: Final = [
    {"type": "function", "name": "shell", "description": "Run a command", "parameters": _SHELL},
    {"type": "function", "name": "read_file", "description": "Read", "parameters": TOOL_SCHEMA},
]
_EXEC: Final = {
    "type": "additional_tools",
    "tools": [
        {"type": "custom", "name": "exec", "description": "Run JavaScript", "format": {}},
        {"type": "function", "name": "read_file", "parameters": TOOL_SCHEMA},
    ],
}
_GEMINI_TOOLS: Final = [
    {
        "functionDeclarations": [
            {"name": "run_shell_command", "parametersJsonSchema": _COMMAND},
            {"name": "read_file", "parametersJsonSchema": TOOL_SCHEMA},
        ]
    }
]
# the members Codex writes an output item back with, in its order (any other: all but `id`)
_CODEX: Final = {
    "message": ("type", "role", "content"),
    "reasoning": ("type", "summary", "content", "encrypted_content"),
    "function_call": ("type", "name", "arguments", "call_id"),
    "custom_tool_call": ("type", "status", "call_id", "name", "input"),
}
_OUTPUTS: Final = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
}


class Unfinished(Exception):
    """A stream that did not end whole: nothing to write back."""


def events(data: bytes) -> list[dict[str, Any]]:
    """The JSON of every `data:` line of a server-sent event stream (LF or CRLF)."""
    found = []
    for line in data.replace(b"\r\n", b"\n").split(b"\n"):
        if line.startswith(b"data:"):
            value = json.loads(line[5:])
            if isinstance(value, dict):
                found.append(value)
    return found


def codex_items(stream: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The output items of a Responses stream as Codex writes them back; `Unfinished`
    without `response.completed`."""
    if not any(event.get("type") == "response.completed" for event in stream):
        raise Unfinished("the Responses stream ended without response.completed")
    done = [e for e in stream if e.get("type") == "response.output_item.done"]
    items = [e["item"] for e in sorted(done, key=lambda e: e.get("output_index", 0))]
    written = []
    for item in items:
        keep = _CODEX.get(item["type"])
        if keep is None:
            written.append({k: v for k, v in item.items() if k != "id"})
            continue
        out = {k: item[k] for k in keep if k in item}
        if item["type"] == "message":
            out["content"] = [{"type": c["type"], "text": c["text"]} for c in item["content"]]
        written.append(out)
    return written


def gemini_content(stream: list[dict[str, Any]]) -> dict[str, Any]:
    """The model's content of a Gemini stream as Gemini CLI writes it back: the parts of
    every chunk, consecutive text parts joined; `Unfinished` without a `finishReason`."""
    parts: list[dict[str, Any]] = []
    finished = False
    for chunk in stream:
        candidate = (chunk.get("candidates") or [{}])[0]
        for part in (candidate.get("content") or {}).get("parts") or ():
            if set(part) == {"text"} and parts and set(parts[-1]) == {"text"} and parts[-1]["text"]:
                parts[-1] = {"text": parts[-1]["text"] + part["text"]}
            else:
                parts.append(dict(part))
        finished = finished or bool(candidate.get("finishReason"))
    if not finished:
        raise Unfinished("the Gemini stream ended without a finishReason")
    return {"role": "model", "parts": parts}


@dataclass
class ItemConversation:
    """One conversation's history so far (Responses `input` items or Gemini `contents`)."""

    api: str
    custom: bool  # Responses: Codex's freeform `exec` offered, not its function tools
    salt: str
    rng: random.Random
    history: list[dict[str, Any]] = field(default_factory=list)
    turn: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def body(self) -> bytes:
        """The next turn's request, as the CLI writes it."""
        # a text turn (Responses with `exec`: none, its tools are in the history)
        tools = self.custom or self.turn % TEXT_EVERY != TEXT_EVERY - 1
        if self.api == GEMINI:
            value: dict[str, Any] = {"contents": self.history}
            if tools:
                value["tools"] = _GEMINI_TOOLS
            value["generationConfig"] = {"temperature": 0}
            return json.dumps(value).encode()
        value = {"model": MODEL, "instructions": "You are a coding agent."}
        value["input"] = [_EXEC, *self.history] if self.custom else self.history
        if tools:
            value["tools"] = [] if self.custom else _FUNCTIONS
        value |= {"tool_choice": "auto", "stream": True, "store": False}
        return json.dumps(value).encode()

    def result(self) -> str:
        """A tool's output: a file of realistic size, new bytes in every conversation."""
        lines = self.rng.randrange(20, 300)
        body = "".join(
            f"    line_{k} = compute({k}, {self.rng.randrange(99)})\n" for k in range(lines)
        )
        return f"# {self.salt} turn {self.turn}\n{body}"

    def answered(self, stream: list[dict[str, Any]]) -> None:
        """The answer written back, each call's result after it (`Unfinished`: none)."""
        if self.api == GEMINI:
            content = gemini_content(stream)
            results = [
                {
                    "functionResponse": {
                        "name": p["functionCall"]["name"],
                        "response": {"output": self.result()},
                    }
                }
                for p in content["parts"]
                if "functionCall" in p
            ]
            said: list[dict[str, Any]] = [{"text": f"go on with step {self.turn + 1}"}]
            self.history += [content, {"role": "user", "parts": results or said}]
        else:
            items = codex_items(stream)
            outputs = [
                {
                    "type": _OUTPUTS[item["type"]],
                    "call_id": item["call_id"],
                    "output": self.result(),
                }
                for item in items
                if item["type"] in _OUTPUTS
            ]
            user: dict[str, Any] = {
                "type": "message",
                "role": "user",
                "content": f"go on with step {self.turn + 1}",
            }
            self.history += [*items, *(outputs or [user])]
        self.turn += 1


class ItemConversations:
    """`width` conversations of each API side by side, each replaced by a new one after
    `turns` turns (or a turn that failed)."""

    def __init__(self, salt: str, width: int, turns: int) -> None:
        self.salt, self.turns, self.width = salt, turns, width
        self._numbers = itertools.count()
        self._slots = {api: [self._new(api) for _ in range(width)] for api in ITEM_APIS}
        self._next = {api: itertools.cycle(range(width)) for api in ITEM_APIS}
        self.savings: Counter[str] = Counter()  # "<api> raw|wire" from Toolref-Savings

    def _new(self, api: str) -> ItemConversation:
        n = next(self._numbers)
        salt = f"{self.salt}-{api}-{n}"
        first = f"Build the module, step by step ({salt}). " * 20
        history: list[dict[str, Any]] = (
            [{"role": "user", "parts": [{"text": first}]}]
            if api == GEMINI
            else [{"type": "message", "role": "user", "content": first}]
        )
        rng = random.Random(salt)  # noqa: S311 (a load shape, not a secret)
        return ItemConversation(api, n % 2 == 1, salt, rng, history)

    def slot(self, api: str) -> tuple[int, ItemConversation]:
        at = next(self._next[api])
        return at, self._slots[api][at]

    def peek(self, api: str) -> bytes:
        """A body the next conversation of `api` could send now (not taken)."""
        return self._slots[api][0].body()

    def finished(self, api: str, at: int, conversation: ItemConversation, ok: bool) -> None:
        """After a turn: a conversation that ended or failed gives way to a new one."""
        if (not ok or conversation.turn >= self.turns) and self._slots[api][at] is conversation:
            self._slots[api][at] = self._new(api)

    def saved(self, api: str, header: str | None) -> None:
        """Count a turn's `Toolref-Savings: raw=R, wire=W, ...`."""
        fields = dict(p.strip().partition("=")[::2] for p in (header or "").split(","))
        if fields.get("raw", "").isdigit() and fields.get("wire", "").isdigit():
            self.savings[f"{api} raw"] += int(fields["raw"])
            self.savings[f"{api} wire"] += int(fields["wire"])
            self.savings[f"{api} turns"] += 1
