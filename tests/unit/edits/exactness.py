"""Conversations as clients write them and streams as providers send them, for the
exactness properties of Responses and Gemini edits (`test_answer_exactness`): JSON writers
(compact, spaced, pretty, ASCII-only, and odd: escapes of every kind, keys reordered and
repeated, numbers as written), request bodies that know where each item lies, streams
tapped as sender and receiver tap them, one turn through an editor to the oracle with every
attempt kept, and the checks of a turn (restored byte for byte; only the model's items
after the base's against the answer; a receiver holding other bytes refusing)."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from tests.unit.edits.oracle import Answer, Registry
from tests.unit.json_texts import NUMBERS, J, write
from toolref.edits import copies, isolated, wire
from toolref.edits.answer import tap_for
from toolref.edits.edit import Keep, Named
from toolref.kit.varints import read_varint
from toolref.sending.editor import DICTIONARY_MISMATCH, Edit, Editor

RESPONSES: Final = "/v1/responses"
GEMINI: Final = "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
EVENT_STREAM: Final = [("content-type", "text/event-stream")]
HEADERS: Final = [("content-type", "application/json"), ("authorization", "Bearer k")]
# Responses items of the model's (`scanner.MODEL_ITEMS`), as the spec lists them
MODEL_TYPES: Final = frozenset(
    {
        "reasoning",
        "function_call",
        "custom_tool_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "computer_call",
        "web_search_call",
        "tool_search_call",
    }
)
INSTRUCTIONS: Final = "You are a coding agent running in a terminal. Be precise. " * 12
SURROGATE: Final = re.compile("[\ud800-\udfff]")
WRITERS: Final = ("compact", "spaced", "pretty", "ascii", "odd")

# --- JSON as clients write it --------------------------------------------------------------


def _escaped_surrogates(text: str) -> str:
    """A lone surrogate as the escape a UTF-8 writer must use for it."""
    return SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


# the first of a repeated `type` or `role` (a parser keeps the last): another's, or the model's
JUNK: Final = ("junk", "function_call", "reasoning", "assistant", "model", "user", "message",
               "function_call_output")  # fmt: skip


def as_j(value: Any, rnd: random.Random, numbers: tuple[str, ...] = NUMBERS) -> J:
    """`value` as a tree `json_texts.write` spells: members in an odd order now and then
    (never `type`'s meaning changed), a repeated key whose first value is junk (a parser
    keeps the last), a number member spelled oddly."""
    if isinstance(value, dict):
        members = [(key, as_j(item, rnd, numbers)) for key, item in value.items()]
        if len(members) > 1 and rnd.random() < 0.3:
            rnd.shuffle(members)
        if members and rnd.random() < 0.3:
            key = rnd.choice(members)[0]
            at = next(n for n, (k, _) in enumerate(members) if k == key)
            junk = rnd.choice(JUNK) if key in ("type", "role") else "junk"
            members.insert(at, (key, ("str", junk)))
        if rnd.random() < 0.2:
            members.insert(rnd.randrange(len(members) + 1), ("x", ("num", rnd.choice(numbers))))
        return ("obj", members)
    if isinstance(value, list):
        return ("arr", [as_j(item, rnd, numbers) for item in value])
    if isinstance(value, str):
        return ("str", value)
    if value is None or isinstance(value, bool):
        return ("lit", json.dumps(value))
    return ("num", json.dumps(value))


def written(value: Any, how: str, seed: int, numbers: tuple[str, ...] = NUMBERS) -> str:
    """`value` as JSON text, the way of writer `how` (`seed`: the odd writer's choices)."""
    if how == "compact":
        return _escaped_surrogates(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    if how == "spaced":
        return _escaped_surrogates(json.dumps(value, ensure_ascii=False))
    if how == "pretty":
        return _escaped_surrogates(json.dumps(value, ensure_ascii=False, indent=2))
    if how == "ascii":
        return json.dumps(value, separators=(",", ":"))
    rnd = random.Random(seed)
    return write(as_j(value, rnd, numbers), rnd)


@dataclass(frozen=True)
class Spelled:
    """An item of the messages list, spelled (`text`), and what a parser makes of it."""

    text: str
    value: Any


def spelled(value: Any, how: str, seed: int) -> Spelled:
    text = written(value, how, seed)
    return Spelled(text, json.loads(text))


@dataclass(frozen=True)
class Request:
    """A request body and where each item of its messages list lies in it (bytes)."""

    body: bytes
    spans: list[tuple[int, int]]
    values: list[Any]


def request(key: str, items: list[Spelled], how: str, seed: int, extra: dict[str, Any]) -> Request:
    """The body: `extra`'s members around the messages list, spelled the way of `how`."""
    rnd = random.Random(seed)
    space = rnd.choice(["", " ", "\n  ", "\t", "\r\n"]) if how in ("pretty", "odd") else ""
    members = [
        (name, written(value, how, seed + n)) for n, (name, value) in enumerate(extra.items())
    ]
    members.insert(rnd.randrange(len(members) + 1), (key, ""))
    pieces: list[bytes] = [b"{" + space.encode()]
    spans: list[tuple[int, int]] = []
    at = len(pieces[0])
    for n, (name, text) in enumerate(members):
        head = ("," + space if n else "") + json.dumps(name) + ":" + space
        if name != key:
            pieces.append((head + text).encode())
            at += len(pieces[-1])
            continue
        pieces.append((head + "[").encode())
        at += len(pieces[-1])
        for m, item in enumerate(items):
            sep = ("," + space if m else space).encode()
            data = item.text.encode()
            pieces += [sep, data]
            spans.append((at + len(sep), at + len(sep) + len(data)))
            at += len(sep) + len(data)
        pieces.append((space + "]").encode())
        at += len(pieces[-1])
    pieces.append((space + "}" + rnd.choice(["", "\n"])).encode())
    return Request(b"".join(pieces), spans, [item.value for item in items])


# --- streams, tapped -----------------------------------------------------------------------


def sse_lines(data: str) -> bytes:
    """One event whose data is `data` (any JSON text): a `data:` line per line of it."""
    lines = re.split("\r\n|\r|\n", data)
    return b"".join(b"data: " + line.encode() + b"\n" for line in lines) + b"\n"


# numbers a provider writes (no float past a double's range, which a parser makes infinite)
FINITE: Final = tuple(n for n in NUMBERS if n != "1E400")


def events_stream(events: list[Any], how: str, seed: int) -> bytes:
    return b"".join(sse_lines(written(e, how, seed + n, FINITE)) for n, e in enumerate(events))


def read_events(stream: bytes) -> list[Any]:
    """The events of a stream as an agent parses them (each event's data lines joined)."""
    found = []
    for event in re.split(rb"\r?\n\r?\n|\r\r", stream):
        lines = [line[5:] for line in re.split(rb"\r\n|\r|\n", event) if line.startswith(b"data:")]
        lines = [line[1:] if line.startswith(b" ") else line for line in lines]
        if lines and b"\n".join(lines).strip() != b"[DONE]":
            found.append(json.loads(b"\n".join(lines)))
    return found


def tapped(path: str, data: bytes, cuts: list[int], version: int | None) -> bytes | None:
    tap = tap_for(path, 200, EVENT_STREAM, version)
    assert tap is not None
    at = 0
    for size in [*cuts, len(data)]:
        if tap.feed(data[at : at + size]):
            return tap.answer
        at += size
    return tap.answer


# --- the turns -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    """One attempt: the edit, the registry's answer to it."""

    edit: Edit
    answer: Answer


def send(editor: Editor, registry: Registry, body: bytes, key: str) -> list[Sent]:
    edit = editor.prepare(HEADERS, body, key)
    assert edit is not None
    attempts: list[Sent] = []
    while True:
        answer = registry.answer(edit.body, edit.cut.secrets)
        attempts.append(Sent(edit, answer))
        if answer.status == 200:
            editor.confirm(edit, answer.history)
            return attempts
        following = editor.on_miss(edit, answer.status, answer.problem)
        assert following is not None, answer
        edit = following


def against_answer(body: bytes) -> tuple[wire.Header, list[int]]:
    """The edit's header, and the segments of the request (by index) its records of kind 3
    or 8 (against the answer) carry: the records walked, kind by kind (`isolated`'s layout)."""
    header, blob = wire.read(body, 1 << 30)
    lengths = header.lengths
    inline: list[int] = []
    at = index = 0
    while index < len(lengths):
        mode = blob[at]
        at += 1
        if mode == isolated.RAW:
            at += lengths[index]
            index += 1
            continue
        count: int | None = 1
        if mode in (isolated.JOINED, isolated.BROTLI_JOINED):
            count, at = read_varint(blob, at)
        assert count is not None
        size, at = read_varint(blob, at)
        assert size is not None
        crc = mode in (isolated.BROTLI, isolated.BROTLI_JOINED)
        at += size + (isolated.CRC_BYTES if crc else 0)
        if mode in (isolated.ANSWER, copies.KIND):
            inline.append(index)
        index += count
    assert at == len(blob)
    placed: list[int] = []  # the request's segment of each inline op
    segment = 0
    for op in header.ops:
        if isinstance(op, Keep):
            segment += op.end - op.start
            continue
        if not isinstance(op, Named):
            placed.append(segment)
        segment += 1
    return header, [placed[n] for n in inline]


def check_turn(
    attempts: list[Sent],
    made: Request,
    counts: dict[str, int],
    model: Callable[[Any], bool],
    holds: bool,
    *,
    single: bool = False,
) -> None:
    """The turn's properties: restored byte for byte; a record of kind 3 only in the run of
    the model's items from the base's count; an edit naming an answer the receiver holds
    other bytes of (or none) refused, and the next attempt naming none."""
    last = attempts[-1].answer
    assert last.status == 200, last
    assert last.body == made.body
    if holds:  # sender and receiver hold the same answer: no miss
        assert len(attempts) == 1, [sent.answer for sent in attempts]
    for n, sent in enumerate(attempts):
        header, segments = against_answer(sent.edit.body)
        if header.answer is None:
            assert not segments
            continue
        assert header.base is not None
        if not holds:
            assert sent.answer.status == 400
            assert (sent.answer.problem or {}).get("type") == DICTIONARY_MISMATCH
            after = attempts[n + 1].edit.body
            assert wire.read(after, 1 << 30)[0].answer is None
        count = counts[header.base]
        offsets = [0]
        for data in sent.edit.cut.segments[1:]:
            offsets.append(offsets[-1] + len(data))
        for segment in segments:
            start, end = offsets[segment - 1], offsets[segment]
            owner = [k for k, (a, b) in enumerate(made.spans) if a <= start and end <= b]
            assert owner, (start, end, made.spans)
            assert owner[0] >= count
            assert all(model(made.values[k]) for k in range(count, owner[0] + 1))
            if single:  # other formats than Responses: the one message after the base's
                assert owner[0] == count


def answers(
    path: str, data: bytes, cuts: tuple[list[int], list[int]], other: str
) -> tuple[bytes | None, bytes | None]:
    """(the sender's answer, the receiver's): each tapped from the stream cut its own way;
    `other`: "same", "other" (the receiver holds other bytes), "none" (none)."""
    mine = tapped(path, data, cuts[0], wire.VERSION)
    theirs = tapped(path, data, cuts[1], None)
    assert mine == theirs
    if other == "other" and theirs is not None:
        theirs = theirs[:-1] + bytes([theirs[-1] ^ 1])
    return mine, None if other == "none" else theirs
