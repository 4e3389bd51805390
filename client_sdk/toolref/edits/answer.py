"""The answer a turn streamed, as the next turn's dictionary (issue 39).

The agent writes the model's answer back into its next request as an assistant message; the
gateway streamed that very answer to it one turn before. Relay and gateway (or the SDK and
the middleware's registry) both read the stream as it passes (`AnswerTap`) and assemble the
same bytes from it, with nothing exchanged: the answer as one assistant message in its
API's own JSON (`{"role":"assistant","content":[...]}` for Anthropic Messages; for OpenAI
Chat its `content`, its `refusal` when it streamed one, and `tool_calls`, each a function
call or a freeform one, `{"type":"custom","custom":{"name":..,"input":..}}`), every string as
the model wrote it (the halves of a surrogate pair one character, as JS holds them), tool
inputs compact, then each tool input (a call's arguments or input) as the model streamed it.
A shape no answer is made of (a piece of text that is no string, a call both a function and
a custom one, event data not UTF-8): no answer, as in answer.ts. A version-3 edit
compresses the assistant segments it carries against those bytes (`toolref.edits.isolated`,
record kind 3) and names them by `answer_id`; a receiver that holds other bytes, or none,
refuses the edit (400 `dictionary-mismatch`) and the sender sends it again without.
OpenAI Responses and Gemini answers (their output items, the model's parts, as Codex CLI
and Gemini CLI write them back) are read by `toolref.edits.answer_items`.

Only a whole answer is one: a stream with a 200, `text/event-stream` and no
`Content-Encoding`, of an API read here, seen to its end event (`message_stop`,
`data: [DONE]`) within `MAX_STREAM` bytes and making at most `MAX_ANSWER` bytes. A stream
cut short, an error event, anything else: no answer, and the next edit is what it would
have been without. Pure and incremental: linear in the stream, one JSON parse per event.

What a tap holds is bounded by `MAX_ANSWER`, not `MAX_STREAM`: it counts the bytes it holds
that are certain to be in the answer (`_size` of each text, thinking, signature, refusal and
content piece and each tool input piece, a tool call's arguments twice, as the answer holds
them twice; each block's bytes as it started, its input left out, and a comma; 59 for each
tool call), and once they pass `MAX_ANSWER` the answer can only be longer: the tap gives up
then (`failed`, all it held dropped), at the same event as answer.ts (which counts the same).
The count is a lower bound, never more than the answer makes: escapes only add bytes, a
block or a call only grows (but a block started again smaller at its index, which no API
streams), and a surrogate counts 2 (3 in `surrogatepass`; the two halves of a pair make one
character of 4). Lines that make nothing (blank lines with no event pending, comments,
`event:` lines) are stepped over by `bytes.find`, not read one by one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any, Final

from toolref.edits.answer_items import SURROGATE as _SURROGATE
from toolref.edits.answer_items import GeminiAnswer, ResponsesAnswer
from toolref.edits.answer_items import size as _size
from toolref.wire.encoding import media_type
from toolref.wire.endpoints import endpoint

MAX_ANSWER: Final = 256 << 10  # bytes of an answer's dictionary; a longer one is none
MAX_STREAM: Final = 8 << 20  # bytes of stream read for one; a longer stream gives none
ID_LENGTH: Final = 16  # hex digits of SHA-256 naming an answer (`answer_id`)
FORMATS: Final = frozenset({"anthropic", "openai-chat", "openai-responses", "gemini"})
# The edits version from which a receiver keeps a format's answers (`wire.VERSION` 6: those
# of Responses and Gemini); below it a sender taps none of them (its dictionary would be
# bytes the receiver does not hold: a `dictionary-mismatch` and a resend every turn).
SINCE: Final = {"openai-responses": 6, "gemini": 6}
_EVENT_STREAM: Final = "text/event-stream"
_BOM: Final = b"\xef\xbb\xbf"
# bytes a tool call makes at least: the lesser of a function call's `{"id":"","type":"function",
# "function":{"name":"","arguments":""}}` (65) and a custom one's `{"id":"","type":"custom",
# "custom":{"name":"","input":""}}` (57), a comma (or the message's `]`) and the line end
# before its arguments
_CALL: Final = 59
# a Chat tool call's kind -> the field of its object that its text streams in
_CALL_TEXT: Final = {"function": "arguments", "custom": "input"}


def answer_id(answer: bytes) -> str:
    """The name of an answer's bytes in an edit (`"a"`): hex of their SHA-256, cut."""
    return hashlib.sha256(answer).hexdigest()[:ID_LENGTH]


def tap_for(
    path: str, status: int, headers: Iterable[tuple[str, str]], version: int | None = None
) -> AnswerTap | None:
    """A tap for the answer to `POST path` with this status and these headers, or None
    when it cannot be one (see the module docstring). `version`: a sender's, the edits
    version its receiver reads, below which that receiver keeps no answer of the format
    (`SINCE`); None: a receiver's, every format."""
    found = endpoint("POST", path)
    if status != 200 or found is None or found.format not in FORMATS:
        return None
    if version is not None and version < SINCE.get(found.format, 0):
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
        # OpenAI Responses' and Gemini's answers (`toolref.edits.answer_items`)
        self._items: ResponsesAnswer | GeminiAnswer | None = None
        if fmt in ("openai-responses", "gemini"):
            reader = ResponsesAnswer if fmt == "openai-responses" else GeminiAnswer
            self._items = reader(self._hold)
        self._chat = not self._anthropic and self._items is None  # any other: Chat's
        self._begun = False  # a first byte that is no BOM's read (or a BOM dropped)
        self._head = b""  # the first bytes while they may yet be a BOM
        self._cr = False  # the last piece ended with CR: an LF first in the next ends nothing
        self._line = bytearray()
        self._data: list[bytes] = []
        self._read = 0
        self._blocks: dict[int, dict[str, Any]] = {}
        self._started: dict[int, int] = {}  # block -> the bytes held for it as it started
        self._inputs: dict[int, list[str]] = {}  # tool_use block -> its input's pieces
        # (block, field) -> the pieces its deltas streamed, joined once at the end: adding
        # each to the block's string made a long answer's tap quadratic
        self._texts: dict[tuple[int, str], list[str]] = {}
        self._content: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        # a value the answer cannot be made of as answer.ts makes it (a piece of text that is
        # no string, a call both a function and a custom one): the stream is read on, no answer
        self._odd = False
        self._held = 0  # bytes held that are certain to be in the answer (module docstring)
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
                self._drop()
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
            text = b"".join((b"\n", self._line, view[start : last + 1]))
            self._line = bytearray(view[last + 1 :])
            self._cr = view.endswith(b"\r")
            if b"\r" in text:  # CRLF and CR as LF: the same lines (no line holds either)
                text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            self._lines_read(text)
        if len(data) > room and not self.done:
            self.failed = True  # the answer's end not within MAX_STREAM bytes
        if self.failed:
            self._drop()
        return self.done and not self.failed

    @property
    def answer(self) -> bytes | None:
        """The answer's bytes (module docstring); None unless the stream ended whole."""
        if not self.done or self.failed or self._odd:
            return None
        try:
            made = self._made()
        except (TypeError, ValueError, RecursionError):  # shaped like no answer, or a tool
            return None  # input nested past the parser: none, never raised into the stream
        return made if len(made) <= MAX_ANSWER else None

    def _lines_read(self, text: bytes) -> None:
        """Reads the lines of `text`: an LF, then lines each ended by LF. Only `data:` lines and
        the blank line that ends an event with data are read one by one; the lines between them
        (blank lines with no event pending, comments, `event:` lines: nothing in SSE's reading)
        are stepped over by `bytes.find`, at C speed (a Python call for each of a flood of
        blank lines cost ~1 s per 8 MiB). Each find starts where the last one it found was
        passed: O(len(text))."""
        at = 0  # text[at] is the LF before the next line to read
        data = blank = -2  # the LF before the next data line / blank line; -1: none left
        while not (self.done or self.failed):
            if -1 < data < at or data == -2:
                data = text.find(b"\ndata:", at)
            if self._data and (-1 < blank < at or blank == -2):
                blank = text.find(b"\n\n", at)
            if self._data and blank != -1 and (data == -1 or blank < data):
                joined, self._data = b"\n".join(self._data), []
                at = blank + 1
                self._event(joined)
            elif data != -1:
                end = text.index(b"\n", data + 1)
                value = text[data + 6 : end]
                self._data.append(value[1:] if value.startswith(b" ") else value)
                at = end
            else:
                return

    def _hold(self, size: int) -> None:
        """Counts `size` more bytes certain to be in the answer: past MAX_ANSWER, none."""
        self._held += size
        if self._held > MAX_ANSWER:
            self.failed = True

    def _drop(self) -> None:
        """All a tap that failed held (it never makes an answer)."""
        self._line, self._data, self._head = bytearray(), [], b""
        self._blocks, self._inputs, self._texts, self._started = {}, {}, {}, {}
        self._content, self._refusal, self._calls = [], [], {}
        if self._items is not None:
            self._items.drop()

    def _event(self, data: bytes) -> None:
        if self._chat and data.strip() == b"[DONE]":
            self.done = True
            return
        try:  # read as answer.ts reads it: UTF-8 only (json.loads also takes UTF-16 and -32)
            text = data[len(_BOM) :] if data.startswith(_BOM) else data
            self._event_read(json.loads(text.decode("utf-8", "surrogatepass")))
        except (TypeError, ValueError, RecursionError):
            # nested past the parser, or shaped like no event of an answer (`"choices": 1`):
            # not an answer we read, and nothing raised into the way of the stream
            self.failed = True

    def _event_read(self, event: Any) -> None:
        if not isinstance(event, dict):
            self.failed = True
        elif self._anthropic:
            self._anthropic_event(event)
        elif self._items is not None:
            self._items.event(event)
            self.done, self.failed = self._items.done, self.failed or self._items.failed
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
                index = _index(event)
                # its bytes as it started, but its input (the streamed one replaces it), and a
                # comma (or the message's `]`); started again at its index, only what it adds
                size = _size(_compact({k: v for k, v in block.items() if k != "input"})) + 1
                if size > (counted := self._started.get(index, 0)):
                    self._started[index] = size
                    self._hold(size - counted)
                self._blocks[index] = dict(block)
        elif kind == "content_block_delta":
            delta = event.get("delta")
            block = self._blocks.get(_index(event))
            if isinstance(delta, dict) and block is not None:
                self._delta(_index(event), block, delta)

    def _delta(self, index: int, block: dict[str, Any], delta: dict[str, Any]) -> None:
        kind = delta.get("type")
        if kind == "input_json_delta":
            piece = delta.get("partial_json", "")
            if not isinstance(piece, str):
                self._odd = True  # no answer is made of it (answer.ts alike)
                return
            self._inputs.setdefault(index, []).append(piece)
            self._hold(_size(piece))  # as streamed, after the message
            return
        field = {"text_delta": "text", "thinking_delta": "thinking"}.get(str(kind))
        field = field or ("signature" if kind == "signature_delta" else None)
        if field is not None:
            del block  # its text is joined in `_made`
            piece = delta.get(field, "")
            if not isinstance(piece, str):
                self._odd = True
                return
            self._texts.setdefault((index, field), []).append(piece)
            self._hold(_size(piece))

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
                self._hold(_size(delta["content"]))
            if isinstance(delta.get("refusal"), str):  # written back as the message's refusal
                self._refusal.append(delta["refusal"])
                self._hold(_size(delta["refusal"]))
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    self._call(call)

    def _call(self, call: dict[str, Any]) -> None:
        index = call.get("index", 0)
        # its name's and arguments' pieces, joined once in `_made` (adding each piece to
        # the name so far made a stream of name pieces cost its length squared)
        index = index if isinstance(index, int) else 0
        if index not in self._calls:
            self._hold(_CALL)
        made = self._calls.setdefault(index, {"name": [], "arguments": []})
        if isinstance(call.get("id"), str):
            made["id"] = call["id"]
        typed = call.get("type")  # another type, or none: as before, a function call
        for kind, field in _CALL_TEXT.items():  # a function call, or a freeform one (`custom`)
            spec = call.get(kind)
            if not (isinstance(spec, dict) or typed == kind):
                continue
            if made.setdefault("kind", kind) != kind:
                self._odd = True  # both: not a call the agent writes back
            if not isinstance(spec, dict):
                continue
            if isinstance(spec.get("name"), str):
                made["name"].append(spec["name"])
                self._hold(_size(spec["name"]))
            if isinstance(spec.get(field), str):
                made["arguments"].append(spec[field])
                self._hold(2 * _size(spec[field]))  # in the message, then as streamed

    def _made(self) -> bytes:
        if self._items is not None:
            return _encoded(self._items.made())
        if self._anthropic:
            blocks = []
            streamed = []
            for index in sorted(self._blocks):
                block = dict(self._blocks[index])  # as it started: `answer` reads it again
                for field in ("text", "thinking", "signature"):
                    if (pieces := self._texts.get((index, field))) is not None:
                        before = block.get(field) or ""
                        if not isinstance(before, str):  # no answer (answer.ts alike)
                            raise TypeError(f"a block's {field} is no string: {before!r}")
                        block[field] = before + "".join(pieces)
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
                kind = made.get("kind", "function")
                spec = {"name": "".join(made["name"]), _CALL_TEXT[kind]: arguments}
                calls.append({"id": made.get("id", ""), "type": kind, kind: spec})
            plain = not calls and not self._refusal
            content = "".join(self._content) if self._content or plain else None
            message = {"role": "assistant", "content": content}
            if self._refusal:
                message["refusal"] = "".join(self._refusal)
            if calls:
                message["tool_calls"] = calls
        return _encoded("\n".join([_compact(message), *streamed]))


def _encoded(text: str) -> bytes:
    """`text` as the answer's bytes: the halves of a surrogate pair one character, as JS holds
    them, a lone one as `surrogatepass` writes it."""
    if _SURROGATE.search(text):
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return text.encode("utf-8", "surrogatepass")


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _index(event: dict[str, Any]) -> int:
    index = event.get("index", 0)
    return index if isinstance(index, int) else 0
