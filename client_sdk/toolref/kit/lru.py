"""`LRU`: a mapping bounded by its number of entries and by the total size of its values,
least recently used dropped first. The one bounded memory every cache of toolref is built
on (confirmed refs and histories, transcripts, kept bodies, relay clients, the registry's
history cache and record checks).

Not thread-safe: a cache shared by threads holds a lock around its calls. Every operation
is O(1) but for `put`, which is O(entries it drops) and weighs the value once: each value is
counted as weighed when kept, and given back as that (a value that grew meanwhile does not
make the total drift).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


def _nothing(_: object) -> int:
    return 0


class LRU(Mapping[K, V], Generic[K, V]):
    """At most `count` entries and `size` in all as `weigh` measures the values (None: no
    bound on size). `dropped` is told of each entry dropped for a bound (not of `pop`).
    A read-only `Mapping` too (`m[key]`, `items()`, ...: none of them reorders it); `get`
    makes what it finds the most recently used."""

    def __init__(
        self,
        count: int,
        size: int | None = None,
        weigh: Callable[[V], int] = _nothing,
        dropped: Callable[[K, V], None] | None = None,
    ) -> None:
        self.count = count
        self.limit = size
        self._weigh = weigh
        self._dropped = dropped
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()  # value, its weight
        self._size = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[K]:
        """Keys, least recently used first."""
        return iter(self._entries)

    def __getitem__(self, key: K) -> V:
        return self._entries[key][0]

    @property
    def size(self) -> int:
        """The values' total, as `weigh` measures them."""
        return self._size

    def get(self, key: K, default: None = None) -> V | None:  # type: ignore[override]
        """The value of `key`, made the most recently used; None when absent."""
        found = self._entries.get(key)
        if found is None:
            return None
        self._entries.move_to_end(key)
        return found[0]

    def peek(self, key: K) -> V | None:
        """The value of `key`, leaving the order as it is."""
        found = self._entries.get(key)
        return None if found is None else found[0]

    def put(self, key: K, value: V) -> None:
        """Keep `value` as the most recently used; then drop the least recently used past
        either bound. A value larger than the size bound is not kept at all (nor what `key`
        held), and drops nothing else: `dropped` is told of it alone."""
        self.pop(key)
        weight = self._weigh(value)
        limit = self.limit
        if limit is not None and weight > limit:
            if self._dropped is not None:
                self._dropped(key, value)
            return
        self._entries[key] = (value, weight)
        self._size += weight
        while self._entries and (
            len(self._entries) > self.count or (limit is not None and self._size > limit)
        ):
            gone, (old, old_weight) = self._entries.popitem(last=False)
            self._size -= old_weight
            if self._dropped is not None:
                self._dropped(gone, old)

    def pop(self, key: K) -> V | None:
        """Forget `key`; its value, or None."""
        found = self._entries.pop(key, None)
        if found is None:
            return None
        self._size -= found[1]
        return found[0]

    def touch(self, key: K) -> None:
        """Make `key` the most recently used, when present."""
        if key in self._entries:
            self._entries.move_to_end(key)

    def clear(self) -> None:
        self._entries.clear()
        self._size = 0
