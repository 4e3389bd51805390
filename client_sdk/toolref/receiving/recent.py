"""`Recent`: the histories a backend saw confirmed, kept to continue them cheaply (LRU).

For each history: its messages in full as their client wrote them (kept only when the
registry does not hold them itself, `Registry.holds_histories`), the body of the request it
was confirmed for (its last `DICTIONARY_LIMIT` bytes: a later body may be compressed
against it, `Toolref-Dictionary`), and the zstd dictionary built from the messages once it
is first needed. Keys are (scope, history ref): one memory may serve several tenants, each
apart (the gateway's), and a history of one scope is never found under another.

Bounded by count and by characters (texts and bodies together), least recently used
dropped first. Used on the event loop only (no lock).
"""

from __future__ import annotations

from dataclasses import dataclass

from toolref.history import DICTIONARY_LIMIT
from toolref.lru import LRU

Key = tuple[str, str]  # (scope, history ref)


@dataclass(slots=True)
class Entry:
    """One confirmed history; see the module docstring."""

    texts: tuple[str, ...]
    size: int
    prior: bytes | None = None
    dictionary: bytes | None = None
    # The other history confirmed by the same answer (a head and its checkpoint): once
    # either is continued, the other is not needed any more.
    sibling: str | None = None

    @classmethod
    def of(cls, texts: tuple[str, ...], prior: bytes | None = None) -> Entry:
        prior = prior[-DICTIONARY_LIMIT:] if prior is not None else None
        return cls(texts, sum(map(len, texts)) + len(prior or b""), prior)


class Recent:
    """At most `histories` entries and `chars` characters (texts and bodies) in all."""

    def __init__(self, histories: int, chars: int) -> None:
        self._entries: LRU[Key, Entry] = LRU(histories, chars, _size)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    @property
    def size(self) -> int:
        return self._entries.size

    def get(self, scope: str, ref: str | None) -> Entry | None:
        """The entry of history `ref` (made the most recent), or None."""
        return None if ref is None else self._entries.get((scope, ref))

    def remember(self, scope: str, ref: str, entry: Entry, replaces: str | None = None) -> None:
        """Keep `entry` as history `ref`; `replaces`: the history it continued, dropped
        with its sibling (its conversation moved on). Then the oldest go, past a bound."""
        if replaces is not None:
            continued = self._entries.pop((scope, replaces))
            if continued is not None and continued.sibling is not None:
                self._entries.pop((scope, continued.sibling))
        self._entries.put((scope, ref), entry)

    def pair(self, scope: str, head: str, checkpoint: str) -> None:
        """`head` and `checkpoint` were confirmed by one answer: each is the other's sibling."""
        for ref, other in ((head, checkpoint), (checkpoint, head)):
            found = self._entries.peek((scope, ref))
            if found is not None:
                found.sibling = other


def _size(entry: Entry) -> int:
    return entry.size
