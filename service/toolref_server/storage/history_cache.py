"""Recently continued histories, hydrated, in this process's memory.

A conversation's next turn usually continues the head this process just confirmed. Keeping
that history's messages in full (as the text each client wrote, payloads filled) lets the
registry answer the whole conversation by joining texts it holds with the new ones, instead
of reading every message and tool ref again and filling them: O(new) plus a copy. Another
replica, or an evicted entry, takes the whole path through Redis (one batched read).

Entries are immutable (a history ref names its content); a continuation moves its
conversation's entry to the new head. A checkpoint kept with a head (`pair`) is held too,
as the head's prefix (its texts are the head's own strings): continuing either lets both
go. Bounded by the total characters held (LRU).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from threading import Lock

from toolref.lru import LRU


@dataclass(frozen=True, slots=True)
class Hydrated:
    """A history in full: each message's text, and the ref of each tool call in it."""

    texts: tuple[str, ...]
    references: dict[str, str]
    size: int  # characters of the texts

    @classmethod
    def of(cls, texts: tuple[str, ...], references: dict[str, str]) -> Hydrated:
        return cls(texts, references, sum(map(len, texts)))


Key = tuple[str, str]  # (tenant, history ref)


class HistoryCache:
    """LRU of `Hydrated` by (tenant, history ref), at most `limit` characters in all
    (0 keeps nothing). Thread-safe: routes read it on the loop, workers never touch it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._entries: LRU[Key, Hydrated] = LRU(sys.maxsize, limit, _size, self._dropped)
        self._siblings: dict[Key, str] = {}
        self._lock = Lock()

    def get(self, tenant: str, ref: str) -> Hydrated | None:
        with self._lock:
            return self._entries.get((tenant, ref))

    def put(self, tenant: str, ref: str, entry: Hydrated, replaces: str | None = None) -> None:
        """Keep `entry` as history `ref`; `replaces`: the history it continued, dropped
        with its sibling (its conversation has moved on: a client would send it again only
        after an edit)."""
        if entry.size > self.limit:
            return
        with self._lock:
            if replaces is not None:
                sibling = self._siblings.get((tenant, replaces))
                self._drop((tenant, replaces))
                if sibling is not None:
                    self._drop((tenant, sibling))
            self._entries.put((tenant, ref), entry)

    def pair(self, tenant: str, head: str, checkpoint: str) -> None:
        """`head` and `checkpoint` were kept by one request: continuing either drops both."""
        with self._lock:
            if (tenant, head) in self._entries and (tenant, checkpoint) in self._entries:
                self._siblings[(tenant, head)] = checkpoint
                self._siblings[(tenant, checkpoint)] = head

    def _drop(self, key: Key) -> None:
        self._entries.pop(key)
        self._siblings.pop(key, None)

    def _dropped(self, key: Key, _: Hydrated) -> None:
        self._siblings.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)


def _size(entry: Hydrated) -> int:
    return entry.size
