"""The answer a turn streamed, as the next turn's dictionary (issue 39).

The agent writes the model's answer back into its next request as an assistant message; the
gateway streamed that very answer to it one turn before. Relay and gateway (or the SDK and
the middleware's registry) both read the stream as it passes (`AnswerTap`) and assemble the
same bytes from it, with nothing exchanged: the answer as one assistant message in its
API's own JSON (`{"role":"assistant","content":[...]}` for Anthropic Messages, with
`tool_calls` for OpenAI Chat), every string as the model wrote it, tool inputs compact, then
each tool input as the model streamed it. A version-3 edit compresses the assistant
segments it carries against those bytes (`toolref.edits.isolated`, record kind 3) and
names them by `answer_id`; a receiver that holds other bytes, or none, refuses the edit
(400 `dictionary-mismatch`) and the sender sends it again without.

Only a whole answer is one: a stream with a 200, `text/event-stream` and no
`Content-Encoding`, of an API read here, seen to its end event (`message_stop`,
`data: [DONE]`) within `MAX_STREAM` bytes and making at most `MAX_ANSWER` bytes. A stream
cut short, an error event, anything else: no answer, and the next edit is what it would
have been without. Pure and incremental: linear in the stream, one JSON parse per event.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any, Final

from toolref.wire.encoding import media_type
from toolref.wire.endpoints import endpoint

MAX_ANSWER: Final = 256 << 10  # bytes of an answer's dictionary; a longer one is none
MAX_STREAM: Final = 8 << 20  # bytes of stream read for one; a longer stream gives none
ID_LENGTH: Final = 16  # hex digits of SHA-256 naming an answer (`answer_id`)
FORMATS: Final = frozenset({"anthropic", "openai-chat"})
_EVENT_STREAM: Final = "text/event-stream"
_BOM: Final = b"\xef\xbb\xbf"
_LINE_END: Final = re.compile(rb"\r\n?|\n")  # SSE's line ends, and only those


def answer_id(answer: bytes) -> str:
    """The name of an answer's bytes in an edit (`"a"`): hex of their SHA-256, cut."""
    return hashlib.sha256(answer).hexdigest()[:ID_LENGTH]


def tap_for(path: str, status: int, headers: Iterable[tuple[str, str]]) -> AnswerTap | None:
    """A tap for the answer to `POST path` with this status and these headers, or None
    when it cannot be one (see the module docstring)."""
    found = endpoint("POST", path)
    if status != 200 or found is None or found.format not in FORMATS:
        return None
    named = {name.lower(): value for name, value in headers}
    media = media_type(named.get("content-type"))
    encoding = named.get("content-encoding", "identity").strip().lower()
    if media != _EVENT_STREAM or encoding != "identity":
        return None
    return AnswerTap(found.format)


class AnswerTap:
    """Fed a stream's bytes as they come (`feed`); `answer` once its end event was seen."""

    def __init__(self, fmt: str) -> None:
        self._anthropic = fmt == "anthropic"
        self._begun = False  # a first byte that is no BOM's read (or a BOM dropped)
        self._head = b""  # the first bytes while they may yet be a BOM
        self._cr = False  # the last piece ended with CR: an LF first in the next ends nothing
        self._line = bytearray()
        self._data: list[bytes] = []
        self._read = 0
        self._blocks: dict[int, dict[str, Any]] = {}
        self._inputs: dict[int, list[str]] = {}  # tool_use block -> its input's pieces
        # (block, field) -> the pieces its deltas streamed, joined once at the end: adding
        # each to the block's string made a long answer's tap quadratic
        self._texts: dict[tuple[int, str], list[str]] = {}
        self._content: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self.done = False  # its end event seen
        self.failed = False  # never an answer: cut, an error event, too long, unreadable

    def feed(self, data: bytes) -> bool:
        """Read `data`; whether the answer ended within it (once, at its end event). Lines end
        at CRLF, LF or CR (the SSE spec's three); one UTF-8 BOM before the first is dropped;
        only the bytes up to the line that ends the answer count against `MAX_STREAM`, and
        what follows that line in the same piece is not read (the answer is taken when `feed`
        says it ended, so bytes after the end never change it, whichever piece they come in,
        and the answer is the same however the stream is cut). O(len(data))."""
        if self.done or self.failed:
            if self.done and data.strip():
                self.failed = True  # bytes after the end: not the stream this reads
            return False
        if not self._begun:  # the stream's first bytes: up to 2 held, as they may be a BOM
            data = self._head + data
            if len(data) < len(_BOM) and _BOM.startswith(data):
                self._head = data
                return False
            self._begun, self._head = True, b""
            if data.startswith(_BOM):
                self._read += len(_BOM)
                data = data[len(_BOM) :]
        room = MAX_STREAM - self._read
        view = data[:room]  # past it, only the end of the answer's last line would do
        self._read += len(view)
        start = 1 if self._cr and view.startswith(b"\n") else 0  # a CRLF cut between pieces
        self._cr = self._cr and not view
        last = max(view.rfind(b"\n"), view.rfind(b"\r"))
        if last < start:  # within a line: kept, so that a long line costs its length once
            self._line += view[start:]
        else:
            text = bytes(self._line) + view[start : last + 1]
            self._line = bytearray(view[last + 1 :])
            self._cr = view.endswith(b"\r")
            lines = _LINE_END.split(text)
            lines.pop()  # what follows the last line end: kept in `_line`
            for line in lines:
                self._line_read(line)
                if self.done or self.failed:
                    break
        if len(data) > room and not self.done:
            self.failed = True  # the answer's end not within MAX_STREAM bytes
        return self.done and not self.failed

    @property
    def answer(self) -> bytes | None:
        """The answer's bytes (module docstring); None unless the stream ended whole."""
        if not self.done or self.failed:
            return None
        try:
            made = self._made()
        except (TypeError, ValueError, RecursionError):  # shaped like no answer, or a tool
            return None  # input nested past the parser: none, never raised into the stream
        return made if len(made) <= MAX_ANSWER else None

    def _line_read(self, line: bytes) -> None:  # `line` without its line end
        if line.startswith(b"data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(b" ") else value)
        elif not line and self._data:
            data, self._data = b"\n".join(self._data), []
            self._event(data)

    def _event(self, data: bytes) -> None:
        if not self._anthropic and data.strip() == b"[DONE]":
            self.done = True
            return
        try:
            self._event_read(json.loads(data))
        except (TypeError, ValueError, RecursionError):
            # nested past the parser, or shaped like no event of an answer (`"choices": 1`):
            # not an answer we read, and nothing raised into the way of the stream
            self.failed = True

    def _event_read(self, event: Any) -> None:
        if not isinstance(event, dict):
            self.failed = True
        elif self._anthropic:
            self._anthropic_event(event)
        else:
            self._chat_event(event)

    def _anthropic_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "message_stop":
            self.done = True
        elif kind == "error":
            self.failed = True
        elif kind == "content_block_start":
            block = event.get("content_block")
            if isinstance(block, dict):
                self._blocks[_index(event)] = dict(block)
        elif kind == "content_block_delta":
            delta = event.get("delta")
            block = self._blocks.get(_index(event))
            if isinstance(delta, dict) and block is not None:
                self._delta(_index(event), block, delta)

    def _delta(self, index: int, block: dict[str, Any], delta: dict[str, Any]) -> None:
        kind = delta.get("type")
        if kind == "input_json_delta":
            self._inputs.setdefault(index, []).append(str(delta.get("partial_json", "")))
            return
        field = {"text_delta": "text", "thinking_delta": "thinking"}.get(str(kind))
        field = field or ("signature" if kind == "signature_delta" else None)
        if field is not None:
            del block  # its text is joined in `_made`
            self._texts.setdefault((index, field), []).append(str(delta.get(field, "")))

    def _chat_event(self, event: dict[str, Any]) -> None:
        if "error" in event:
            self.failed = True
            return
        for choice in event.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                continue
            if isinstance(delta.get("content"), str):
                self._content.append(delta["content"])
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    self._call(call)

    def _call(self, call: dict[str, Any]) -> None:
        index = call.get("index", 0)
        # its name's and arguments' pieces, joined once in `_made` (adding each piece to
        # the name so far made a stream of name pieces cost its length squared)
        made = self._calls.setdefault(
            index if isinstance(index, int) else 0, {"name": [], "arguments": []}
        )
        for field in ("id", "type"):
            if isinstance(call.get(field), str):
                made[field] = call[field]
        function = call.get("function")
        if isinstance(function, dict):
            if isinstance(function.get("name"), str):
                made["name"].append(function["name"])
            if isinstance(function.get("arguments"), str):
                made["arguments"].append(function["arguments"])

    def _made(self) -> bytes:
        if self._anthropic:
            blocks = []
            streamed = []
            for index in sorted(self._blocks):
                block = dict(self._blocks[index])  # as it started: `answer` reads it again
                for field in ("text", "thinking", "signature"):
                    if (pieces := self._texts.get((index, field))) is not None:
                        block[field] = str(block.get(field) or "") + "".join(pieces)
                if index in self._inputs:
                    text = "".join(self._inputs[index])
                    streamed.append(text)
                    block["input"] = json.loads(text) if text.strip() else {}
                blocks.append(block)
            message: dict[str, Any] = {"role": "assistant", "content": blocks}
        else:
            calls = []
            streamed = []
            for index in sorted(self._calls):
                made = self._calls[index]
                arguments = "".join(made["arguments"])
                streamed.append(arguments)
                function = {"name": "".join(made["name"]), "arguments": arguments}
                calls.append({"id": made.get("id", ""), "type": "function", "function": function})
            content = "".join(self._content) if self._content or not calls else None
            message = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = calls
        parts = [_compact(message), *streamed]
        return "\n".join(parts).encode("utf-8", "surrogatepass")


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _index(event: dict[str, Any]) -> int:
    index = event.get("index", 0)
    return index if isinstance(index, int) else 0
