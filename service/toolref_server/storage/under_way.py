"""`UnderWay`: the store writes this process started and has not seen end, by what they
write, so that what reads or deletes the same thing waits for them rather than miss it.

A turn the relay's channel carried ends its answer before its recipe and its answer are
stored (its next turn comes to this process): the next turn's recipe load waits for the
recipe's keep (`Recipes.load`), its answer read for the answer's write (`Answers.get`), and
its own keep, which deletes that answer from the store, for that write too (`Recipes.keep`:
else a late write would leave it there until its TTL).

In this process's memory only, and only an optimization of what the store holds: another
worker or replica reads the store (a write not yet there costs that turn one resend). An
entry lives while its task runs, or until a later write of the same thing takes its place
(at most two per request in flight: a channel turn's keep and answer write; each removed
when its task ends, by identity). Its owner reports how a write ended. The writes running
are counted per tenant (`busy`): one tenant's never make another's wait. Event loop only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from typing import Final

log = logging.getLogger(__name__)

RECIPE: Final = "recipe"  # (RECIPE, tenant, ref): a recipe's keep
ANSWER: Final = "answer"  # (ANSWER, tenant, ref): the write of a recipe's answer

What = tuple[str, str, str]  # (RECIPE or ANSWER, tenant, ref)


class UnderWay:
    """See the module docstring."""

    def __init__(self) -> None:
        self._tasks: dict[Hashable, asyncio.Task[object]] = {}
        self._running: dict[str, int] = {}  # tenant -> its writes running (O(1) `busy`)
        self._total = 0
        self._all: set[asyncio.Task[object]] = set()  # every write running (`drained`)

    def add(self, what: What, task: asyncio.Task[object]) -> None:
        """`task` writes `what` (until it ends: `settled` waits for it)."""
        self._tasks[what] = task
        tenant = what[1]
        self._running[tenant] = self._running.get(tenant, 0) + 1
        self._total += 1
        self._all.add(task)

        def ended(done: asyncio.Task[object]) -> None:
            if self._tasks.get(what) is done:
                del self._tasks[what]
            self._all.discard(done)
            self._total -= 1
            left = self._running[tenant] - 1
            if left:
                self._running[tenant] = left
            else:
                del self._running[tenant]
            if not done.cancelled() and (error := done.exception()) is not None:
                log.debug("a store write under way failed: %r", error)  # its owner says how

        task.add_done_callback(ended)

    async def settled(self, what: Hashable) -> None:
        """Until a write of `what` under way here ended, however it ended (its own caller
        reports how); at once when there is none, or when asked from within it."""
        task = self._tasks.get(what)
        if task is not None and task is not asyncio.current_task():
            await asyncio.wait({task})

    async def drained(self, seconds: float) -> int:
        """Until every write running here ended, at most `seconds` (a stop: the store's
        client closes after it, and a write it cut would cost its next turn a resend); how
        many were still running then."""
        if self._all:
            await asyncio.wait(set(self._all), timeout=seconds)
        return len(self._all)

    def busy(self, tenant: str, most: int, most_all: int) -> bool:
        """Whether `tenant` has `most` writes or more under way, or the process
        `most_all` (the store behind): what would go on after an answer's end should then
        be waited for before it. Another tenant's writes count only in the second."""
        return self._running.get(tenant, 0) >= most or self._total >= most_all
