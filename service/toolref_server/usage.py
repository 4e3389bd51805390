"""Gateway usage per tenant, upstream and minute: what one worker counted and has not yet
added to the store's per-minute counters (`toolref_server.storage.usage_counters`), which the
savings page reads (`toolref_server.routes.savings_page`).

Pure: the clock is handed in. Bounded: an entry per minute x tenant x upstream counted
since the last flush (every `TOOLREF_SAMPLE_SECONDS`: two minutes' worth, about); entries a
failed flush puts back are kept at most `KEEP_MINUTES` (the store's counters live that
long), so an engine down for a day holds at most a day of minutes per tenant and upstream.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Final, NamedTuple

MINUTE: Final = 60
KEEP_MINUTES: Final = 24 * 60  # the longest window the page shows: a day


@dataclass(frozen=True, slots=True)
class Counts:
    """Gateway LLM requests, those answered 409 (each sent again in full by its client),
    their bytes as forwarded (raw) and as received (wire); with context editing, the
    estimated input tokens sent upstream (`tokens`) and saved (`tokens_saved`)."""

    requests: int = 0
    resends: int = 0
    raw: int = 0
    wire: int = 0
    tokens: int = 0
    tokens_saved: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(Counts)))

    def items(self) -> Iterator[tuple[str, int]]:
        """(field, value) of each field that is not 0."""
        for field in fields(self):
            value: int = getattr(self, field.name)
            if value:
                yield field.name, value


FIELDS: Final = tuple(field.name for field in fields(Counts))


class Slot(NamedTuple):
    minute: int  # epoch seconds // 60
    tenant: str
    upstream: str


class Pending:
    """What this worker counted since its last flush, per minute, tenant and upstream."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._counts: dict[Slot, Counts] = {}

    def __len__(self) -> int:
        return len(self._counts)

    def add(self, tenant: str, upstream: str, counts: Counts) -> None:
        slot = Slot(int(self.clock() // MINUTE), tenant, upstream)
        self._counts[slot] = self._counts.get(slot, Counts()) + counts

    def drain(self) -> dict[Slot, Counts]:
        """Everything counted, handed over (and forgotten here)."""
        drained, self._counts = self._counts, {}
        return drained

    def restore(self, drained: dict[Slot, Counts]) -> None:
        """Put back what a flush could not write, but what is older than a day."""
        oldest = int(self.clock() // MINUTE) - KEEP_MINUTES
        for slot, counts in drained.items():
            if slot.minute > oldest:
                self._counts[slot] = self._counts.get(slot, Counts()) + counts


def window(
    minutes: Mapping[Slot, Counts], now_minute: int, span: int
) -> dict[tuple[str, str], Counts]:
    """Each (tenant, upstream)'s use over the last `span` minutes, the current one included
    (`minutes` as the store's `read` gives them)."""
    found: dict[tuple[str, str], Counts] = {}
    for slot, counts in minutes.items():
        if now_minute - span < slot.minute <= now_minute:
            pair = (slot.tenant, slot.upstream)
            found[pair] = found.get(pair, Counts()) + counts
    return found
