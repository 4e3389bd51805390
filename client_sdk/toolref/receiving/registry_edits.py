"""`RegistryEdits`: the version of edits a chat backend's middleware tells its clients
(`Toolref-Edits`): the lower of its own and its registry's, kept in step with the registry
while the middleware runs.

Asked at start-up (`start`). Asked again when the registry refuses an edit as unreadable
(400 `malformed-body`, `unreadable`: a registry rolled back to a version that does not read
the edit's bytes), before that edit's 415 is answered: at most once per `RECHECK_SECONDS`,
one question in flight, which every refusal meanwhile waits on. The request as it is that
the sender sends next, and every answer after it, then tell the lower version, so every
sender steps down (one of an older release too, which learns the version from answers
alone): a rolled-back registry costs each sender one refused edit, not one after each
pause, for ever. While the version told is below the middleware's own, a request asks again
once `RAISE_SECONDS` passed since the last question (`due`, in the background: no request
waits on it), so a registry rolled forward is followed within about that. A question that
fails (the registry unreachable, slow) keeps the version told.

Bounded: one question in flight; at most one per `RECHECK_SECONDS` on refusals and one per
`RAISE_SECONDS` otherwise, each within `TIMEOUT` seconds. Per middleware (per process):
each replica asks its registry for itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Final

from toolref.edits import wire
from toolref.registry.port import Registry

RECHECK_SECONDS: Final = 30.0  # the least time between two questions after refusals
# between two, while the version told is below this one's: a sender's `said.RECENT` (a
# receiver imports no sender: tests/unit/test_architecture.py; the two kept equal by
# tests/integration/test_backend_registry_rollback.py)
RAISE_SECONDS: Final = 300.0
TIMEOUT: Final = 5.0  # seconds a question may take
log = logging.getLogger(__name__)


class RegistryEdits:
    """See the module docstring. `version`: the version told now; `clock`: monotonic
    seconds (settable in tests); `rechecking`: the last question asked again (None: none)."""

    def __init__(self) -> None:
        self.version = wire.VERSION
        self.clock: Callable[[], float] = time.monotonic
        self.rechecking: asyncio.Task[None] | None = None
        self._asked_at: float | None = None  # the last question's time
        self._refused_at: float | None = None  # the last a refusal asked's

    async def start(self, registry: Registry) -> None:
        """Asked at start-up: this version when the registry does not say."""
        self._asked_at = self.clock()
        found = await asked(registry)
        self.version = wire.VERSION if found is None else found

    async def unreadable(self, registry: Registry) -> None:
        """The registry refused an edit as unreadable: asked again (at most once per
        `RECHECK_SECONDS`), waited for, so the answers after it tell what it says."""
        task = self.rechecking
        if task is None or task.done():
            now = self.clock()
            if self._refused_at is not None and now - self._refused_at < RECHECK_SECONDS:
                return
            self._refused_at = now
            task = self._ask(registry)
        await asyncio.shield(task)  # the question goes on if this request is cancelled

    def due(self, registry: Registry) -> None:
        """Asked again in the background while the version told is below this one's and
        `RAISE_SECONDS` passed since the last question: a registry rolled forward."""
        task, at = self.rechecking, self._asked_at
        if self.version >= wire.VERSION or (task is not None and not task.done()):
            return
        if at is None or self.clock() - at >= RAISE_SECONDS:
            self._ask(registry)

    def _ask(self, registry: Registry) -> asyncio.Task[None]:
        """A new question (none is in flight)."""
        self._asked_at = self.clock()
        self.rechecking = asyncio.ensure_future(self._again(registry))
        return self.rechecking

    async def _again(self, registry: Registry) -> None:
        found = await asked(registry)
        if found is not None and found != self.version:
            log.warning(
                "toolref: %s now applies edits up to version %d (was told %d): clients are told %d",
                registry.location,
                found,
                self.version,
                found,
            )
            self.version = found


async def asked(registry: Registry) -> int | None:
    """The lower of this version of edits and the registry's (a sender then writes only
    what the registry applies); None when the registry does not say (logged)."""
    try:
        theirs = await asyncio.wait_for(registry.edits(), TIMEOUT)
    except Exception as exc:  # any failure: the version told is kept
        log.warning("toolref registry's version of edits unknown: %s", exc)
        return None
    return min(wire.VERSION, theirs)
