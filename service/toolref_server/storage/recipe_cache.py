"""Pieces and recipes of edited requests this process read or kept, in its memory.

The next turn of a conversation usually edits the recipe this process just kept, and keeps
most of its pieces: holding them here spares reading the recipe's node (and its snapshot)
and every piece from the store again. Nothing depends on it: a piece is named by the digest
of its bytes and a recipe by the digest of its entries, so an entry is never stale; another
worker or replica, or an entry dropped, reads the store instead (a few batched reads).

One `toolref.kit.lru.LRU` for both, bounded by the bytes held (TOOLREF_EDIT_CACHE_BYTES);
each tenant's entries under its own scope. Thread-safe (a lock around each call).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from threading import Lock
from typing import Generic, Protocol, TypeVar

from toolref.kit.lru import LRU

_PIECE = "p"
_RECIPE = "b"


class Sized(Protocol):
    @property
    def size(self) -> int: ...


R = TypeVar("R", bound=Sized)


class RecipeCache(Generic[R]):
    """Pieces (id -> bytes) and recipes (ref -> `R`, weighed by `weigh`) per tenant, at
    most `limit` bytes in all (0 keeps nothing)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._entries: LRU[tuple[str, str, object], bytes | R] = LRU(sys.maxsize, limit, _size)
        self._lock = Lock()

    def piece(self, tenant: str, piece: bytes) -> bytes | None:
        with self._lock:
            found = self._entries.get((tenant, _PIECE, piece))
        return found if isinstance(found, bytes) else None

    def keep_pieces(self, tenant: str, pieces: Iterable[tuple[bytes, bytes]]) -> None:
        """Keep each (id, bytes); linear in them."""
        if not self.limit:
            return
        with self._lock:
            for piece, data in pieces:
                if len(data) <= self.limit:
                    self._entries.put((tenant, _PIECE, piece), data)

    def recipe(self, tenant: str, ref: str) -> R | None:
        with self._lock:
            found = self._entries.get((tenant, _RECIPE, ref))
        return None if found is None or isinstance(found, bytes) else found

    def keep_recipe(self, tenant: str, ref: str, recipe: R) -> None:
        if not self.limit or _size(recipe) > self.limit:
            return
        with self._lock:
            self._entries.put((tenant, _RECIPE, ref), recipe)

    def drop_recipe(self, tenant: str, ref: str) -> None:
        with self._lock:
            self._entries.pop((tenant, _RECIPE, ref))

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def _size(value: bytes | Sized) -> int:
    return len(value) if isinstance(value, bytes) else value.size
