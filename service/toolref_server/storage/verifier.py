"""Record checks, remembered: a record's bytes are checked against its ref once
(`record.verified`: decoded, its content's SHA-256 recomputed, linear in the payloads and
in Python), and the same bytes read again are known sound by their own SHA-256 (C, several
times faster). Records are immutable, so bytes once sound stay sound; any other bytes under
the key (a flipped bit, a record planted) hash differently and are checked in full.

Records are kept decoded, so a record read again costs one SHA-256 of its bytes, neither
the check nor the decoding. Bounded: at most `limit` records and `chars` characters of
their tool names and payloads (LRU; a name is as long as a body lets it be, so it counts).
Thread-safe: the checks run in worker threads."""

from __future__ import annotations

import hashlib
from threading import Lock

from toolref.kit.lru import LRU
from toolref.wire.canonical import Ref
from toolref_server.storage import record
from toolref_server.storage.record import Record


class Verifier:
    """See the module docstring. `limit`: records remembered; `chars`: at most this many
    characters of their payloads, kept decoded (a record read again is then neither
    checked nor decoded); their tool names count too."""

    def __init__(self, limit: int, chars: int = 32 << 20) -> None:
        self.limit = limit
        self.chars = chars
        # SHA-256 of bytes -> record, its payload characters counted
        self._sound: LRU[bytes, Record] = LRU(max(limit, 1), chars, _chars)
        self._lock = Lock()

    def __call__(self, data: bytes, ref: Ref) -> Record | None:
        """`record.verified(data, ref)`, by the memory when these bytes were sound before."""
        key = hashlib.sha256(data).digest()
        with self._lock:
            known = self._sound.get(key)
        if known is not None:
            # The same bytes, sound before: sound still, but they must name this ref too.
            return known if known.digest[: len(ref.digest_prefix)] == ref.digest_prefix else None
        found = record.verified(data, ref)
        if found is not None and self.limit > 0 and _chars(found) <= self.chars:
            with self._lock:
                if key not in self._sound:
                    self._sound.put(key, found)
        return found

    def __len__(self) -> int:
        return len(self._sound)


def _chars(found: Record) -> int:
    return len(found.name) + len(found.payload.args) + len(found.payload.result)
