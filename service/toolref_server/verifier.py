"""Record checks, remembered: a record's bytes are checked against its ref once
(`record.verified`: decoded, its content's SHA-256 recomputed, linear in the payloads and
in Python), and the same bytes read again are known sound by their own SHA-256 (C, several
times faster). Records are immutable, so bytes once sound stay sound; any other bytes under
the key (a flipped bit, a record planted) hash differently and are checked in full.

Bounded: at most `limit` remembered (LRU), about 100 bytes each. Thread-safe: the checks
run in worker threads."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from threading import Lock

from toolref.canonical import Ref
from toolref_server import record
from toolref_server.record import Record


class Verifier:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._sound: OrderedDict[bytes, bytes] = OrderedDict()  # SHA-256 of bytes -> ref prefix
        self._lock = Lock()

    def __call__(self, data: bytes, ref: Ref) -> Record | None:
        """`record.verified(data, ref)`, by the memory when these bytes were sound before."""
        key = hashlib.sha256(data).digest()
        with self._lock:
            known = self._sound.get(key)
            if known is not None:
                self._sound.move_to_end(key)
        if known is not None and known == ref.digest_prefix:
            try:
                return record.decode(data)
            except Exception:  # unreachable for bytes once decoded; never serve on doubt
                return None
        found = record.verified(data, ref)
        if found is not None and self.limit > 0:
            with self._lock:
                self._sound[key] = ref.digest_prefix
                while len(self._sound) > self.limit:
                    self._sound.popitem(last=False)
        return found

    def __len__(self) -> int:
        return len(self._sound)
