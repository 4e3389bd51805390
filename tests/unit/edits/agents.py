"""Conversations as agents write them, turn by turn, for the editor's tests: the requests'
bodies (bytes, as a given JSON writer spells them) of 1, 2 and N moving cache marks, tool
results as user text, calls never answered, edits in the middle, compaction, regenerate."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

HEADERS = [
    ("Content-Type", "application/json"),
    ("x-api-key", "sk-ant-api03-" + "k" * 80),
    ("anthropic-version", "2023-06-01"),
    ("anthropic-beta", "prompt-caching-2024-07-31,interleaved-thinking-2025-05-14"),
    ("User-Agent", "claude-cli/2.1.3 (external, cli)"),
    ("x-stainless-lang", "js"),
]
STYLES = ("compact", "spaced", "pretty", "ascii")
# An agent's tool list as large as real ones (Claude Code's is 40-80 KB): past `PIECE_MIN`
# (16 KiB), so it is a piece, named by id across conversations.
TOOLS = [
    {"name": f"tool{i}", "description": f"Use tool{i} to do task {i}. " * 24} for i in range(28)
]
# Spellings a parser changes, kept as raw text inside messages (never parsed by the test).
ODD = (
    '{"role":"user","content":"lone \\ud83d surrogate","n":1E5,"n":-0.0,"big":1e400}',
    '{"role":"user","content":[{"type":"text","text":"\\u00e9t\\u00e9 ' + "z" * 80 + '"}],'
    '"x":123456789012345678901234567890}',
)


def written(value: Any, style: str) -> str:
    if style == "compact":
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if style == "spaced":
        return json.dumps(value, ensure_ascii=False)
    if style == "pretty":
        return json.dumps(value, indent=2, ensure_ascii=False)
    return json.dumps(value)


@dataclass
class Agent:
    """One conversation: its messages (values, or raw text for odd spellings), its cache
    marks, and how it writes its requests."""

    seed: int
    style: str = "compact"
    marks: int = 1  # user messages carrying cache_control, the last ones
    text_results: bool = False  # tool results as `[tool for 'x'] Result: ...` user text
    unanswered: bool = False  # one call early on never gets a result
    odd: bool = False  # messages in spellings a parser would change
    messages: list[Any] = field(default_factory=list)
    rng: random.Random = field(init=False)
    turn: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        first = f"task {self.seed}: fix the failing test in module_{self.seed}.py " * 4
        self.messages = [{"role": "user", "content": [{"type": "text", "text": first}]}]
        if self.odd:
            self.messages.append(_Raw(ODD[0]))
            self.messages.append({"role": "assistant", "content": "noted"})
            self.messages.append(_Raw(ODD[1]))

    def words(self, low: int, high: int) -> str:
        return " ".join(
            self.rng.choice(("alpha", "beta", "gamma", "delta", "def", "return", "x"))
            + str(self.rng.randrange(100))
            for _ in range(self.rng.randrange(low, high))
        )

    def step(self) -> None:
        """The assistant's call and its result (or a user message), appended."""
        self.turn += 1
        call = f"toolu_{self.seed}_{self.turn}"
        self.messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": self.words(3, 30)},
                    {"type": "tool_use", "id": call, "name": "read_file", "input": {"p": "x.py"}},
                ],
            }
        )
        result = self.words(20, 200)
        if self.unanswered and self.turn == 2:
            self.messages.append({"role": "user", "content": "[interrupted] " + self.words(2, 5)})
        elif self.text_results:
            text = f"[read_file for 'x.py'] Result: {result}"
            self.messages.append({"role": "user", "content": [{"type": "text", "text": text}]})
        else:
            block = {"type": "tool_result", "tool_use_id": call, "content": result}
            self.messages.append({"role": "user", "content": [block]})

    def body(self) -> bytes:
        """The request now, its last `marks` user messages marked, as its writer spells it
        (odd messages are raw text put in the writer's place for them)."""
        users = [i for i, m in enumerate(self.messages) if _is_user(m)]
        marked = set(users[-self.marks :]) if self.marks else set()
        values = [
            f"@@{i}@@" if isinstance(m, _Raw) else _marked(m) if i in marked else m
            for i, m in enumerate(self.messages)
        ]
        text = written(
            {
                "model": "claude-sonnet-4",
                "max_tokens": 32000,
                "system": [{"type": "text", "text": "You are an agent. " * 30}],
                "tools": TOOLS,
                "messages": values,
                "stream": True,
            },
            self.style,
        )
        for n, message in enumerate(self.messages):
            if isinstance(message, _Raw):
                text = text.replace(f'"@@{n}@@"', message.text)
        return text.encode()

    # --- edits a person or the agent makes --------------------------------------------

    def edit_middle(self) -> None:
        at = len(self.messages) // 2
        if not self.messages:
            return
        self.messages[at] = {"role": "user", "content": "edited: " + self.words(10, 40)}

    def delete_middle(self) -> None:
        if self.messages:
            del self.messages[len(self.messages) // 2]

    def insert_middle(self) -> None:
        at = len(self.messages) // 2
        self.messages.insert(at, {"role": "user", "content": "inserted: " + self.words(10, 40)})

    def compact(self) -> None:
        summary = "summary of the conversation so far: " + self.words(40, 80)
        self.messages = [{"role": "user", "content": summary}, *self.messages[-2:]]


def _is_user(message: Any) -> bool:
    return isinstance(message, dict) and message.get("role") == "user"


def _marked(message: dict[str, Any]) -> dict[str, Any]:
    content = message["content"]
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    last = {**content[-1], "cache_control": {"type": "ephemeral"}}
    return {**message, "content": [*content[:-1], last]}


@dataclass(frozen=True, slots=True)
class _Raw:
    text: str


def turns(agent: Agent, count: int) -> Iterator[bytes]:
    for _ in range(count):
        agent.step()
        yield agent.body()
