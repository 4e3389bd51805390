"""`Recipes`: the recipes a gateway confirmed to one client, bounded, each piece's bytes kept
once however many recipes hold it; and the base a new request is best sent against.

Memory bound: at most `max_recipes` recipes, and at most `max_bytes` as counted here: the
bytes of every distinct piece (once, however many recipes name it), plus per recipe its
entries' bytes and `ENTRY_COST` per entry (the bookkeeping: the tuple slot, the piece's
holder set). Least recently used recipes are dropped first; a piece goes when the last
recipe naming it does. A request past `max_bytes` on its own is not kept.

A conversation's recipes are one line (`_Line`): a recipe kept on a base joins the base's.
What a request shares with recipes is counted per line, and a recipe kept on a base whose
first segments it shares (`same`, from `toolref.edits.bodycut`) takes the base's bookkeeping
as it is and adds only its own segments after them: keeping a turn costs what it added.
Each recipe has an index of where each of its entries first stands (`Recipe.first`), made
the same way from its base's: a copy at C speed, then its new entries.

Choosing a base from scratch (`best_base`) is linear in the request: one look-up per piece
of it, one count per line holding that piece (a piece of one conversation is held by that
conversation's line, an envelope piece (`tools`, `system`, the headers) by every line: a
bounded number, `max_recipes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Final

from toolref.edits.recipe import LITERAL, PIECE, RUN_MIN, Entry, is_piece, literal_of, piece_of
from toolref.kit.lru import LRU
from toolref.kit.option_checks import check_count

ENTRY_COST: Final = 96  # bytes of bookkeeping counted per entry kept (CPython, measured)
DEFAULT_MAX_RECIPES: Final = 64
# A message shared byte for byte makes two requests one conversation from this many bytes
# (a shorter one, "ok" or "continue", may open any conversation: it relates none).
RELATED_MIN: Final = 64
DEFAULT_MAX_BYTES: Final = 64 << 20


@dataclass(eq=False, slots=True)
class _Line:
    """One conversation's recipes: those kept now (`refs`), and what identifies every entry
    they hold (`keys`, `_shared_key`s: a dropped recipe's go with it unless a recipe left in
    the line holds them too)."""

    refs: set[str] = field(default_factory=set)
    keys: set[bytes] = field(default_factory=set)


@dataclass(frozen=True, eq=False, slots=True)
class Recipe:
    """A confirmed recipe: its ref, entries, the bytes it stands for, what it costs as the
    module docstring counts, where each entry first stands (`first`), and its line."""

    ref: str
    entries: Sequence[Entry]  # the request's own list (`request.Cut.entries`), never changed
    size: int
    cost: int
    index: dict[Entry, int]
    line: _Line
    base: str | None = None  # the recipe it was kept on, whose entries 1 to `end` it shares
    end: int = 0
    tail: Entry | None = None  # its last message's largest segment (`continues`)

    def first(self, entry: Entry) -> int | None:
        """Where `entry` (one of more than `RUN_MIN` bytes) first stands; None when nowhere.
        The index may name a place another entry now holds (one its base held there):
        checked here."""
        at = self.index.get(entry)
        if at is None or at >= len(self.entries) or self.entries[at] != entry:
            return None
        return at


class Recipes:
    """See the module docstring. Not thread-safe (one event loop, or a lock around it)."""

    def __init__(
        self, max_recipes: int = DEFAULT_MAX_RECIPES, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        check_count("max_recipes", max_recipes, 1, "it is how many confirmed recipes are kept")
        check_count("max_bytes", max_bytes, 1, "it is how many bytes the recipes may hold")
        self.max_bytes = max_bytes
        self._recipes: LRU[str, Recipe] = LRU(max_recipes, dropped=self._release_dropped)
        self._pieces: dict[bytes, bytes] = {}  # piece id -> its bytes, once
        # What a request shares with a recipe: piece id, or a literal entry of `RUN_MIN`
        # bytes or more (most messages are literals: `PIECE_MIN` is 16 KiB) -> the lines
        # whose recipes held it
        self._holders: dict[bytes, set[_Line]] = {}
        self._bytes = 0  # as the module docstring counts them

    def __len__(self) -> int:
        return len(self._recipes)

    def __contains__(self, ref: object) -> bool:
        return ref in self._recipes

    def __iter__(self) -> Iterator[str]:
        return iter(self._recipes)

    @property
    def held_bytes(self) -> int:
        """What the recipes hold, as the module docstring counts it."""
        return self._bytes

    def holds(self, piece: bytes) -> bool:
        """A piece of some confirmed recipe (so the gateway held it then)."""
        return piece in self._pieces

    def piece(self, piece: bytes) -> bytes:
        return self._pieces[piece]

    def get(self, ref: str) -> Recipe | None:
        return self._recipes.peek(ref)

    def entry_size(self, entry: Entry) -> int:
        """The bytes of the segment `entry` (of a kept recipe) stands for. O(1)."""
        return len(self._pieces[piece_of(entry)]) if is_piece(entry) else len(entry) - len(LITERAL)

    def segment(self, recipe: Recipe, index: int) -> bytes:
        """The bytes of `recipe`'s entry `index`."""
        entry = recipe.entries[index]
        return self._pieces[piece_of(entry)] if is_piece(entry) else literal_of(entry)

    def keep(
        self,
        ref: str,
        entries: Sequence[Entry],
        segments: Sequence[bytes],
        *,
        base: Recipe | None = None,
        same: int = 0,
        size: int = -1,
        tail: Entry | None = None,
    ) -> bool:
        """Keep a confirmed recipe as the most recently used (its pieces' bytes once);
        False when it alone is past `max_bytes` (not kept). `base`: the recipe it was sent
        against (it joins the base's line); `same`: how many of its entries after the first
        are the base's, at the same places; `size`: its segments' bytes (-1: counted here);
        `tail`: its last message's largest segment (`continues`). Linear in the entries
        outside those; `entries` is kept as it is (not copied)."""
        if ref in self._recipes:
            self._recipes.touch(ref)
            return True
        if base is not None and base.ref not in self._recipes:
            base, same = None, 0
        end = 1 + same if base is not None and same > 0 else 0
        new = (
            range(len(entries)) if not end else chain(range(min(1, end)), range(end, len(entries)))
        )
        added = list(new)
        fresh = {
            piece_of(entries[at]): segments[at]
            for at in added
            if is_piece(entries[at]) and piece_of(entries[at]) not in self._pieces
        }
        cost = _cost(entries, added, base if end else None, end)
        if cost + sum(map(len, fresh.values())) > self.max_bytes:
            return False
        line = base.line if base is not None else _Line()
        index = _index(entries, added, base.index if end and base is not None else None)
        size = size if size >= 0 else sum(map(len, segments))
        kept_on = base.ref if base is not None and end else None
        recipe = Recipe(ref, entries, size, cost, index, line, kept_on, end, tail)
        self._pieces.update(fresh)
        self._bytes += sum(map(len, fresh.values())) + cost
        line.refs.add(ref)
        self._hold(line, (entries[at] for at in added))
        self._recipes.put(ref, recipe)  # may drop the oldest past max_recipes
        while self._bytes > self.max_bytes and len(self._recipes) > 1:
            self.drop(next(iter(self._recipes)))
        return True

    def touch(self, ref: str) -> None:
        self._recipes.touch(ref)

    def drop(self, ref: str) -> None:
        """Forget a recipe (superseded, or the gateway no longer holds it)."""
        found = self._recipes.pop(ref)
        if found is not None:
            self._release(found)

    def continues(self, ref: str, base: Recipe, kept: int) -> bool:
        """Recipe `ref` continues `base`'s conversation, so the base is past (dropped): its
        edit kept at least half the base's bytes (`kept`: `Edit.kept`, each base entry
        once, the same whichever way the base was found, so the fast path, the pass and the
        JS SDK drop alike) and it holds the base's last message (its largest
        segment; where that is too short to be looked up, the bytes alone decide). Another
        conversation opening with the base's first messages (a long system prompt, the same
        task) shares their bytes but not the base's last message: were the base dropped,
        its own next turn would find no base of its conversation (interleaved conversations
        evicted each other's, each turn sent nearly whole). O(1)."""
        recipe = self._recipes.peek(ref)
        if recipe is None or 2 * kept < base.size:
            return False
        tail = base.tail
        return tail is None or len(tail) <= RUN_MIN or recipe.first(tail) is not None

    def drop_holding(self, pieces: Sequence[bytes]) -> None:
        """Forget every recipe naming one of `pieces` (the gateway lost them)."""
        refs = set()
        for piece in pieces:
            for line in self._holders.get(piece, ()):
                for ref in line.refs:
                    recipe = self._recipes.peek(ref)
                    if recipe is not None and recipe.first(PIECE + piece) is not None:
                        refs.add(ref)
        for ref in refs:
            self.drop(ref)

    def best_base(
        self, entries: Sequence[Entry], segments: Sequence[bytes], messages: Sequence[int]
    ) -> Recipe | None:
        """The confirmed recipe sharing the most bytes (pieces, long literals) with a request
        (ties: the most recently used), among those sharing one of its messages of
        `RELATED_MIN` bytes or more (the same conversation: an unrelated one is never a
        base); None when none does. The lines holding a message of it first, then what each
        of their recipes holds (`Recipe.first`)."""
        is_message = set(messages)
        seen: set[bytes] = set()
        held: list[tuple[Entry, int, bool]] = []  # what some line holds: entry, size, message
        related: set[_Line] = set()
        for index, entry in enumerate(entries):
            key = _shared_key(entry)
            if key is None or key in seen:
                continue
            holders = self._holders.get(key)
            if not holders:
                continue
            seen.add(key)
            size = len(segments[index])
            message = index in is_message and size >= RELATED_MIN
            held.append((entry, size, message))
            if message:
                related.update(holders)
        recency = {ref: order for order, ref in enumerate(self._recipes)}
        best: tuple[int, int] | None = None
        found: Recipe | None = None
        for ref in (ref for line in related for ref in line.refs):
            recipe = self._recipes.peek(ref)
            if recipe is None:
                continue
            mine = [
                (size, message) for entry, size, message in held if recipe.first(entry) is not None
            ]
            if not any(message for _, message in mine):
                continue
            score = (sum(size for size, _ in mine), recency[ref])
            if best is None or score > best:
                best, found = score, recipe
        return found

    def rivalled(
        self,
        base: Recipe,
        entries: Sequence[Entry],
        start: int,
        segments: Sequence[bytes],
        messages: Sequence[int],
    ) -> bool:
        """Whether another recipe may share more with a request of `entries` than `base`,
        which holds entries 1 to `start` of it: one of its others (its headers' too) is held
        by a line that `best_base` would look at (one holding a message of the request of
        `RELATED_MIN` bytes or more) and not by `base`. Otherwise every recipe it would
        weigh holds a part of what `base` holds, and it would choose `base` (or one holding
        as much). A piece only an unrelated line holds (another conversation read the same
        large file) rivals nothing: before, it sent the turn to the pass over the request.
        O(entries from `start`): what a resumed turn added; and O(messages) where one of
        them is held elsewhere."""
        rivals: set[_Line] = set()
        for entry in chain(entries[:1], entries[start:]):
            key = _shared_key(entry)
            if key is not None and key in self._holders and base.first(entry) is None:
                rivals.update(self._holders[key])
        if not rivals:
            return False
        for index in messages:
            key = _shared_key(entries[index]) if len(segments[index]) >= RELATED_MIN else None
            holders = self._holders.get(key) if key is not None else None
            if holders is not None and not rivals.isdisjoint(holders):
                return True
        return False

    def _hold(self, line: _Line, entries: Iterable[Entry]) -> None:
        for entry in entries:
            key = _shared_key(entry)
            if key is not None and key not in line.keys:
                line.keys.add(key)
                self._holders.setdefault(key, set()).add(line)

    def _release_dropped(self, ref: str, recipe: Recipe) -> None:
        self._release(recipe)

    def _release(self, recipe: Recipe) -> None:
        self._bytes -= recipe.cost
        line = recipe.line
        line.refs.discard(recipe.ref)
        if line.refs:
            self._release_unheld(recipe, line)
            return
        for key in line.keys:  # the line's last recipe: what it held goes
            self._unhold(line, key)
        line.keys.clear()

    def _release_unheld(self, recipe: Recipe, line: _Line) -> None:
        """What `recipe` held that no recipe left in its line holds: released (its pieces'
        bytes, its keys). Without it a line living on (a conversation whose window slides,
        whose system prompt changes every turn) kept every entry it ever held. O(its entries
        after those a recipe kept on it shares at the same places, times the line's
        recipes): nothing for a conversation that only grows."""
        left = [found for ref in line.refs if (found := self._recipes.peek(ref)) is not None]
        shared = max((r.end for r in left if r.base == recipe.ref), default=0)
        for at in chain(range(min(1, shared)), range(max(shared, 1), len(recipe.entries))):
            entry = recipe.entries[at]
            key = _shared_key(entry)
            if key is None or key not in line.keys:
                continue
            if any(other.first(entry) is not None for other in left):
                continue
            line.keys.discard(key)
            self._unhold(line, key)

    def _unhold(self, line: _Line, key: bytes) -> None:
        holders = self._holders.get(key)
        if holders is None:
            return
        holders.discard(line)
        if not holders:
            del self._holders[key]
            piece = self._pieces.pop(key, None)
            if piece is not None:
                self._bytes -= len(piece)


def _cost(entries: Sequence[Entry], added: list[int], base: Recipe | None, end: int) -> int:
    """What a recipe costs as the module docstring counts: from its base's where entries 1
    to `end` are the base's (what the base's others cost taken off, the added ones' put on),
    else from every entry."""
    if base is None:
        return sum(map(len, entries)) + ENTRY_COST * len(entries)
    held = base.cost - ENTRY_COST * len(base.entries)  # the base's entries' bytes
    held -= len(base.entries[0]) + sum(map(len, base.entries[end:]))
    return held + sum(len(entries[at]) for at in added) + ENTRY_COST * len(entries)


def _index(
    entries: Sequence[Entry], added: list[int], base: dict[Entry, int] | None
) -> dict[Entry, int]:
    """Where each entry of more than `RUN_MIN` bytes first stands: the base's index copied
    (the entries not in `added` stand where they stood in the base) and those in `added`
    placed, in order; from scratch without a base, or when the base's has grown past twice
    the entries (the places of entries no longer held). A segment 0 (the headers) never
    equals a later one (a body's segment is JSON text, never `name: value` lines)."""
    if base is None or len(base) > 2 * len(entries) + 64:
        found: dict[Entry, int] = {}
        for at, entry in enumerate(entries):
            if len(entry) > RUN_MIN:
                found.setdefault(entry, at)
        return found
    index = base.copy()
    placed: set[Entry] = set()
    for at in added:
        entry = entries[at]
        if len(entry) <= RUN_MIN or entry in placed:
            continue
        placed.add(entry)
        old = index.get(entry)
        if old is None or old > at or old >= len(entries) or entries[old] != entry:
            index[entry] = at
    return index


def _shared_key(entry: Entry) -> bytes | None:
    """What identifies `entry` across recipes: a piece's id, a literal of `RUN_MIN` bytes
    or more itself (a shorter one, glue, identifies nothing)."""
    if is_piece(entry):
        return piece_of(entry)
    return entry if len(entry) > RUN_MIN else None
