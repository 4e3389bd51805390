"""`Recipes`: the recipes a gateway confirmed to one client, bounded, each piece's bytes kept
once however many recipes hold it; and the base a new request is best sent against.

Memory bound: at most `max_recipes` recipes, and at most `max_bytes` as counted here: the
bytes of every distinct piece (once, however many recipes name it), plus per recipe its
entries' bytes and `ENTRY_COST` per entry (the bookkeeping: the tuple slot, the piece's
holder set). Least recently used recipes are dropped first; a piece goes when the last
recipe naming it does. A request past `max_bytes` on its own is not kept.

Choosing a base is linear in the request: one look-up per piece of it, one count per
recipe holding that piece (a piece of one conversation is held by that conversation's
recipe, an envelope piece (`tools`, `system`, the headers) by every recipe: a bounded
number, `max_recipes`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from toolref.edits.recipe import RUN_MIN, Entry, is_piece, literal_of, piece_of
from toolref.kit.lru import LRU
from toolref.kit.option_checks import check_count

ENTRY_COST: Final = 96  # bytes of bookkeeping counted per entry kept (CPython, measured)
DEFAULT_MAX_RECIPES: Final = 64
# A message shared byte for byte makes two requests one conversation from this many bytes
# (a shorter one, "ok" or "continue", may open any conversation: it relates none).
RELATED_MIN: Final = 64
DEFAULT_MAX_BYTES: Final = 64 << 20


@dataclass(frozen=True, slots=True)
class Recipe:
    """A confirmed recipe: its ref, entries, and the bytes it stands for."""

    ref: str
    entries: tuple[Entry, ...]
    size: int

    @property
    def cost(self) -> int:
        return sum(len(entry) for entry in self.entries) + ENTRY_COST * len(self.entries)


@dataclass(frozen=True, slots=True)
class Match:
    """The base chosen for a request: the recipe, and the piece bytes both hold."""

    recipe: Recipe
    shared: int


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
        # bytes or more (most messages are literals: `PIECE_MIN` is 16 KiB) -> the refs of
        # the recipes holding it
        self._holders: dict[bytes, set[str]] = {}
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

    def segment(self, recipe: Recipe, index: int) -> bytes:
        """The bytes of `recipe`'s entry `index`."""
        entry = recipe.entries[index]
        return self._pieces[piece_of(entry)] if is_piece(entry) else literal_of(entry)

    def keep(self, ref: str, entries: Sequence[Entry], segments: Sequence[bytes]) -> bool:
        """Keep a confirmed recipe as the most recently used (its pieces' bytes once);
        False when it alone is past `max_bytes` (not kept). Linear in the request."""
        if ref in self._recipes:
            self._recipes.touch(ref)
            return True
        recipe = Recipe(ref, tuple(entries), sum(map(len, segments)))
        fresh = {
            piece_of(entry): segment
            for entry, segment in zip(entries, segments, strict=True)
            if is_piece(entry) and piece_of(entry) not in self._pieces
        }
        if recipe.cost + sum(map(len, fresh.values())) > self.max_bytes:
            return False
        self._pieces.update(fresh)
        self._bytes += sum(map(len, fresh.values())) + recipe.cost
        for entry in entries:
            key = _shared_key(entry)
            if key is not None:
                self._holders.setdefault(key, set()).add(ref)
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

    def drop_holding(self, pieces: Sequence[bytes]) -> None:
        """Forget every recipe naming one of `pieces` (the gateway lost them)."""
        refs = {ref for piece in pieces for ref in self._holders.get(piece, ())}
        for ref in refs:
            self.drop(ref)

    def best_base(
        self, entries: Sequence[Entry], segments: Sequence[bytes], messages: Sequence[int]
    ) -> Match | None:
        """The confirmed recipe sharing the most bytes (pieces, long literals) with a request
        (ties: the most recently used), among those sharing one of its messages of
        `RELATED_MIN` bytes or more (the same
        conversation: an unrelated one is never a base); None when none does."""
        shared: dict[str, int] = {}
        related: set[str] = set()
        is_message = set(messages)
        seen: set[bytes] = set()
        for index, entry in enumerate(entries):
            key = _shared_key(entry)
            if key is None or key in seen:
                continue
            holders = self._holders.get(key)
            if not holders:
                continue
            seen.add(key)
            size = len(segments[index])
            for ref in holders:
                shared[ref] = shared.get(ref, 0) + size
            if index in is_message and size >= RELATED_MIN:
                related.update(holders)
        if not related:
            return None
        recency = {ref: order for order, ref in enumerate(self._recipes)}
        best = max(related, key=lambda ref: (shared[ref], recency[ref]))
        return Match(self._recipes[best], shared[best])

    def _release_dropped(self, ref: str, recipe: Recipe) -> None:
        self._release(recipe)

    def _release(self, recipe: Recipe) -> None:
        self._bytes -= recipe.cost
        for entry in recipe.entries:
            key = _shared_key(entry)
            holders = self._holders.get(key) if key is not None else None
            if key is None or holders is None:
                continue
            holders.discard(recipe.ref)
            if not holders:
                del self._holders[key]
                if is_piece(entry):
                    self._bytes -= len(self._pieces.pop(key))


def _shared_key(entry: Entry) -> bytes | None:
    """What identifies `entry` across recipes: a piece's id, a literal of `RUN_MIN` bytes
    or more itself (a shorter one, glue, identifies nothing)."""
    if is_piece(entry):
        return piece_of(entry)
    return entry if len(entry) > RUN_MIN else None
