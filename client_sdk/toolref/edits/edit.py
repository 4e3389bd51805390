"""An edit: the new request as ranges of a base recipe kept, pieces named, segments inline.

`diff` writes one from the client's side: every run of entries the base holds in the same
order is kept as a range, wherever it sits (an edit, a deletion or an insertion in the
middle costs what changed, not what follows); a piece the registry holds elsewhere is
named; anything else travels inline. `apply` is the registry's side: the new entries from
the base's and the edit's, in time linear in the result (a kept range is a slice).

`dictionary_order` says which of the base's segments the inline bytes are compressed
against, and in what order: those the base keeps, then those the edit removed (a segment
replaced by a near copy of itself, a moved cache mark say, matches its old bytes last).
Both sides take the last `size` bytes of that concatenation (`dictionary`), the size the
client chose and the edit states.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from itertools import chain

from toolref.edits.recipe import RUN_MIN, Entry, entry_of, is_piece, piece_of


@dataclass(frozen=True, slots=True)
class Keep:
    """Base entries `start` to `end` (excluded)."""

    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Named:
    """A piece the registry holds (by id)."""

    piece: bytes


@dataclass(frozen=True, slots=True)
class Inline:
    """A new segment, its bytes."""

    data: bytes


Op = Keep | Named | Inline


class EditError(ValueError):
    """An edit that does not fit its base (a range outside it, say)."""


def diff(
    base: Sequence[Entry],
    new: Sequence[Entry],
    segments: Sequence[bytes],
    held: Container[bytes] = (),
    *,
    first: Callable[[Entry], int | None] | None = None,
    same: tuple[int, int] = (0, 0),
) -> list[Op]:
    """The edit from `base` to `new` (entries; `segments` the bytes of each of `new`).
    `held`: piece ids the registry is known to hold beyond the base. Greedy and linear: a
    run of kept entries starts at an entry of `RUN_MIN` bytes or more the base holds (a
    piece, or a message too short to be one) and goes on while the next entries follow it
    there too (glue, a comma say, starts no run: it stands everywhere).

    `first`: where an entry first stands in `base` (`Recipe.first`; else found here, a
    pass over `base`). `same`: entries `same[0]` to `same[1]` (excluded) of `new` are the
    base's at the same places (a body cut on from the base's, `toolref.edits.bodycut`): a
    run that reaches them goes over them in one step, so the edit costs the entries outside
    them, and is the one the pass entry by entry would make."""
    if first is None:
        places: dict[Entry, int] = {}
        for index, entry in enumerate(base):
            if len(entry) > RUN_MIN:
                places.setdefault(entry, index)
        first = places.get
    ops: list[Op] = []
    run: int | None = None  # the base entry the current run would keep next
    at = 0
    while at < len(new):
        entry = new[at]
        if run is not None and run == at and same[0] <= at < same[1]:
            last = ops[-1]
            assert isinstance(last, Keep)
            ops[-1] = Keep(last.start, same[1])
            run = at = same[1]
            continue
        at += 1
        if run is not None and run < len(base) and base[run] == entry:
            last = ops[-1]
            assert isinstance(last, Keep)
            ops[-1] = Keep(last.start, run + 1)
            run += 1
            continue
        start = first(entry) if len(entry) > RUN_MIN else None
        if start is not None:
            ops.append(Keep(start, start + 1))
            run = start + 1
            continue
        run = None
        if is_piece(entry) and piece_of(entry) in held:
            ops.append(Named(piece_of(entry)))
        else:
            ops.append(Inline(segments[at - 1]))
    return ops


def apply(base: Sequence[Entry], ops: Sequence[Op]) -> list[Entry]:
    """The new recipe's entries; `EditError` for a range outside the base."""
    entries: list[Entry] = []
    for op in ops:
        if isinstance(op, Keep):
            if not 0 <= op.start < op.end <= len(base):
                raise EditError(
                    f"the edit keeps entries {op.start} to {op.end} of a base of {len(base)}"
                )
            entries.extend(base[op.start : op.end])
        elif isinstance(op, Named):
            entries.append(b"\x00" + op.piece)
        else:
            entries.append(entry_of(op.data))
    return entries


def apply_segments(
    base: Sequence[bytes], ops: Sequence[Keep | Named | int], inline: Sequence[bytes]
) -> list[bytes]:
    """The segments an edit read by `toolref.edits.wire.read` stands for, its kept ranges
    taken from `base` (the base recipe's segments, shared, not copied) and its inline
    segments from `inline` in order; `EditError` for a range outside the base, a piece
    named (only its sender's receiver holds pieces) or inline segments that do not match.
    O(ops + entries kept): list slices."""
    segments: list[bytes] = []
    given = iter(inline)
    for op in ops:
        if isinstance(op, Keep):
            if not 0 <= op.start < op.end <= len(base):
                raise EditError(
                    f"the edit keeps segments {op.start} to {op.end} of a base of {len(base)}"
                )
            segments.extend(base[op.start : op.end])
        elif isinstance(op, Named):
            raise EditError("the edit names a piece, which only a registry holds")
        else:
            data = next(given, None)
            if data is None or len(data) != op:
                raise EditError("the edit's inline segments do not match its ops")
            segments.append(data)
    return segments


def dictionary_order(base_length: int, ops: Sequence[Op]) -> list[int]:
    """The base's entries inline bytes are compressed against: kept ones in base order,
    then removed ones in base order (see the module docstring)."""
    return [i for start, end in dictionary_ranges(base_length, ops) for i in range(start, end)]


def kept_ranges(base_length: int, ops: Sequence[Op]) -> list[tuple[int, int]]:
    """The base entries the `Keep` ops keep, as ranges (start, end excluded) in base order,
    each entry once however many ops keep it: O(ops log ops)."""
    spans = sorted(
        (max(op.start, 0), min(op.end, base_length))
        for op in ops
        if isinstance(op, Keep) and max(op.start, 0) < min(op.end, base_length)
    )
    kept: list[tuple[int, int]] = []
    for start, end in spans:
        if kept and start <= kept[-1][1]:
            kept[-1] = (kept[-1][0], max(kept[-1][1], end))
        else:
            kept.append((start, end))
    return kept


def kept_bytes(
    base: Sequence[Entry],
    ops: Sequence[Op],
    size: Callable[[Entry], int],
    segments: Sequence[bytes],
    *,
    same: tuple[int, int] = (0, 0),
    same_bytes: int = 0,
) -> int:
    """The bytes of `base` the `Keep` ops keep, each of its entries once however often the
    request repeats it (so at most the base's bytes): what a sender weighs to tell whether
    a request continues its base (`Recipes.continues`), the same whichever way the base was
    found. `size(entry)`: the bytes of a base entry; `segments`: the request's. Base entries
    `same[0]` to `same[1]`, which the request holds at the same places (`same_bytes` bytes,
    `diff`'s `same`), count as those bytes less the request's own segments there that no op
    keeps; the others one by one. O(ops log ops) and the entries kept outside `same`."""
    low, high = same
    outside = unkept = 0
    at = low  # the part of `same` before `at` is counted
    for start, end in kept_ranges(len(base), ops):
        for index in chain(range(start, min(end, low)), range(max(start, high), end)):
            outside += size(base[index])
        unkept += sum(len(segments[i]) for i in range(max(at, low), min(start, high)))
        at = max(at, end)
    unkept += sum(len(segments[i]) for i in range(max(at, low), high))
    return outside + (same_bytes - unkept if high > low else 0)


def dictionary_ranges(base_length: int, ops: Sequence[Op]) -> list[tuple[int, int]]:
    """`dictionary_order` as ranges of base entries (start, end excluded), in that order:
    O(ops log ops), whatever the base's length (a holder of the base's segments joins each
    range at C speed)."""
    kept = kept_ranges(base_length, ops)
    removed: list[tuple[int, int]] = []
    at = 0
    for start, end in kept:
        if start > at:
            removed.append((at, start))
        at = end
    if at < base_length:
        removed.append((at, base_length))
    return kept + removed


def dictionary(order: Sequence[int], segment: Callable[[int], bytes], size: int) -> bytes:
    """The last `size` bytes of the base's segments in `order` (`segment(i)`: the bytes of
    base entry i): only the segments that reach into them are asked for."""
    parts: list[bytes] = []
    left = size
    for index in reversed(order):
        if left <= 0:
            break
        data = segment(index)
        parts.append(data[-left:] if len(data) > left else data)
        left -= len(data)
    return b"".join(reversed(parts))
