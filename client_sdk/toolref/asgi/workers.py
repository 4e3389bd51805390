"""`Workers`: CPU work on large bodies in worker threads, "in a thread if large" written once.

Parsing, digests, filling, inflating, splicing, summaries and handoffs of a body of
`threshold` bytes or more run in a worker thread, so the event loop keeps answering small
requests (and `/healthz`) while a large one is worked on. Smaller work runs inline: a thread
hop costs more than it saves. Used by the service (its own bounded pool, `work_threads`),
the middleware and the gateway's hydrator, and the relay (the loop's default executor when
no pool is given)."""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Final, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

# Pure-Python work holds the GIL; a thread is asked to hand it over after this long, so a
# large body being worked on delays the event loop by at most about this much at a time.
SWITCH_INTERVAL: Final = 0.001


class Workers:
    """Work of `threshold` bytes or more (None: never by size) in `threads` worker threads
    (None: the event loop's default executor). A pool of its own also asks the interpreter
    to hand the GIL over every `SWITCH_INTERVAL` (a process setting: the service's)."""

    def __init__(self, threads: int | None, threshold: int | None) -> None:
        self.threshold = threshold
        self._pool: ThreadPoolExecutor | None = None
        if threads is not None:
            self._pool = ThreadPoolExecutor(threads, thread_name_prefix="toolref-work")
            if sys.getswitchinterval() > SWITCH_INTERVAL:
                sys.setswitchinterval(SWITCH_INTERVAL)

    def here(self, size: int) -> bool:
        """Work of `size` bytes runs on the caller's thread (`run` calls it in place)."""
        return self.threshold is None or size < self.threshold

    async def run(self, size: int, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`work(*args, **kwargs)`: in a worker thread when `size` (the bytes it works on)
        is at least the threshold, else here."""
        if self.here(size):
            return work(*args, **kwargs)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(work, *args, **kwargs))

    async def offload(self, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`work(*args, **kwargs)` in a worker thread whatever its size (inflating a
        compressed chunk: a few KB may inflate to the whole body limit)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(work, *args, **kwargs))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
