"""A WebSocket text message as an edit of the one before it on the connection, size-guarded
(`Toolref-Frames: 2`, `frames.EDIT`).

A Responses WebSocket message is one JSON object (`response.create`): it is cut as an LLM
request's body is (`toolref.edits.segments`, its items under `input`), and sent as an edit
of the connection's previous message (`toolref.edits.edit.diff`): the segments the previous
one held are kept ranges, every other one travels in a compression context of its own
(`toolref.edits.isolated`: as it is, or compressed alone). So no segment's size depends on
the bytes of another, as for HTTP edits (docs/reliability.md,
"Sizes"); compressing each message against the one before (`Toolref-Frames: 1`) let a text
an attacker placed in one turn be measured against a secret of the turn before.

The edit's header line names the previous message's recipe (`b`): a side whose previous
message differs refuses it (`DictionaryMismatchError`). A message that is not one JSON
object is one segment. Pure; linear in the message and the previous one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toolref.edits import wire
from toolref.edits.edit import Keep, Named, diff
from toolref.edits.recipe import Entry, entry_of, recipe_ref
from toolref.edits.segments import cut_body
from toolref.wire.errors import (
    DecompressedTooLargeError,
    DictionaryMismatchError,
    MalformedBodyError,
)

MESSAGES_KEY = "input"  # a response.create's conversation items


@dataclass
class Previous:
    """The connection's previous text message, as both sides keep it."""

    segments: list[bytes] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)

    @property
    def ref(self) -> str | None:
        return recipe_ref(self.entries) if self.entries else None

    def become(self, segments: list[bytes]) -> None:
        self.segments = segments
        self.entries = [entry_of(segment) for segment in segments]


def cut_message(raw: bytes) -> list[bytes]:
    """The segments of a text message's UTF-8 bytes (one, when it is not a JSON object)."""
    text = raw.decode()
    parts = cut_body(text, MESSAGES_KEY)
    if not parts:
        return [raw]
    return [part.encode() for part in parts]


def encode(previous: Previous, raw: bytes) -> bytes:
    """The edit of `raw` against `previous`, which then becomes `raw`'s."""
    segments = cut_message(raw)
    entries = [entry_of(segment) for segment in segments]
    ops = diff(previous.entries, entries, segments)
    body = wire.encode_isolated(previous.ref, ops)
    previous.segments, previous.entries = segments, entries
    return body


def decode(previous: Previous, body: bytes, limit: int) -> bytes:
    """The text message (UTF-8 bytes) the edit `body` stands for, at most `limit` bytes;
    `previous` then becomes it. Refused before anything is inflated or joined past the
    limit; a previous message that differs is a `DictionaryMismatchError`."""
    header, blob = wire.read(body, max_inline=limit)
    if header.base != previous.ref:
        raise DictionaryMismatchError(
            f"the message is an edit of {header.base}, and the previous message here is "
            f"{previous.ref}; send each message as an edit of the one before it on this "
            "connection (toolref.websocket.segmented.encode)"
        )
    if any(isinstance(op, Named) for op in header.ops):
        raise MalformedBodyError(
            "a WebSocket message's edit names a piece, which no connection holds; keep the "
            "previous message's segments or send them inline"
        )
    size = header.inline
    for op in header.ops:
        if isinstance(op, Keep):
            if op.end > len(previous.segments):
                raise MalformedBodyError(
                    f"the edit keeps segments {op.start} to {op.end} of a previous message of "
                    f"{len(previous.segments)}; compute it against the previous message"
                )
            size += sum(map(len, previous.segments[op.start : op.end]))
    if size > limit:
        raise DecompressedTooLargeError(
            f"the message is {size} bytes, over the limit of {limit}; send smaller messages",
            limit=limit,
        )
    inline = iter(wire.inline(header, blob, b"", None))
    segments: list[bytes] = []
    for op in header.ops:
        if isinstance(op, Keep):
            segments += previous.segments[op.start : op.end]
        else:
            segments.append(next(inline))
    previous.become(segments)
    return b"".join(segments)
