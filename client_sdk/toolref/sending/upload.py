"""What a client sends for one turn: the request body and headers, built without I/O.

With history refs the body carries only the messages after the longest history the server
has confirmed that is still a prefix of the conversation (an edited or truncated history
falls back to an earlier one, or to the whole conversation). When the server is known to
read zstd, those new messages travel compressed against the history itself, which both sides
can rebuild: the history's ref then goes in the `Toolref-History` header, as the name of
the dictionary. Both the dictionary and the body are the client's own JSON, which is what
the server holds and the backend gets.

A server that says it keeps the body of the request it confirmed a history for
(`Toolref-Dictionary` in its answer) lets the next body be compressed against that body too
(`history.primed`): what travels again every turn around the messages (`tools`, a system
prompt) then costs a few bytes, and so does a conversation resent whole because its last
message changed (Claude Code moves its `cache_control` mark every turn).

A body is compressed only against what the same conversation sent before (its
`history.opening`): a kept body is used only for the conversation it was kept from, never
another's. Compressed against another conversation's body, a body's size would say how
much of it that conversation holds, and a sender who sees the size (`Toolref-Savings`)
could recover it a guess at a time (CRIME).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import zstandard

from toolref import history
from toolref.formats import Format
from toolref.wire import compression
from toolref.wire.encoding import JSON_TYPE, dumps_json
from toolref.wire.headers import (
    CHECKPOINT_HEADER,
    DICTIONARY_HEADER,
    HISTORY_HEADER,
    KEEP_HISTORY,
    PROTOCOL_HEADER,
)
from toolref.wire.protocol import PROTOCOL_REFS

COMPRESS_FROM: Final = 1024
# A body is compressed against at most this many bytes of its dictionary's end per byte of
# it (and at least `_MIN_REACH`): loading a dictionary costs time in its size, and a small
# body finds its matches near the end. The server decompresses with the whole dictionary,
# which ends in the same bytes: a frame's matches reach back the same distances.
_REACH_PER_BYTE: Final = 32
_MIN_REACH: Final = 32 << 10  # smaller whole bodies gain too little from plain zstd
LEVEL: Final = 3


@dataclass(frozen=True, slots=True)
class Upload:
    content: bytes
    headers: dict[str, str]
    continued: str | None  # the history ref the body continues
    head: str | None  # the ref the server should confirm for the whole conversation
    length: int  # messages in the whole conversation
    dictionary: bool  # compressed against a history's dictionary
    text: bytes = b""  # the body before compression
    prior: str | None = None  # the history whose primed dictionary was used
    first: bytes | None = None  # `history.opening`: which conversation
    chain: Sequence[bytes] = ()  # the chain heads of the whole conversation
    rewound: bool = False  # a history of this conversation was confirmed, but is no prefix


@dataclass(frozen=True, slots=True)
class Prior:
    """The body of the request a history was confirmed for (its last `DICTIONARY_LIMIT`
    bytes, as sent, uncompressed), which the server said it keeps for that history."""

    first: bytes  # its conversation's `history.opening`
    body: bytes


@dataclass(frozen=True, slots=True)
class Turn:
    """The parts of a request the upload is built from."""

    body: Mapping[str, Any]  # the request body as the caller gave it
    key: str  # where the messages sit in it
    messages: list[Any]  # the conversation as the client holds it
    outgoing: Sequence[Any]  # the same with tool refs where the server holds the payloads
    fmt: Format | None  # None when the messages could not be read (sent as they are)
    refs: Mapping[str, str] | None = None  # pair key -> ref of every complete invocation
    # What a caller that keeps its conversations' transcripts has already computed: the
    # chain heads of the messages, and the dictionary of their first n.
    heads: Sequence[bytes] | None = None
    dictionary: Callable[[int], bytes] | None = None


def prepare(
    turn: Turn,
    confirmed: Mapping[str, int],
    *,
    keep: bool,
    compress: bool,
    use_dictionary: bool = True,
    priors: Mapping[str, Prior] | None = None,
    checkpoint: bool = False,
    openings: Mapping[str, bytes] | None = None,
) -> Upload:
    """The upload for `turn`. `confirmed`: history ref -> length of every history the server
    confirmed. `keep`: ask the server to keep this conversation as a history (and continue
    one, when a confirmed one fits). `compress`: the server is known to read zstd.
    `priors`: history ref -> the body the server keeps for it (least recent first).
    `checkpoint`: ask the server to keep the conversation's checkpoint too (asked anyway
    when a history of this conversation is no prefix of it: its last message changed).
    `openings`: history ref -> its `history.opening` (which conversation). A prior body is
    used only for its own conversation."""
    headers = {PROTOCOL_HEADER: str(PROTOCOL_REFS), "Content-Type": JSON_TYPE}
    priors = priors if use_dictionary and priors is not None else {}
    length = len(turn.messages)
    if not keep or turn.fmt is None or not turn.messages:
        return _whole(turn, headers, None, compress)
    headers[HISTORY_HEADER] = KEEP_HISTORY
    chain = turn.heads
    if chain is None:
        chain = history.heads(history.chain_form(turn.messages, turn.fmt, turn.refs))
    head = history.history_ref(chain[-1])
    first = history.opening(turn.messages, turn.fmt, chain)
    candidates = list(confirmed.items())
    pick = history.longest_confirmed(chain, candidates)
    if pick < 0:
        same = _same_conversation(priors, first)
        rewound = openings is not None and any(openings.get(ref) == first for ref in confirmed)
        if checkpoint or rewound:
            headers[CHECKPOINT_HEADER] = KEEP_HISTORY
        whole = _whole(turn, headers, head, compress, prior=same, first=first)
        return dataclasses.replace(whole, chain=chain, rewound=rewound)
    if checkpoint:
        headers[CHECKPOINT_HEADER] = KEEP_HISTORY
    ref, start = candidates[pick]
    rest = list(turn.outgoing[start:])
    if compress and use_dictionary:
        plain = dumps_json({**turn.body, turn.key: rest})
        if turn.dictionary is not None:
            dictionary = turn.dictionary(start)
        else:
            dictionary = history.dictionary(turn.messages[:start])
        window = dictionary[-history.COMPRESS_WINDOW :]
        prior = priors.get(ref)
        if prior is not None and prior.first != first:
            # A short history (a system prompt alone) is a prefix of other conversations
            # too: the body kept with it is its own conversation's, never another's.
            prior = None
        if prior is not None:
            window = history.primed(window, prior.body)
            headers[DICTIONARY_HEADER] = ref
        packed = compression.compress(
            plain, window[-_reach(len(plain)) :], history.DICTIONARY_LEVEL
        )
        headers[HISTORY_HEADER] = ref
        headers["Content-Encoding"] = "zstd"
        named = ref if prior is not None else None
        return Upload(packed, headers, ref, head, length, True, plain, named, first, chain)
    content = dumps_json({**turn.body, "historyRef": ref, turn.key: rest})
    return Upload(content, headers, ref, head, length, False, content, None, first, chain)


def _same_conversation(priors: Mapping[str, Prior], first: bytes) -> tuple[str, Prior] | None:
    """The most recent prior of this conversation (its `history.opening` is `first`): one
    confirmed before its last message changed, most likely; None when it has none. Never
    another conversation's: compressed against it, this body's size would tell how much of
    it that conversation holds (see the module docstring)."""
    newest_first = reversed(list(priors.items()))
    return next(((ref, p) for ref, p in newest_first if p.first == first), None)


def _whole(
    turn: Turn,
    headers: dict[str, str],
    head: str | None,
    compress: bool,
    *,
    prior: tuple[str, Prior] | None = None,
    first: bytes | None = None,
) -> Upload:
    text = dumps_json({**turn.body, turn.key: list(turn.outgoing)})
    content, named = text, None
    if compress and prior is not None:
        # The prior body is a tail of its history's primed dictionary, so the frame decodes
        # with the whole of it.
        named = prior[0]
        content = compression.compress(text, prior[1].body, history.DICTIONARY_LEVEL)
        headers[DICTIONARY_HEADER] = named
        headers["Content-Encoding"] = "zstd"
    elif compress and len(text) >= COMPRESS_FROM:
        content = zstandard.ZstdCompressor(level=LEVEL).compress(text)
        headers["Content-Encoding"] = "zstd"
    return Upload(
        content, headers, None, head, len(turn.messages), named is not None, text, named, first
    )


def _reach(size: int) -> int:
    """How much of the dictionary's end a body of `size` bytes is compressed against."""
    return max(_MIN_REACH, _REACH_PER_BYTE * size)
