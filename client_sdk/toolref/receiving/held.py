"""`HeldRequests`: the requests a chat backend's middleware restored, as segments by the
recipe kept for each (`tb_...`), least recently used dropped first, bounded by their bytes.

The next edit of a conversation names the recipe of its last request as its base: when this
process holds it, the registry answers that edit with what changed (ranges of the base
kept, the rest carried: `POST /v1/edits:apply` with `Toolref-Held`), not the whole request,
so a turn costs the registry, the link and the middleware what changed. A cache only: a
recipe not held here (another worker or replica restored the turn before, or it was
dropped) costs the answer the whole request, never a resend or a byte of savings.

Segments kept of a base are shared with it (list slices, no copies); a request's weight is
its segments' bytes, so shared ones count twice and the bound is conservative.
"""

from __future__ import annotations

import re
from typing import Final

from toolref.edits import compact
from toolref.edits.recipe import ID_BYTES, recipe_ref_of
from toolref.kit.lru import LRU
from toolref.registry.answers import AppliedEdit, HeldRequest

# The start of an edit's header line as toolref's senders write it: the base's ref, read
# without parsing the line (an edit written otherwise is answered whole: never wrong).
_BASE: Final = re.compile(rb'\{"v":[0-9]+,"b":"(tb_[a-z2-7]{26})"')
MAX_REQUESTS: Final = 4096  # recipes held at most, whatever their size


def base_of(edit: bytes) -> str | None:
    """The recipe an edit names as its base, read from its first bytes; None when it names
    none, or is not written as toolref's senders write it. O(1)."""
    if edit[:1] and edit[0] in compact.MARKS:  # versions 4, 5: the base's id after the flags
        has_base = len(edit) >= 2 + ID_BYTES and edit[1] & 1
        return recipe_ref_of(edit[2 : 2 + ID_BYTES]) if has_base else None
    found = _BASE.match(edit, 0, 64)
    return found.group(1).decode("ascii") if found else None


# What a held segment costs beside its bytes: a bytes object's head (33 bytes in CPython)
# and its slot in the tuple, rounded up. Without it, requests of many tiny segments held
# eight to forty times `max_bytes`.
SEGMENT_OVERHEAD: Final = 64


def weight(held: HeldRequest) -> int:
    """The memory `held` takes, as counted against `max_bytes`: its bytes, and each
    segment's overhead. O(segments)."""
    return sum(map(len, held.segments)) + SEGMENT_OVERHEAD * len(held.segments)


class HeldRequests:
    """See the module docstring. `max_bytes` 0 holds nothing."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lru: LRU[str, HeldRequest] = LRU(MAX_REQUESTS, max_bytes, weight)

    def get(self, ref: str | None) -> HeldRequest | None:
        return self._lru.get(ref) if ref is not None else None

    def keep(self, applied: AppliedEdit) -> None:
        """`applied`'s request, when the registry answered its segments."""
        if applied.segments and self.max_bytes:
            self._lru.put(applied.ref, HeldRequest(applied.ref, applied.segments))
