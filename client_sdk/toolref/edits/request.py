"""A request as a recipe: its segments (headers first), their entries and its ref; and the
request a recipe stands for, its headers and body restored byte for byte.

The registry hands a restored request to a receiver that fills the credentials itself
(`POST /v1/edits:apply`) as `REQUEST_MEDIA_TYPE`: segment 0 (its header lines, a
credential's name-only), an empty line, the body (`joined`, `split`).

Linear in the request: one cut (of what follows the prefix it shares with a body cut
before, `bodycut`), one SHA-256 per new segment, one over the framed entries, one join.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from toolref.edits.bodycut import cut_body, remember_ref
from toolref.edits.recipe import Entry, entry_of, framed, ref_of_framed
from toolref.edits.segments import header_lines, header_segment, restore_headers


@dataclass(frozen=True, slots=True)
class Cut:
    """A request cut: `segments` (the headers' first), their `entries`, the recipe's `ref`,
    the credentials that travel as real headers (`secrets`), the index in `segments` of
    each message's largest segment, what it says (`messages`), and of every segment of the
    model's own messages (`answered`: `segments.ANSWER_ROLES`). `splits`: for each segment
    of a message holding two or more tool results (Anthropic's `tool_result` blocks,
    Gemini's `functionResponse` parts) that holds where one starts or the last ends, those
    offsets in its bytes (`scanner._blocks`): a sender compresses the bytes between them
    each alone (`toolref.edits.isolated`). The segments are the same with or without.
    `items`: the numbers of the messages that are OpenAI Responses items of the model's
    (`scanner.MODEL_ITEMS`, an assistant `message` item), whose segments are in `answered`:
    an answer's output items, written back in order (`editor._rendering`)."""

    segments: list[bytes]
    entries: list[Entry]
    ref: str
    secrets: list[tuple[str, str]]
    messages: Sequence[int] = ()
    answered: frozenset[int] = frozenset()  # the segments of the model's own messages
    owners: Sequence[int] = ()  # the long window: each segment's message number (-1: none)
    # The recipe of the body this one was cut on from (`bodycut`), and how many segments
    # after the headers' are its, the same entries at the same places (`same_bytes` bytes).
    resumed: str | None = None
    same: int = 0
    size: int = 0  # the segments' bytes (`cut` counts them: the headers' and the body's)
    same_bytes: int = 0
    splits: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    items: frozenset[int] = frozenset()  # message numbers

    @property
    def body(self) -> bytes:
        return b"".join(self.segments[1:])


def cut(
    headers: Iterable[tuple[str, str]],
    body: bytes,
    messages_key: str | None,
    *,
    window: bool = False,
) -> Cut | None:
    """The recipe of a request whose body is one JSON object in UTF-8; None otherwise (such
    a request is sent as it is). `window`: long messages cut again at content-defined
    places (`scanner`), each segment's message in `Cut.owners`."""
    made = cut_body(body, messages_key, window=window)
    if made is None:
        return None
    header, secrets = header_segment(headers)
    first = entry_of(header)
    made.parts[0], made.entries[0] = header, first  # the slot kept for them: no copy
    ref = ref_of_framed([framed(first), bytes(made.framed)])
    remember_ref(made, ref)
    return Cut(
        made.parts,
        made.entries,
        ref,
        secrets,
        made.messages,
        frozenset(made.answered),
        made.owners,
        made.before if made.reused else None,
        made.reused,
        len(header) + len(body),
        made.reused_bytes,
        dict(made.splits),
        frozenset(made.items),
    )


@dataclass(frozen=True, slots=True)
class Restored:
    """What a recipe stands for: the headers (credentials filled in) and the body."""

    headers: list[tuple[str, str]]
    body: bytes


def restore(
    segments: Sequence[bytes], secrets: Sequence[tuple[str, str]] | None
) -> Restored | None:
    """The request `segments` (a recipe's, in order) stand for; None when the first is not a
    headers segment these `secrets` fill. `secrets` None: the headers are only checked, and
    left out (a receiver that fills the credentials itself reads segment 0)."""
    if not segments:
        return None
    if secrets is None:
        return None if header_lines(segments[0]) is None else Restored([], b"".join(segments[1:]))
    headers = restore_headers(segments[0], secrets)
    if headers is None:
        return None
    return Restored(headers, b"".join(segments[1:]))


REQUEST_MEDIA_TYPE: Final = "application/vnd.toolref.request"


def joined(head: bytes, body: bytes) -> bytes:
    """A restored request as the registry answers it: segment 0, an empty line, the body."""
    return head + b"\r\n" + body


def split(content: bytes) -> tuple[bytes, bytes] | None:
    """(segment 0, body) of `joined`'s bytes; None when they hold no empty line. Segment 0's
    lines each end with CRLF and none is empty, so its end is the first empty line."""
    if content.startswith(b"\r\n"):
        return b"", content[2:]
    end = content.find(b"\r\n\r\n")
    if end < 0:
        return None
    return content[: end + 2], content[end + 4 :]
