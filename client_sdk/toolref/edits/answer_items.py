"""The answers of OpenAI Responses and Gemini streams, for `toolref.edits.answer.AnswerTap`
(JS `edits/answerItems.ts`, the same bytes).

Each reads one JSON event at a time (`event`), holds what the answer is made of, counts the
bytes certain to be in it through the tap's `hold` (given up past `MAX_ANSWER`, at the same
event as answer.ts), and says when the answer ended (`done`) or can be none (`failed`).

- *OpenAI Responses* (Codex CLI, the OpenAI Agents SDK): the agent writes back the output
  items, one `input` item each. Each `response.output_item.done` item is the whole item
  (its deltas, `response.output_text.delta`, `response.function_call_arguments.delta`,
  `response.custom_tool_call_input.delta`, only repeat it, and are not read), kept as Codex
  writes it back: its `id` dropped, a `message` as `type`, `role`, `content` (each content
  entry's `type`, `text`, `refusal`), `reasoning` as `type`, `summary`, `content`,
  `encrypted_content`, `function_call` as `type`, `name`, `arguments`, `call_id`,
  `custom_tool_call` as `type`, `status`, `call_id`, `name`, `input` (each as the item has
  it, in that order), any other item as the server sent it; the answer is the items in
  `output_index` order as one compact JSON list, then each call's arguments (a custom
  call's input) as the model wrote them, joined by newlines. `response.completed` ends it;
  `error`, `response.failed` and `response.incomplete` make none. Another client that
  writes the items back otherwise (its keys in the server's order, the ids kept) still
  shares their texts, which is what a dictionary needs.
- *Gemini* (`streamGenerateContent?alt=sse`, Gemini CLI): each event a
  GenerateContentResponse; the answer is the parts of `candidates[0].content` of every
  event, in order, as Gemini CLI writes them back: a part whose `thought` is true left out,
  and a plain text part (its `text` a string, none of `thought`, `thoughtSignature`,
  `functionCall`, `functionResponse`, `inlineData`, `fileData` true) added to the plain
  text part before it when that one's text is not empty; as `{"role":"model","parts":[..]}`,
  compact. Truth is Python's (`{}` and `[]` are false) on both sides. A candidate with a
  `finishReason` ends it (its parts read first); an `error` makes none.

A shape no answer is made of (an item, candidate, content or part that is no object, a
list that is none) makes none (`failed`), as in JS.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Final

Hold = Callable[[int], None]
SURROGATE: Final = re.compile("[\ud800-\udfff]")

# a Responses output item's type -> the members it is written back with, in this order
_KEEP: Final = {
    "message": ("type", "role", "content"),
    "reasoning": ("type", "summary", "content", "encrypted_content"),
    "function_call": ("type", "name", "arguments", "call_id"),
    "custom_tool_call": ("type", "status", "call_id", "name", "input"),
}
_ENTRY: Final = ("type", "text", "refusal")  # a message's content entry, written back
_STREAMED: Final = {"function_call": "arguments", "custom_tool_call": "input"}
_ENDS: Final = frozenset({"error", "response.failed", "response.incomplete"})
# a Gemini part with any of these true is no plain text part (Gemini CLI's
# `isValidNonThoughtTextPart`)
_NOT_PLAIN: Final = ("thought", "thoughtSignature", "functionCall", "functionResponse")
_NOT_PLAIN_DATA: Final = ("inlineData", "fileData")


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def size(text: str) -> int:
    """Bytes `text` makes in the answer at least, the same as answer.ts's `size`: its UTF-8,
    a surrogate counted as 2 (its `surrogatepass` bytes are 3; JS joins two into a character
    of 4). Escapes add to it (a quote, a line end, a control character): not counted."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogates
        return len(text.encode("utf-8", "surrogatepass")) - len(SURROGATE.findall(text))


class ResponsesAnswer:
    """The output items of an OpenAI Responses stream (module docstring)."""

    def __init__(self, hold: Hold) -> None:
        self._hold = hold
        self._items: dict[int, tuple[str, str | None]] = {}  # index -> compact item, its text
        self._counted: dict[int, int] = {}  # index -> bytes held for it
        self.done = False
        self.failed = False

    def event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "response.completed":
            self.done = True
        elif isinstance(kind, str) and kind in _ENDS:
            self.failed = True
        elif kind == "response.output_item.done":
            item = event.get("item")
            if not isinstance(item, dict):
                self.failed = True
                return
            index = event.get("output_index", 0)
            index = index if isinstance(index, int) else 0
            typed = item.get("type")
            typed = typed if isinstance(typed, str) else ""
            written = compact(_written(typed, item))
            streamed = item.get(_STREAMED.get(typed, ""))
            text = streamed if isinstance(streamed, str) else None
            # the item, a comma (or the list's bracket), and its text after a line end
            made = size(written) + 1 + (size(text) + 1 if text is not None else 0)
            if made > (counted := self._counted.get(index, 0)):  # again at its index: growth
                self._counted[index] = made
                self._hold(made - counted)
            self._items[index] = (written, text)

    def drop(self) -> None:
        self._items, self._counted = {}, {}

    def made(self) -> str:
        ordered = [self._items[index] for index in sorted(self._items)]
        items = "[" + ",".join(written for written, _ in ordered) + "]"
        return "\n".join([items, *(text for _, text in ordered if text is not None)])


def _written(typed: str, item: dict[str, Any]) -> dict[str, Any]:
    """`item` as the agent writes it back (module docstring)."""
    keep = _KEEP.get(typed)
    if keep is None:
        return {key: value for key, value in item.items() if key != "id"}
    written = {key: item[key] for key in keep if key in item}
    if typed == "message" and isinstance(written.get("content"), list):
        written["content"] = [
            {key: entry[key] for key in _ENTRY if key in entry}
            if isinstance(entry, dict)
            else entry
            for entry in written["content"]
        ]
    return written


class GeminiAnswer:
    """The model's parts of a Gemini stream (module docstring)."""

    def __init__(self, hold: Hold) -> None:
        self._hold = hold
        self._parts: list[dict[str, Any]] = []
        self._added: list[list[str]] = []  # each part's plain texts added to it
        self._open = False  # the last part is plain text, its text not empty
        self.done = False
        self.failed = False

    def event(self, event: dict[str, Any]) -> None:
        if "error" in event:
            self.failed = True
            return
        candidates = event.get("candidates")
        if candidates is None:
            return
        if not isinstance(candidates, list):
            self.failed = True
            return
        if not candidates:
            return
        candidate = candidates[0]
        if not isinstance(candidate, dict):
            self.failed = True
            return
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        if (content is not None and not isinstance(content, dict)) or (
            parts is not None and not isinstance(parts, list)
        ):
            self.failed = True
            return
        for part in parts or ():
            if not isinstance(part, dict):
                self.failed = True
                return
            self._part(part)
        reason = candidate.get("finishReason")
        if isinstance(reason, str) and reason:
            self.done = True

    def _part(self, part: dict[str, Any]) -> None:
        if _true(part.get("thought")):
            return
        text = part.get("text")
        plain = isinstance(text, str) and not any(
            _true(part.get(key)) for key in (*_NOT_PLAIN, *_NOT_PLAIN_DATA)
        )
        if plain and self._open:
            assert isinstance(text, str)
            self._added[-1].append(text)
            self._hold(size(text))
            return
        self._parts.append(part)
        self._added.append([])
        self._hold(size(compact(part)) + 1)  # and a comma (or the list's bracket)
        self._open = plain and text != ""

    def drop(self) -> None:
        self._parts, self._added = [], []

    def made(self) -> str:
        parts = [
            {**part, "text": part["text"] + "".join(added)} if added else part
            for part, added in zip(self._parts, self._added, strict=True)
        ]
        return compact({"role": "model", "parts": parts})


def _true(value: Any) -> bool:
    """Python's truth of a JSON value (JS `!isFalsy`)."""
    return bool(value)
