"""Whether the gateway takes edits (`application/vnd.toolref.edit`), and of which version:
asked once per start (`GET /v1/capabilities`, `"edits": 6`, the highest it reads; 1 for a
gateway before size-guarded edits) and kept; a 415 to an edit says no as well. Until it is
known (the gateway down at start, or answering 5xx or 429 while it rolls), a turn goes as
it came, and the next asks again; so does one whose document is not read whole within
`toolref.registry.bounded.PROBLEM_READ_S` and 64 KiB (its connection closed)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Final

import httpx

from toolref.edits.wire import VERSIONS
from toolref.registry.bounded import aread_problem, is_read

EDITS_VERSION: Final = max(VERSIONS)  # the highest this relay writes


class Capabilities:
    """What this start learnt of the gateway. `enabled`: False never sends an edit."""

    def __init__(self, enabled: bool = True) -> None:
        self._edits: bool | None = None if enabled else False
        self.version = EDITS_VERSION  # what the gateway reads (known with `edits`)
        self._lock = asyncio.Lock()

    @property
    def known(self) -> bool | None:
        """Whether the gateway takes edits; None while not known."""
        return self._edits

    async def edits(self, ask: Callable[[], Awaitable[httpx.Response]]) -> bool:
        """Whether to send edits; `ask` gets the capabilities document (once: the answer is
        kept; a gateway that cannot be reached, or answers 5xx or 429, is asked again at the
        next turn)."""
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
                if version is not None:
                    self.version = version
                self._edits = version is not None
        return self._edits

    def refused(self) -> None:
        """The gateway answered 415 to an edit: requests as they came from now on."""
        self._edits = False


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
