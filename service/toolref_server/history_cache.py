"""Recently continued histories, hydrated, in this process's memory.

A conversation's next turn usually continues the head this process just confirmed. Keeping
that history's messages in full (as the text each client wrote, payloads filled) lets the
registry answer the whole conversation by joining texts it holds with the new ones, instead
of reading every message and tool ref again and filling them: O(new) plus a copy. Another
replica, or an evicted entry, takes the whole path through Redis (one batched read).

Entries are immutable (a history ref names its content); a continuation moves its
conversation's entry to the new head. Bounded by the total characters held (LRU).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from threading import Lock


@dataclass(frozen=True, slots=True)
class Hydrated:
    """A history in full: each message's text, and the ref of each tool call in it."""

    texts: tuple[str, ...]
    references: dict[str, str]
    size: int  # characters of the texts

    @classmethod
    def of(cls, texts: tuple[str, ...], references: dict[str, str]) -> Hydrated:
        return cls(texts, references, sum(map(len, texts)))


class HistoryCache:
    """LRU of `Hydrated` by (tenant, history ref), at most `limit` characters in all
    (0 keeps nothing). Thread-safe: routes read it on the loop, workers never touch it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._entries: OrderedDict[tuple[str, str], Hydrated] = OrderedDict()
        self._size = 0
        self._lock = Lock()

    def get(self, tenant: str, ref: str) -> Hydrated | None:
        with self._lock:
            found = self._entries.get((tenant, ref))
            if found is not None:
                self._entries.move_to_end((tenant, ref))
            return found

    def put(self, tenant: str, ref: str, entry: Hydrated, replaces: str | None = None) -> None:
        """Keep `entry` as history `ref`; `replaces`: the head it continued, dropped (its
        conversation has moved on: a client would send it again only after an edit)."""
        if entry.size > self.limit:
            return
        with self._lock:
            if replaces is not None:
                self._drop((tenant, replaces))
            self._drop((tenant, ref))
            self._entries[(tenant, ref)] = entry
            self._size += entry.size
            while self._size > self.limit:
                _, oldest = self._entries.popitem(last=False)
                self._size -= oldest.size

    def _drop(self, key: tuple[str, str]) -> None:
        gone = self._entries.pop(key, None)
        if gone is not None:
            self._size -= gone.size

    def __len__(self) -> int:
        return len(self._entries)
