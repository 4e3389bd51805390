"""Chunks of a recipe's entries: how a snapshot is cut, so that the snapshots of one
conversation share every chunk, and a snapshot writes only the entries no earlier one
stored.

A snapshot stores chunks (runs of entries, each under its id, a digest of what it
stores: `recipe_nodes.encode_chunk`) and lists, in order, the slices of them its recipe
is made of. Every recipe knows how its entries lie over chunks (`Chunks`): slices of
stored chunks, and fresh runs (id None) between them. A recipe's chunks are derived from
its base's in O(ops) (`rechunk`): what a kept range holds of a stored chunk, whole or in
part, stays a slice of it (list slices for the chunks held whole); every entry added is
fresh. No entry is looked at.

A snapshot settles its fresh runs (`settled`), looking at their entries only: each is cut
every `MAX_BYTES`; a slice of less than half its chunk (the rest no longer used) is fresh
again, and so is a slice of less than `MIN_BYTES` just before a fresh run (so that appends
do not leave a small chunk per snapshot). Sizes are the entries' stored sizes (a piece
counts its 17 bytes). An append writes one new chunk per snapshot: the entries added since.

Pure: no I/O.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Final

from toolref.edits.recipe import Entry

MIN_BYTES: Final = 2 << 10  # a slice this small before a fresh run joins it
MAX_BYTES: Final = 64 << 10  # a chunk holds at most about this many bytes (a bound)

StoredOp = tuple[int, int] | bytes  # a range of the base kept, or an entry added
StoredEdit = tuple[StoredOp, ...]


@dataclass(frozen=True, slots=True)
class Chunks:
    """How a recipe's entries lie over chunks, in order, one item per slice: the entries
    in it (`lengths`), where it starts and ends in the recipe, the chunk's id (None: a
    fresh run, not stored), where the slice starts in its chunk (`offsets`), and the
    chunk's own length (`totals`)."""

    lengths: list[int]
    starts: list[int]
    ends: list[int]
    ids: list[bytes | None]
    offsets: list[int]
    totals: list[int]

    @classmethod
    def of(
        cls, lengths: list[int], ids: list[bytes | None], offsets: list[int], totals: list[int]
    ) -> Chunks:
        ends = list(accumulate(lengths))
        return cls(lengths, [0, *ends[:-1]], ends, ids, offsets, totals)

    @classmethod
    def whole(cls, ids: Sequence[bytes], lengths: Sequence[int]) -> Chunks:
        """Chunks each held whole."""
        return cls.of(list(lengths), list(ids), [0] * len(ids), list(lengths))

    @property
    def slices(self) -> list[tuple[bytes, int, int]]:
        """Each slice as a snapshot lists it: (chunk id, offset, length); every one
        stored."""
        assert None not in self.ids
        return list(zip(self.ids, self.offsets, self.lengths, strict=True))  # type: ignore[arg-type]


class _Builder:
    def __init__(self) -> None:
        self.lengths: list[int] = []
        self.ids: list[bytes | None] = []
        self.offsets: list[int] = []
        self.totals: list[int] = []

    def fresh(self, count: int) -> None:
        if count <= 0:
            return
        if self.ids and self.ids[-1] is None:
            self.lengths[-1] += count
            self.totals[-1] += count
        else:
            self._append(count, None, 0, count)

    def one(self, length: int, known: bytes | None, offset: int, total: int) -> None:
        if known is None:
            self.fresh(length)
        else:
            self._append(length, known, offset, total)

    def _append(self, length: int, known: bytes | None, offset: int, total: int) -> None:
        self.lengths.append(length)
        self.ids.append(known)
        self.offsets.append(offset)
        self.totals.append(total)

    def slices(self, base: Chunks, i: int, j: int) -> None:
        """The base's slices i..j-1 as they are (C-speed list slices between the fresh
        runs among them, which merge with their neighbours). Linear in j - i: each slice is
        scanned once (testing `None in ids[i:j]` on every pass copied and scanned the rest
        again for each fresh run, quadratic when kept and new entries alternate)."""
        ids = base.ids
        while i < j:
            try:  # the next fresh run: one scan from i, each slice looked at once in all
                k = ids.index(None, i, j)
            except ValueError:
                k = j
            if k > i:
                self.lengths += base.lengths[i:k]
                self.ids += ids[i:k]
                self.offsets += base.offsets[i:k]
                self.totals += base.totals[i:k]
            if k < j:
                self.fresh(base.lengths[k])
            i = k + 1

    def chunks(self) -> Chunks:
        return Chunks.of(self.lengths, self.ids, self.offsets, self.totals)


def rechunk(base: Chunks | None, edit: StoredEdit) -> Chunks:
    """The chunks of the recipe `edit` makes from a recipe chunked as `base` (None: from
    nothing; the edit then keeps no range). O(ops + fresh runs of the base), list slices
    at C speed; no entry is looked at."""
    made = _Builder()
    for op in edit:
        if not isinstance(op, tuple):
            made.fresh(1)
            continue
        assert base is not None
        start, end = op
        i = bisect_right(base.ends, start)  # the slice holding entry `start`
        j = bisect_left(base.ends, end)  # the slice holding entry `end - 1`
        if i == j:
            _part(made, base, i, start, end)
            continue
        _part(made, base, i, start, base.ends[i])
        made.slices(base, i + 1, j)
        _part(made, base, j, base.starts[j], end)
    return made.chunks()


def _part(made: _Builder, base: Chunks, index: int, start: int, end: int) -> None:
    """Entries `start`..`end` of the base, all in its slice `index`."""
    inside = start - base.starts[index]
    made.one(end - start, base.ids[index], base.offsets[index] + inside, base.totals[index])


def settled(chunks: Chunks, entries: Sequence[Entry]) -> Chunks:
    """`chunks` with every fresh run cut into the chunks a snapshot stores (ids None: to
    write), see the module docstring. Linear in the entries of the fresh runs (and of the
    slices made fresh again), and in the slices."""
    runs = _Builder()
    for index, known in enumerate(chunks.ids):
        length, total = chunks.lengths[index], chunks.totals[index]
        used = known if 2 * length >= total else None  # else written again, alone
        runs.one(length, used, chunks.offsets[index], total)
    merged = runs.chunks()
    lengths: list[int] = []
    ids: list[bytes | None] = []
    offsets: list[int] = []
    totals: list[int] = []
    for index, known in enumerate(merged.ids):
        start, end = merged.starts[index], merged.ends[index]
        if known is not None:
            lengths.append(end - start)
            ids.append(known)
            offsets.append(merged.offsets[index])
            totals.append(merged.totals[index])
            continue
        if ids and ids[-1] is not None and _small(entries, start - lengths[-1], start):
            start -= lengths.pop()  # a small slice before it joins it
            ids.pop()
            offsets.pop()
            totals.pop()
        for first, last in _cuts(entries, start, end):
            lengths.append(last - first)
            ids.append(None)
            offsets.append(0)
            totals.append(last - first)
    return Chunks.of(lengths, ids, offsets, totals)


def _small(entries: Sequence[Entry], start: int, end: int) -> bool:
    return sum(map(len, entries[start:end])) < MIN_BYTES


def _cuts(entries: Sequence[Entry], start: int, end: int) -> list[tuple[int, int]]:
    """The run `start`..`end` cut after each entry that brings a chunk to `MAX_BYTES`."""
    sizes = list(accumulate(map(len, entries[start:end])))  # C speed
    found: list[tuple[int, int]] = []
    at, done = start, 0
    while at < end:
        stop = min(start + bisect_left(sizes, done + MAX_BYTES) + 1, end)
        found.append((at, stop))
        done = sizes[stop - start - 1]
        at = stop
    return found
