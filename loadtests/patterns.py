"""Synthetic agent conversations: the edit patterns of issue 30, as the request bodies an
agent sends, turn by turn.

Each generator is a pure function of `(turns, seed)`: no I/O, no clock, the same bodies for
the same arguments, a new conversation (other task, other files, other ids) for another
seed. A `Pattern` is the list of `Turn`s an agent posts, in order: each the whole request
body of that turn (an agent resends its history every time). `turns` counts the requests
of one conversation (of each one, when conversations are interleaved).

- `one-mark`: Claude Code: append-only, tool results as `tool_result` blocks, one cache mark
  that moves to the last message every turn (the previous last message loses it).
- `two-marks`, `n-marks`: marks on the last two (three, and the system prompt) user
  messages, all moving every turn.
- `results-as-text`: an IDE agent on an OpenAI-compatible API: its calls (`tool_calls`) are
  never answered by `tool` messages; the results come as user text
  (`[read_file for 'x'] Result: ...`), the last two user messages marked.
- `unanswered`: a call interrupted (never answered), and a result sent before its call.
- `edited`: every few turns a tool result in the middle is changed (the file was edited), a
  call and its result are deleted from the middle, or an exchange is inserted there.
- `compaction`: now and then the history is replaced by a summary, then grows again.
- `regenerate`: a turn sent twice (the answer regenerated), and a rewind of two turns (the
  conversation branched from an earlier message).
- `interleaved-2`, `interleaved-5`: that many `one-mark` conversations (one agent: the same
  system prompt and tools) taking turns through one client.

Property tests may reuse these (`PATTERNS[name](turns, seed)`); `encode` writes a body as
the agent does (compact JSON, UTF-8).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial
from typing import Any, Final, Literal

Format = Literal["anthropic", "openai-chat"]
PATHS: Final[dict[str, str]] = {"anthropic": "/v1/messages", "openai-chat": "/v1/chat/completions"}
MARK: Final = {"type": "ephemeral"}
MODEL: Final = "bench-1"
Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Turn:
    """One request: which conversation of the pattern it belongs to, and its body."""

    conversation: int
    body: dict[str, Any]

    @property
    def messages(self) -> list[Message]:
        found: list[Message] = self.body["messages"]
        return found


@dataclass(frozen=True, slots=True)
class Pattern:
    """A named list of turns in one format; `what` says how it grows."""

    name: str
    fmt: Format
    turns: tuple[Turn, ...]
    what: str

    @property
    def path(self) -> str:
        return PATHS[self.fmt]

    @property
    def conversations(self) -> int:
        return len({turn.conversation for turn in self.turns})


def encode(body: dict[str, Any]) -> bytes:
    """A body as an agent sends it: compact JSON in UTF-8."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


# --- text that compresses like code ----------------------------------------------------

_VOCABULARY: Final = (
    "self return def import value items config request None if for in len data path result "
    "error raise class test assert state cache key index count offset buffer stream parse "
    "write read open close handle token session client server message content block record "
    "history ref digest entry segment piece recipe base edit apply keep inline limit bound"
)
_WORDS: Final = tuple(_VOCABULARY.split())


def _line(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 9))]
    at = rng.randrange(len(words))
    words[at] = f"{words[at]}_{rng.randrange(1000)}"
    return "    " * rng.randint(0, 3) + " ".join(words)


def _text(rng: random.Random, lines: int) -> str:
    return "\n".join(_line(rng) for _ in range(lines))


def _file(rng: random.Random) -> tuple[str, str]:
    """A path and the text a tool read from it (400 bytes to 4 KB)."""
    path = f"src/{rng.choice(_WORDS)}/{rng.choice(_WORDS)}_{rng.randrange(100)}.py"
    return path, _text(rng, rng.randint(8, 80))


# --- one agent: system prompt, tools, and the conversation as it goes -----------------


@cache
def _system(fmt: Format) -> str:
    rng = random.Random(f"system {fmt}")  # one agent: the same prompt in every conversation
    return "You are a coding agent. Follow the rules below.\n" + _text(rng, 60)


@cache
def _tools(fmt: Format) -> list[dict[str, Any]]:
    rng = random.Random(f"tools {fmt}")
    found = []
    for name in ("read_file", "write_file", "run_command", "search", "list_files", "edit_file"):
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {"path": {"type": "string", "description": _text(rng, 2)}},
            "required": ["path"],
        }
        described = _text(rng, 4)
        if fmt == "anthropic":
            found.append({"name": name, "description": described, "input_schema": schema})
        else:
            function: dict[str, Any] = {
                "name": name,
                "description": described,
                "parameters": schema,
            }
            found.append({"type": "function", "function": function})
    return found


class _Agent:
    """A conversation as it goes (mutable, private: the generators below are pure)."""

    def __init__(self, fmt: Format, seed: int, results_as_text: bool = False) -> None:
        self.fmt, self.rng, self.as_text = fmt, random.Random(seed), results_as_text
        task = f"Task {seed}: fix the failing test.\n" + _text(self.rng, 6)
        self.messages: list[Message] = [user_text(task)]
        self.ahead: set[str] = set()  # calls whose result was sent before them (`unanswered`)
        self.next_id: str | None = None

    def _id(self) -> str:
        prefix = "toolu_" if self.fmt == "anthropic" else "call_"
        return prefix + "".join(self.rng.choice("0123456789abcdef") for _ in range(24))

    def call(self) -> tuple[str, str, str]:
        """The model's answer, a call to read a file: appended; (id, path, text read)."""
        call_id, self.next_id = self.next_id or self._id(), None
        path, text = _file(self.rng)
        said = "Let me look at " + path + ". " + _line(self.rng)
        if self.fmt == "anthropic":
            use = {"type": "tool_use", "id": call_id, "name": "read_file", "input": {"path": path}}
            content = [{"type": "text", "text": said}, use]
            self.messages.append({"role": "assistant", "content": content})
        else:
            function = {"name": "read_file", "arguments": json.dumps({"path": path})}
            calls = [{"id": call_id, "type": "function", "function": function}]
            self.messages.append({"role": "assistant", "content": said, "tool_calls": calls})
        return call_id, path, text

    def result(self, call_id: str, path: str, text: str) -> Message:
        if call_id in self.ahead:
            return user_text("(its result is above)")
        if self.as_text:
            return user_text(f"[read_file for '{path}'] Result:\n{text}")
        if self.fmt == "anthropic":
            return {"role": "user", "content": [self._result_block(call_id, text)]}
        return {"role": "tool", "tool_call_id": call_id, "content": text}

    def _result_block(self, call_id: str, text: str) -> dict[str, Any]:
        return {"type": "tool_result", "tool_use_id": call_id, "content": text}

    def step(self) -> None:
        """One exchange: the model calls a tool, the agent sends its result."""
        call_id, path, text = self.call()
        self.messages.append(self.result(call_id, path, text))

    def interrupted(self) -> None:
        """A call never answered: the user interrupts, in text."""
        self.call()
        self.messages.append(user_text("[Request interrupted by user for tool use]"))

    def early_result(self) -> None:
        """An exchange whose result message also carries the result of the next call,
        before that call is made (anthropic)."""
        call_id, _, text = self.call()
        ahead = self._id()
        blocks = [self._result_block(call_id, text), self._result_block(ahead, _text(self.rng, 5))]
        self.messages.append({"role": "user", "content": blocks})
        self.ahead.add(ahead)
        self.next_id = ahead

    def body(self, marks: int = 1, system_mark: bool = False) -> dict[str, Any]:
        """The request: the conversation so far, the last `marks` user messages marked."""
        messages = list(self.messages)
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        for index in users[-marks:] if marks else []:
            messages[index] = _marked(messages[index])
        body: dict[str, Any] = {"model": MODEL, "stream": True}
        if self.fmt == "anthropic":
            system: dict[str, Any] = {"type": "text", "text": _system(self.fmt)}
            if system_mark:
                system["cache_control"] = MARK
            body |= {"max_tokens": 8192, "system": [system], "tools": _tools(self.fmt)}
            body["messages"] = messages
        else:
            body["messages"] = [{"role": "system", "content": _system(self.fmt)}, *messages]
            body["tools"] = _tools(self.fmt)
        return body


def user_text(text: str) -> Message:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def _marked(message: Message) -> Message:
    content = message["content"]
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    last = {**content[-1], "cache_control": MARK}
    return {**message, "content": [*content[:-1], last]}


# --- the patterns --------------------------------------------------------------------------


def _plain(name: str, what: str, turns: int, seed: int, *, marks: int, system: bool) -> Pattern:
    agent = _Agent("anthropic", seed)
    found = []
    for _ in range(turns):
        found.append(Turn(0, agent.body(marks, system)))
        agent.step()
    return Pattern(name, "anthropic", tuple(found), what)


def one_mark(turns: int = 80, seed: int = 0) -> Pattern:
    what = "append-only, tool_result blocks, one cache mark on the last message (Claude Code)"
    return _plain("one-mark", what, turns, seed, marks=1, system=False)


def two_marks(turns: int = 80, seed: int = 0) -> Pattern:
    what = "append-only, tool_result blocks, the last two user messages marked"
    return _plain("two-marks", what, turns, seed, marks=2, system=False)


def n_marks(turns: int = 80, seed: int = 0) -> Pattern:
    what = "append-only, the system prompt and the last three user messages marked"
    return _plain("n-marks", what, turns, seed, marks=3, system=True)


def results_as_text(turns: int = 80, seed: int = 0) -> Pattern:
    agent = _Agent("openai-chat", seed, results_as_text=True)
    found = []
    for _ in range(turns):
        found.append(Turn(0, agent.body(2)))
        agent.step()
    what = "tool_calls never answered by tool messages: results as user text, two marks"
    return Pattern("results-as-text", "openai-chat", tuple(found), what)


def unanswered(turns: int = 80, seed: int = 0) -> Pattern:
    agent = _Agent("anthropic", seed)
    found = []
    for n in range(turns):
        found.append(Turn(0, agent.body()))
        if n == 2:
            agent.interrupted()
        elif n == 4:
            agent.early_result()
        else:
            agent.step()
    what = "a call interrupted at turn 3 (never answered), a result before its call at turn 5"
    return Pattern("unanswered", "anthropic", tuple(found), what)


def _middle(messages: list[Message], role: str) -> int:
    """The index of a message of `role` near the middle, past the first message."""
    at = max(1, len(messages) // 2)
    while messages[at]["role"] != role:
        at += 1
    return at


def edited(turns: int = 80, seed: int = 0) -> Pattern:
    agent = _Agent("anthropic", seed)
    found = []
    for n in range(turns):
        change = n // 4 % 3 if n >= 6 and n % 4 == 2 else None
        messages = agent.messages
        if change == 0:  # a tool result in the middle changed (its file was edited)
            at = _middle(messages, "user")
            block = messages[at]["content"][0]
            text = block.get("content", block.get("text", ""))
            changed = {**block, ("content" if "content" in block else "text"): text + "\n# edited"}
            messages[at] = {**messages[at], "content": [changed, *messages[at]["content"][1:]]}
        elif change == 1:  # a call and its result deleted from the middle
            at = _middle(messages, "assistant")
            del messages[at : at + 2]
        elif change == 2:  # an exchange inserted in the middle, after a user message
            at = _middle(messages, "user") + 1
            note = user_text("Also keep the old behaviour. " + _line(agent.rng))
            reply = {"role": "assistant", "content": [{"type": "text", "text": "Noted."}]}
            messages[at:at] = [reply, note]
        found.append(Turn(0, agent.body()))
        agent.step()
    what = (
        "every 4th turn from the 7th: a result in the middle edited, a pair deleted, one inserted"
    )
    return Pattern("edited", "anthropic", tuple(found), what)


def compaction(turns: int = 80, seed: int = 0) -> Pattern:
    agent = _Agent("anthropic", seed)
    found = []
    for n in range(turns):
        if n % 25 == 20:
            summary = "This session is being continued from a previous conversation. Summary:\n"
            agent.messages[:] = [user_text(summary + _text(agent.rng, 30))]
        found.append(Turn(0, agent.body()))
        agent.step()
    what = "at turns 21, 46, 71, ...: the history replaced by a summary, then growing again"
    return Pattern("compaction", "anthropic", tuple(found), what)


def regenerate(turns: int = 80, seed: int = 0) -> Pattern:
    agent = _Agent("anthropic", seed)
    found: list[Turn] = []
    for n in range(turns):
        if n % 7 == 3 and found:  # the same request again: its answer regenerated
            found.append(found[-1])
            continue
        if n % 11 == 8 and len(agent.messages) > 5:  # back two exchanges, another branch
            del agent.messages[-4:]
        found.append(Turn(0, agent.body()))
        agent.step()
    what = "turns 4, 11, 18, ... resend the turn before; turns 9, 20, 31, ... rewind two exchanges"
    return Pattern("regenerate", "anthropic", tuple(found), what)


def interleaved(turns: int = 80, seed: int = 0, conversations: int = 2) -> Pattern:
    agents = [_Agent("anthropic", seed * 1000 + i) for i in range(conversations)]
    found = []
    for _ in range(turns):
        for index, agent in enumerate(agents):
            found.append(Turn(index, agent.body()))
            agent.step()
    what = f"{conversations} one-mark conversations of one agent, taking turns"
    return Pattern(f"interleaved-{conversations}", "anthropic", tuple(found), what)


PATTERNS: Final[dict[str, Callable[[int, int], Pattern]]] = {
    "one-mark": one_mark,
    "two-marks": two_marks,
    "n-marks": n_marks,
    "results-as-text": results_as_text,
    "unanswered": unanswered,
    "edited": edited,
    "compaction": compaction,
    "regenerate": regenerate,
    "interleaved-2": partial(interleaved, conversations=2),
    "interleaved-5": partial(interleaved, conversations=5),
}
