"""Single flight: one computation of a summary however many requests, processes and replicas
ask for it at the same time (as dogpile.cache's `Lock` does over a backend's mutex).

Within a process, the requests for one slot share one task. Across processes, that task
takes the slot's lock (`toolref_server.storage.summary_store.SummaryStore`, the mutex),
reads the value again now that it holds it (as dogpile.cache does: another may have kept it
since the caller's read missed it) and computes only when there is none; or it waits for
the holder's value; a holder that vanished without one (its lock
expired or released) leaves the lock to be taken again.

The computation's outcome decides what the lock becomes (only while the lock is still the
one taken: its token, compared by the store): a value is kept (when it fits the
tenant's quota) and the lock released; a `SummarizerError` leaves a failure mark, so that
the waiters, and the asks until the mark expires, fall back at once; a `Skipped` (the model
was not asked) or any other exception releases it. No request waits more than `wait`
seconds, for its own computation or another's: it is then `Skipped` with reason `wait`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from toolref_server.registry.summarizers import SummarizerError
from toolref_server.storage.summary_store import Outcome, Slot, SummaryStore

log = logging.getLogger(__name__)

Create = Callable[[], Awaitable[str]]


class Skipped(SummarizerError):
    """The model was not asked: a quota, the breaker, a recent failure or the bound on
    waiting said no. Not a failure of the model (nothing is marked failed)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class SingleFlight:
    def __init__(self, store: SummaryStore, *, wait: float) -> None:
        self.store = store
        self.wait = wait
        self._inflight: dict[Slot, asyncio.Task[tuple[str, bool]]] = {}

    async def get_or_create(self, slot: Slot, create: Create) -> tuple[str, bool]:
        """(text, made elsewhere) for `slot`: from the task of this process already making
        it, or from a new one. Waits at most `wait` seconds; raises `SummarizerError` when
        the computation failed or was not made (`Skipped`)."""
        task = self._inflight.get(slot)
        joined = task is not None
        if task is None:
            task = asyncio.ensure_future(self._across(slot, create))
            self._inflight[slot] = task
            task.add_done_callback(lambda done: self._landed(slot, done))
        try:
            async with asyncio.timeout(self.wait):
                text, elsewhere = await asyncio.shield(task)
        except TimeoutError:
            log.warning("no summary for %s within %ss; using extractive", slot, self.wait)
            raise Skipped("wait", f"no summary within {self.wait}s") from None
        return text, elsewhere or joined

    def _landed(self, slot: Slot, task: asyncio.Task[tuple[str, bool]]) -> None:
        self._inflight.pop(slot, None)
        if not task.cancelled():
            task.exception()  # retrieved, even when every waiter gave up before it ended

    async def _across(self, slot: Slot, create: Create) -> tuple[str, bool]:
        """Compute under the slot's lock, or wait for whoever holds it (at most `wait`)."""
        deadline = asyncio.get_running_loop().time() + self.wait
        while True:
            # The value is read again with the lock: another may have kept it since this
            # request's read missed it (one round trip before, a whole computation later).
            token, text = await self.store.take(slot)
            if text is not None:
                return text, True
            if token is not None:
                return await self._holding(slot, token, create), False
            waited = await self.store.wait(slot, deadline)
            if waited.outcome is Outcome.MADE:
                assert waited.text is not None
                return waited.text, True
            if waited.outcome is Outcome.FAILED:
                raise Skipped("failed-recently", "this summary failed moments ago")
            if waited.outcome is Outcome.LATE:
                raise Skipped("wait", f"no summary after waiting {self.wait}s for another")
            # FREE: the holder is gone without a value; take the lock ourselves.

    async def _holding(self, slot: Slot, token: str, create: Create) -> str:
        """Compute under the lock `token` holds; what the lock becomes is done only while
        it still holds `token` (one that expired meanwhile may be another's now)."""
        try:
            text = await create()
        except Skipped:
            await self.store.release(slot, token)  # nothing failed: the next ask may make it
            raise
        except SummarizerError:
            # Remember the failure: the waiters fall back now, and so does every request
            # until the mark expires (then the next one asks the model again).
            await self.store.fail(slot, token)
            raise
        except BaseException:
            await self.store.release(slot, token)
            raise
        await self.store.keep(slot, token, text)
        return text
