"""Gateway usage per tenant, upstream and minute: what one worker counted and has not yet
added to the store's per-minute counters (`toolref_server.storage.usage_counters`), which the
savings page reads (`toolref_server.routes.savings_page`).

Pure: the clock is handed in. A flush takes a numbered `Batch` of what was counted and lets
go of it only once the store confirms the write (`written`): a write that failed, timed out
or was cancelled is sent again, whole and under the same number, before anything counted
since; the store adds a batch once (exactly once per writer and number), so no count is lost
to a failure or counted twice by a retry. Bounded: at most `limit` minute x tenant x
upstream entries, the batch's included (`TOOLREF_USAGE_PENDING_SLOTS`; about 300 bytes
each): while the store is down, use of a new minute, tenant or upstream beyond it is dropped
(`add` says so; the entries held keep counting). Every `TOOLREF_SAMPLE_SECONDS` a flush
holds two minutes' worth, about. Entries older than `KEEP_MINUTES` are dropped when a batch
is taken (the store's counters live that long).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Final, NamedTuple

MINUTE: Final = 60
KEEP_MINUTES: Final = 24 * 60  # the longest window the page shows: a day
SLOTS: Final = 20_000  # TOOLREF_USAGE_PENDING_SLOTS' default: about 6 MB


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


@dataclass(frozen=True, slots=True)
class Batch:
    """What one flush writes: this worker's `number`-th batch (from 1, in the order taken)."""

    number: int
    counts: dict[Slot, Counts]


class Pending:
    """What this worker counted and the store has not confirmed, per minute, tenant and
    upstream: at most `limit` entries. `writer` names this worker to the store (random:
    one per process), which adds each of its batches once."""

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        limit: int = SLOTS,
        writer: str | None = None,
    ) -> None:
        self.clock = clock
        self.limit = limit
        self.writer = writer if writer is not None else secrets.token_hex(8)
        self._counts: dict[Slot, Counts] = {}
        self._batch: Batch | None = None  # taken, not confirmed written
        self._taken = 0

    def __len__(self) -> int:
        return len(self._counts) + (len(self._batch.counts) if self._batch else 0)

    def add(self, tenant: str, upstream: str, counts: Counts) -> bool:
        """Count `counts`; False: dropped, `limit` entries held and this one new."""
        slot = Slot(int(self.clock() // MINUTE), tenant, upstream)
        held = self._counts.get(slot)
        if held is None:
            if len(self) >= self.limit:
                return False
            held = Counts()
        self._counts[slot] = held + counts
        return True

    def batch(self) -> Batch | None:
        """The batch to write next: the one taken before and not confirmed written (sent
        again as it was, but minutes older than a day), else everything counted since, as
        a new batch; None when there is nothing to write."""
        oldest = int(self.clock() // MINUTE) - KEEP_MINUTES
        if self._batch is not None:
            if any(slot.minute <= oldest for slot in self._batch.counts):
                self._batch = Batch(self._batch.number, _since(self._batch.counts, oldest))
            if self._batch.counts:
                return self._batch
            self._batch = None
        counts, self._counts = _since(self._counts, oldest), {}
        if not counts:
            return None
        self._taken += 1
        self._batch = Batch(self._taken, counts)
        return self._batch

    def written(self, batch: Batch) -> None:
        """`batch` is in the store: let go of it (a no-op when another flush did)."""
        if self._batch is not None and self._batch.number == batch.number:
            self._batch = None


def _since(counts: dict[Slot, Counts], oldest: int) -> dict[Slot, Counts]:
    return {slot: value for slot, value in counts.items() if slot.minute > oldest}


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
