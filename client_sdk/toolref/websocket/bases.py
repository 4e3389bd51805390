"""Bases named by stream on a channel (issue 39: what a conversation repeats goes once per
channel): an edit's base travels as how many streams back the turn that made it went, one
byte, where its 16-byte id stood.

Every turn's edit names its base, mostly the recipe the conversation's turn before made on
the same channel, whose id both sides read in that turn's answer head (`Toolref-History`,
status 200). The sender's side (`SenderBases`) remembers which stream made each such
recipe and, where the edit's base is one made within the last `MOST` streams, writes that
turn's frame with the base as `varint(back)` (the compact header's flags bit 2,
`toolref.edits.compact.by_stream`); the receiver's side (`ReceiverBases`) remembers which
recipe each stream's answer head named and writes the id back before the turn goes on
(`compact.with_base`): the app, the middleware and the registry read the edit the sender's
`Editor` wrote, byte for byte. Only edits (`Content-Type: application/vnd.toolref.edit`)
with a compact header and a base are so written.

Both remember the recipe an answer head named, by the same rule, from the same frame, so a
stream names one recipe on both sides: no base can be read as another. A receiver that has
forgotten the stream (it keeps the last `KEPT` heads, twice what a sender names: turns in
flight, at most `channel.MAX_STREAMS`, may reach it out of order) answers the turn busy,
nothing done with it, and the sender sends it over HTTP with the id (`Turn.unheld`). Each
side's memory is bounded (`KEPT` entries, about 60 bytes each) and lives as long as the
channel: a new channel starts with none (its first turn names its base by id). Asked for
by the sender on the upgrade (`HEADER: 1`) and granted by the receiver's answer; either
side without it (an older one) leaves every id as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from toolref.edits import compact
from toolref.edits.recipe import parse_recipe_ref
from toolref.edits.wire import MEDIA_TYPE
from toolref.wire.headers import HISTORY_HEADER

HEADER: Final = "toolref-channel-bases"
OFFER: Final = "1"
MOST: Final = 256  # streams back a sender names a base by stream at most
KEPT: Final = 2 * MOST  # answer heads' recipes a side remembers
_HISTORY: Final = HISTORY_HEADER.lower()
Pairs = Sequence[tuple[str, str]]


def granted(asked: str | None) -> bool:
    """Whether a receiver names bases by stream for a sender whose upgrade said `asked`."""
    return asked == OFFER


def kept(headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """Whether the receiver's answer to the upgrade (`headers`) grants bases by stream."""
    return any(n.lower() == HEADER.encode() and v == OFFER.encode() for n, v in headers)


def _made(status: int, headers: Pairs) -> bytes | None:
    """The id of the recipe an answer head (`status`, `headers`) says its turn made."""
    if status != 200:
        return None
    for name, value in headers:
        if name.lower() == _HISTORY:
            return parse_recipe_ref(value)
    return None


def _is_edit(headers: Pairs) -> bool:
    return any(
        name.lower() == "content-type" and value.split(";")[0].strip().lower() == MEDIA_TYPE
        for name, value in headers
    )


class SenderBases:
    """The sender's memory: the stream whose answer head named each recipe (at most
    `KEPT`)."""

    def __init__(self) -> None:
        self._streams: dict[bytes, int] = {}  # recipe id -> the stream that made it

    def made(self, stream: int, status: int, headers: Pairs) -> None:
        """Stream `stream`'s answer head came: the recipe it names remembered."""
        found = _made(status, headers)
        if found is not None:
            self._streams.pop(found, None)  # the latest stream, last in order
            self._streams[found] = stream
            if len(self._streams) > KEPT:
                del self._streams[next(iter(self._streams))]

    def written(self, stream: int, headers: Pairs, body: bytes) -> bytes:
        """`body` as stream `stream`'s frame carries it: an edit's base named by stream
        where one of the last `MOST` made it, else as it is. O(headers + body)."""
        base = compact.base_of(body)
        if base is None or (made := self._streams.get(base)) is None:
            return body
        back = stream - made
        if not 0 < back < MOST or not _is_edit(headers):
            return body
        return compact.by_stream(body, back)


class ReceiverBases:
    """The receiver's memory: the recipe each stream's answer head named (at most `KEPT`)."""

    def __init__(self) -> None:
        self._made: dict[int, bytes] = {}  # stream -> the id of the recipe it made

    def made(self, stream: int, status: int, headers: Pairs) -> None:
        """Stream `stream`'s answer head went out: the recipe it names remembered."""
        found = _made(status, headers)
        if found is not None:
            self._made[stream] = found
            if len(self._made) > KEPT:
                del self._made[next(iter(self._made))]

    def read(self, stream: int, headers: Pairs, body: bytes) -> bytes | None:
        """`body` as the sender's `Editor` wrote it: a base named by stream named by its id
        again; None where that stream's recipe is not remembered (the turn answered busy).
        O(headers + body)."""
        named = compact.named_back(body)
        if named is None or not _is_edit(headers):
            return body
        back, at = named
        base = self._made.get(stream - back)
        return None if base is None else compact.with_base(body, base, at)
