"""What a client sends for one turn: the request body and headers, built without I/O.

With history refs the body carries only the messages after the longest history the server
has confirmed that is still a prefix of the conversation (an edited or truncated history
falls back to an earlier one, or to the whole conversation). When the server is known to
read zstd, those new messages travel compressed against the history itself, which both sides
can rebuild: the history's ref then goes in the `Toolref-History` header, as the name of
the dictionary. Both the dictionary and the body are the client's own JSON, which is what
the server holds and the backend gets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import zstandard

from toolref import compression, history
from toolref.encoding import JSON_TYPE, dumps_json
from toolref.formats import Format
from toolref.protocol import PROTOCOL_HEADER, PROTOCOL_REFS

COMPRESS_FROM: Final = 1024  # smaller whole bodies gain too little from plain zstd
LEVEL: Final = 3


@dataclass(frozen=True, slots=True)
class Upload:
    content: bytes
    headers: dict[str, str]
    continued: str | None  # the history ref the body continues
    head: str | None  # the ref the server should confirm for the whole conversation
    length: int  # messages in the whole conversation
    dictionary: bool  # compressed against the continued history


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
) -> Upload:
    """The upload for `turn`. `confirmed`: history ref -> length of every history the server
    confirmed. `keep`: ask the server to keep this conversation as a history (and continue
    one, when a confirmed one fits). `compress`: the server is known to read zstd."""
    headers = {PROTOCOL_HEADER: str(PROTOCOL_REFS), "Content-Type": JSON_TYPE}
    length = len(turn.messages)
    if not keep or turn.fmt is None or not turn.messages:
        return _whole(turn, headers, None, compress)
    headers[history.HISTORY_HEADER] = history.KEEP_HISTORY
    chain = turn.heads
    if chain is None:
        chain = history.heads(history.chain_form(turn.messages, turn.fmt, turn.refs))
    head = history.history_ref(chain[-1])
    candidates = list(confirmed.items())
    pick = history.longest_confirmed(chain, candidates)
    if pick < 0:
        return _whole(turn, headers, head, compress)
    ref, start = candidates[pick]
    rest = list(turn.outgoing[start:])
    if compress and use_dictionary:
        plain = dumps_json({**turn.body, turn.key: rest})
        if turn.dictionary is not None:
            dictionary = turn.dictionary(start)
        else:
            dictionary = history.dictionary(turn.messages[:start])
        window = dictionary[-history.COMPRESS_WINDOW :]
        packed = compression.compress(plain, window, history.DICTIONARY_LEVEL)
        headers[history.HISTORY_HEADER] = ref
        headers["Content-Encoding"] = "zstd"
        return Upload(packed, headers, ref, head, length, dictionary=True)
    content = dumps_json({**turn.body, "historyRef": ref, turn.key: rest})
    return Upload(content, headers, ref, head, length, dictionary=False)


def _whole(turn: Turn, headers: dict[str, str], head: str | None, compress: bool) -> Upload:
    content = dumps_json({**turn.body, turn.key: list(turn.outgoing)})
    if compress and len(content) >= COMPRESS_FROM:
        content = zstandard.ZstdCompressor(level=LEVEL).compress(content)
        headers["Content-Encoding"] = "zstd"
    return Upload(content, headers, None, head, len(turn.messages), dictionary=False)
