"""Whether the gateway takes edits (`application/vnd.toolref.edit`), and of which version:
asked at the first turn (`GET /v1/capabilities`, `"edits": 6`, the highest it reads; 1 for a
gateway before size-guarded edits). Until it is known (the gateway down at start, or
answering 5xx or 429 while it rolls), a turn goes as it came, and the next asks again; so
does one whose document is not read whole within `toolref.registry.bounded.PROBLEM_READ_S`
and 64 KiB (its connection closed).

The version is relearnt while the relay runs: every answer's `Toolref-Edits` says one
(`said`), and so does an edit refused 400 `malformed-body` (a gateway rolled back to a
version that does not read those bytes: it reads less than them, and the capabilities are
asked again at once). The version written follows every sender's rule,
`toolref.sending.said` (the SDK's `Sender` follows it too): the lowest said within
`RECENT` seconds where that one does not read the bytes this relay writes (else the highest
said within it, else the last said): replicas of 4 and 6 behind one address are sent what
both read, not a refused edit every other turn, while replicas of 5 and 6 (the same bytes)
keep 6, each answer tapped by its own `Toolref-Edits`; rolled forward, the relay writes
more once no lower version was said for `RECENT`. A 415 to an edit turns edits off, and the
capabilities are asked again `RECENT` seconds later; so does a capabilities answer that says
no edits (a 4xx, a page that is no document: a proxy before the gateway, answering the
question asked again after a `malformed-body`, no longer turns edits off for the whole run).
At most one entry per version is kept: O(versions) a turn. The document's
`limits.keep_alive_seconds` is kept too (`keep_alive`: how long the gateway keeps an idle
connection; the relay's `pool` keeps one for less).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Final

import httpx

from toolref.edits.wire import VERSIONS
from toolref.registry.bounded import aread_problem, is_read
from toolref.sending.said import RECENT, Said

EDITS_VERSION: Final = max(VERSIONS)  # the highest this relay writes


class Capabilities:
    """What the relay learnt of the gateway. `enabled`: False never sends an edit."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._edits: bool | None = None if enabled else False
        self._said = Said()  # the versions the gateway said, each with when
        self._refused_at: float | None = None  # a 415's time: no edits until `RECENT` after
        self.clock: Callable[[], float] = time.monotonic
        self._lock = asyncio.Lock()
        self.keep_alive: int | None = None  # the gateway's `keep_alive_seconds`, as said

    @property
    def known(self) -> bool | None:
        """Whether the gateway takes edits; None while not known."""
        return self._edits

    @property
    def version(self) -> int:
        """The version to write (`toolref.sending.said.Said.version`: taps follow each
        answer's own version, so a replica of 5 beside one of 6 costs no tap of the other's
        answers); the highest this relay writes while none was said."""
        found = self._said.version(self.clock())
        return EDITS_VERSION if found is None else found

    def said(self, version: int | None) -> None:
        """A version the gateway said (an answer's `Toolref-Edits`; None: none)."""
        self._said.said(version, self.clock())

    def unreadable(self, version: int) -> bool:
        """An edit of `version` was refused 400 `malformed-body`: the gateway reads less
        than its bytes (said), and the capabilities are asked again at the next
        `edits`. False: no lower version to write (the relay's own fault: edits paused)."""
        if not self._said.unreadable(version, self.clock()):
            return False
        self._edits = None if self.enabled else False
        return True

    async def edits(self, ask: Callable[[], Awaitable[httpx.Response]]) -> bool:
        """Whether to send edits; `ask` gets the capabilities document (the answer is kept;
        a gateway that cannot be reached, or answers 5xx or 429, is asked again at the next
        turn; after a 415 or an answer that says no edits, `RECENT` seconds later)."""
        at = self._refused_at
        if self.enabled and self._edits is False and at is not None and self.clock() - at >= RECENT:
            self._edits, self._refused_at = None, None
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
                document = _document(body) if response.status_code == 200 else {}
                version = _edits_version(document)
                self.keep_alive = _keep_alive(document)
                self.said(version)
                self._edits = version is not None
                if not self._edits:  # none said (a proxy's 404 or page too): asked again later
                    self._refused_at = self.clock()
        return self._edits

    def refused(self) -> None:
        """The gateway answered 415 to an edit: requests as they came, and the capabilities
        asked again `RECENT` seconds from now."""
        self._edits, self._refused_at = False, self.clock()


def _document(body: bytes) -> dict[str, object]:
    """The capabilities document (empty: not a JSON object)."""
    try:
        document = json.loads(body)
    except ValueError:
        return {}
    return document if isinstance(document, dict) else {}


def _edits_version(document: dict[str, object]) -> int | None:
    """The highest edit version both read, from the capabilities document; None: none."""
    found = document.get("edits")
    if type(found) is not int or found < min(VERSIONS):
        return None
    return min(found, EDITS_VERSION)


def _keep_alive(document: dict[str, object]) -> int | None:
    """The seconds the gateway keeps an idle connection (`keep_alive_seconds`); None: not
    said."""
    limits = document.get("limits")
    found = limits.get("keep_alive_seconds") if isinstance(limits, dict) else None
    return found if type(found) is int and found > 0 else None
