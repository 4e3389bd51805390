"""A recipe held in memory: its entries, their framed forms, their bytes, where each literal
is stored (`sources`) and its chunks, each derived from its base's in O(edit).

A turn edits the recipe just kept, and keeps most of it: a kept range is a slice of each of
the base's lists (C speed), an entry added is one step; the ref digests the framed entries
joined (C speed); the chunks are reused but around what changed (`recipe_chunks.rechunk`).
So what a turn costs in Python steps depends on the edit, not on the conversation's length;
what it costs at memcpy speed (slices, one join, one digest) is linear in the request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Final

from toolref.edits.edit import EditError
from toolref.edits.recipe import LITERAL, Entry, framed, ref_of_framed
from toolref_server.storage.recipe_chunks import Chunks, StoredEdit, rechunk
from toolref_server.storage.recipe_nodes import CONTEXT, RecipeNode

ENTRY_OVERHEAD: Final = 160  # what an entry costs in memory beyond its bytes (4 lists), about

# Where a literal is stored: the refs of its group's nodes up to the one holding it (that
# one last; a tuple shared by every literal of that node), and its place in that node.
Source = tuple[tuple[str, ...], int]


@dataclass(frozen=True)  # no slots: `length` is cached in its __dict__
class Held:
    """A recipe: its `ref`, entries (with `framed` and `segments`, the bytes of each, and
    `sources`, where each literal is stored; None for a piece), chunks; and how it is
    stored: its `node`, the snapshot it grows from (None: it is one) and the deltas from
    that snapshot to it (`path`, itself last), the ids of the chunks its snapshot holds
    (`stored`), and the end of its group's literals up to its own (`stream`, at most
    `CONTEXT` bytes: what the next delta's literals are compressed against)."""

    ref: str
    entries: list[Entry]
    framed: list[bytes]
    segments: list[bytes]
    sources: list[Source | None]
    chunks: Chunks
    node: RecipeNode
    snapshot: str | None
    path: tuple[str, ...]
    stored: tuple[bytes, ...]
    stream: bytes
    known: int | None = None  # `length` when its maker knew it (`Parts.length`), else None

    @property
    def group(self) -> tuple[str, ...]:
        """The refs of its group's nodes, its snapshot first, itself last."""
        return (self.snapshot, *self.path) if self.snapshot is not None else (self.ref,)

    @property
    def refreshed(self) -> int:
        """Epoch seconds: every piece of it extended then."""
        return self.node.refreshed

    @property
    def depth(self) -> int:
        """Deltas since its snapshot (0: a snapshot)."""
        return len(self.path)

    @property
    def size(self) -> int:
        """Bytes it holds in memory, about (for the cache's bound): its segments counted
        as its own, although a recipe shares most with its base."""
        return self.length + len(self.stream) + ENTRY_OVERHEAD * len(self.entries)

    @cached_property
    def length(self) -> int:
        """Bytes of the request it stands for (headers segment included): as derived from
        its base's (`known`, O(edit)), else summed once (a recipe read back)."""
        return self.known if self.known is not None else sum(map(len, self.segments))


@dataclass(frozen=True, slots=True)
class Parts:
    """A recipe's lists before it is stored (see `Held`); the sources of the literals it
    adds are None until it is (`placed`), at `added` (their places, in order)."""

    ref: str
    entries: list[Entry]
    framed: list[bytes]
    segments: list[bytes]
    sources: list[Source | None]
    chunks: Chunks
    added: list[int]
    length: int  # bytes of the request, headers segment included (`Held.length`)

    def placed(self, group: tuple[str, ...]) -> list[Source | None]:
        """The sources once its own literals are stored in the last node of `group`."""
        sources = list(self.sources)
        for index, at in enumerate(self.added):
            sources[at] = (group, index)
        return sources


def derive(base: Held | None, edit: StoredEdit, added: Sequence[bytes]) -> Parts:
    """The recipe `edit` makes from `base` (None: from nothing), `added` the bytes of the
    entries it adds, in order; `EditError` for a range outside the base. O(ops + added +
    entries scanned for chunks), plus slices and one digest at C speed."""
    entries: list[Entry] = []
    framed_entries: list[bytes] = []
    segments: list[bytes] = []
    sources: list[Source | None] = []
    literals: list[int] = []
    given = iter(added)
    length = len(base.entries) if base is not None else 0
    for op in edit:
        if isinstance(op, tuple):
            start, end = op
            if base is None or not 0 <= start < end <= length:
                raise EditError(f"the edit keeps entries {start} to {end} of a base of {length}")
            entries += base.entries[start:end]
            framed_entries += base.framed[start:end]
            segments += base.segments[start:end]
            sources += base.sources[start:end]
        else:
            if op[:1] == LITERAL:
                literals.append(len(entries))
            entries.append(op)
            framed_entries.append(framed(op))
            segments.append(next(given))
            sources.append(None)
    chunks = rechunk(base.chunks if base is not None else None, edit)
    ref = ref_of_framed(framed_entries)
    size = kept_bytes(base, edit) + sum(map(len, added))  # O(ops + entries not kept)
    return Parts(ref, entries, framed_entries, segments, sources, chunks, literals, size)


def kept_bytes(base: Held | None, edit: StoredEdit) -> int:
    """Bytes of the base's segments the ranges of `edit` keep (each range within the base:
    checked first). Ranges in order, none kept twice (an edit as `diff` makes it): the
    base's length less the entries between and around them, O(ops + entries not kept);
    else each range summed, O(entries kept). C-speed sums either way."""
    ranges = [op for op in edit if isinstance(op, tuple)]
    if base is None or not ranges:
        return 0
    segments = base.segments
    at = 0
    dropped = 0
    for start, end in ranges:
        if start < at:  # out of order, or kept twice: summed as they are
            return sum(sum(map(len, segments[s:e])) for s, e in ranges)
        dropped += sum(map(len, segments[at:start]))
        at = end
    dropped += sum(map(len, segments[at:]))
    return base.length - dropped


def context(segments: Sequence[bytes], size: int = CONTEXT) -> bytes:
    """The last `size` bytes of `segments` joined. Joins a few more segments each time (C
    speed): O(size) whatever their count, but for segments larger than it."""
    if size <= 0:
        return b""
    count = 16
    while True:
        data = b"".join(segments[-count:])
        if len(data) >= size or count >= len(segments):
            return data[-size:]
        count *= 4
