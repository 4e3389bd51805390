"""Whether the gateway takes edits (`application/vnd.toolref.edit`), and of which version:
asked at start (`GET /v1/capabilities`, `"edits": 6`, the highest it reads; 1 for a
gateway before size-guarded edits). Until it is known (the gateway down at start, or
answering 5xx or 429 while it rolls), a turn goes as it came, and the next asks again; so
does one whose document is not read whole within `toolref.registry.bounded.PROBLEM_READ_S`
and 64 KiB (its connection closed).

The version is relearnt while the relay runs: every answer's `Toolref-Edits` says one
(`said`), and so does an edit refused 400 `malformed-body` (a gateway rolled back to a
version that does not read those bytes: it reads less than them, and the capabilities are
asked again at once). The version written is the lowest said within `RECENT` seconds
where that one does not read the bytes this relay writes (else the highest said within it,
else the last said): replicas of 4 and 6 behind one address are sent what both read, not a
refused edit every other turn, while replicas of 5 and 6 (the same bytes) keep 6, each
answer tapped by its own `Toolref-Edits`; rolled forward, the relay writes more once no
lower version was said for `RECENT`. A 415 to an edit turns edits off, and the
capabilities are asked again `RECENT` seconds later. At most one entry per version is kept:
O(versions) a turn.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Final

import httpx

from toolref.edits.wire import VERSIONS, WRITTEN
from toolref.registry.bounded import aread_problem, is_read

EDITS_VERSION: Final = max(VERSIONS)  # the highest this relay writes
RECENT: Final = 300.0  # seconds a version said (an answer's, a refusal's) is written to


class Capabilities:
    """What the relay learnt of the gateway. `enabled`: False never sends an edit."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._edits: bool | None = None if enabled else False
        self._said: dict[int, float] = {}  # version -> when it was last said
        self._refused_at = 0.0  # a 415's time: edits off until `RECENT` after it
        self.clock: Callable[[], float] = time.monotonic
        self._lock = asyncio.Lock()

    @property
    def known(self) -> bool | None:
        """Whether the gateway takes edits; None while not known."""
        return self._edits

    @property
    def version(self) -> int:
        """The version to write: the lowest said within `RECENT` where it does not read the
        bytes this relay writes (below `WRITTEN`), else the highest said within it (taps
        follow each answer's own version: a replica of 5 beside one of 6 costs no tap of
        the other's answers), else the last said."""
        if not self._said:
            return EDITS_VERSION
        now = self.clock()
        recent = [v for v, at in self._said.items() if now - at < RECENT]
        if not recent:
            return max(self._said, key=self._said.__getitem__)
        return min(recent) if min(recent) < WRITTEN else max(recent)

    def said(self, version: int | None) -> None:
        """A version the gateway said (an answer's `Toolref-Edits`; None: none)."""
        if version is not None and version >= min(VERSIONS):
            self._said[min(version, EDITS_VERSION)] = self.clock()

    def unreadable(self, version: int) -> bool:
        """An edit of `version` was refused 400 `malformed-body`: the gateway reads less
        than its bytes (said), and the capabilities are asked again at the next
        `edits`. False: no lower version to write (the relay's own fault: edits paused)."""
        lower = min(version, WRITTEN) - 1
        if lower < min(VERSIONS):
            return False
        self.said(lower)
        self._edits = None if self.enabled else False
        return True

    async def edits(self, ask: Callable[[], Awaitable[httpx.Response]]) -> bool:
        """Whether to send edits; `ask` gets the capabilities document (the answer is kept;
        a gateway that cannot be reached, or answers 5xx or 429, is asked again at the next
        turn; after a 415, `RECENT` seconds later)."""
        refused_at = self._refused_at if self.enabled else 0.0
        if self._edits is False and refused_at and self.clock() - refused_at >= RECENT:
            self._edits, self._refused_at = None, 0.0
        if self._edits is not None:
            return self._edits
        async with self._lock:  # one question in flight, however many turns wait on it
            if self._edits is None:
                try:
                    response = await ask()
                    try:  # 64 KiB within `PROBLEM_READ_S` (toolref's is < 1 KiB), else none
                        await aread_problem(response)
                        body = response.content if is_read(response) else None
                    finally:
                        await response.aclose()
                except httpx.HTTPError:
                    return False
                if response.status_code >= 500 or response.status_code == 429 or body is None:
                    return False  # a gateway rolling, an ingress in between: asked again
                version = _edits_version(body) if response.status_code == 200 else None
                self.said(version)
                self._edits = version is not None
        return self._edits

    def refused(self) -> None:
        """The gateway answered 415 to an edit: requests as they came, and the capabilities
        asked again `RECENT` seconds from now."""
        self._edits, self._refused_at = False, max(self.clock(), 1e-9)


def _edits_version(body: bytes) -> int | None:
    """The highest edit version both read, from the capabilities document; None: none."""
    try:
        document = json.loads(body)
    except ValueError:
        return None
    found = document.get("edits") if isinstance(document, dict) else None
    if type(found) is not int or found < min(VERSIONS):
        return None
    return min(found, EDITS_VERSION)
