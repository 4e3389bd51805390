"""`Workers`: CPU work on large bodies in worker threads, "in a thread if large" written once.

Parsing, digests, filling, inflating, splicing, summaries and handoffs of a body of
`threshold` bytes or more run in a worker thread, so the event loop keeps answering small
requests (and `/healthz`) while a large one is worked on. Smaller work runs inline: a thread
hop costs more than it saves. Work that steps through a JSON text item by item in Python
(messages, blocks, tool calls) is measured by its `weight`: a body of 16,000 tiny messages
is 520 KB, under the threshold by bytes, and took a second of the loop. Used by the service
(its own bounded pool, `work_threads`), the middleware and the gateway's hydrator, and the
relay (the loop's default executor when no pool is given).

A worker thread keeps nothing of the work once it is done (`_Handoff`): a pool's thread holds
what it ran (the callable, its arguments, the future and its result) until it next gets the
GIL, which on a busy machine may be well after the loop took the result and went on."""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Final, Generic, ParamSpec, TypeVar, cast

P = ParamSpec("P")
T = TypeVar("T")

# Pure-Python work holds the GIL; a thread is asked to hand it over after this long, so a
# large body being worked on delays the event loop by at most about this much at a time.
SWITCH_INTERVAL: Final = 0.001
# What one JSON object or array costs work that steps through a text item by item, in the
# bytes of C-speed work that take as long: a message through context editing's facts took
# 60-110 us, a tool call's record about 300 us, where the threshold's 512 KiB of C-speed
# work take about 15 ms (30 ns a byte). So a body of more than about 128 containers goes to
# a worker thread whatever its bytes.
CONTAINER_BYTES: Final = 4096
# What parsing a body costs (the C parser, the spans of its messages, the depth walk, the
# check of its text), in the same bytes: an object or array 0.6-2.2 us (a tool's schema, a
# tiny message), a value 0.1-1.7 us (a float's hook, a message's span: counted by the
# commas that part them); a msgpack body's bytes each up to 150 ns (a map of short keys:
# each checked in Python, on a loaded machine), an ext value up to 0.6 us. Measured in
# review: a JSON body of 99,000 zeros as its messages (198 KB) parsed in 110 ms, weighed
# its bytes alone. Bodies of those shapes weighed just under the threshold parse in 2-15
# ms (JSON) and 1-20 ms (msgpack) with the test suite running beside them (the shapes:
# tests/unit/test_workers.py).
PARSE_CONTAINER_BYTES: Final = 128
PARSE_VALUE_BYTES: Final = 64
PACKED_BYTE_COST: Final = 6


# Every byte but those that may open a msgpack map or array (fixmap 0x80-0x8f, fixarray
# 0x90-0x9f, array 16/32 0xdc 0xdd, map 16/32 0xde 0xdf): what `packed_weight` deletes;
# and every byte but those that may open an ext value (0xc7-0xc9, 0xd4-0xd8).
_NOT_PACKED_CONTAINERS: Final = bytes(
    b for b in range(256) if not (0x80 <= b <= 0x9F or 0xDC <= b <= 0xDF)
)
_NOT_PACKED_EXTS: Final = bytes(
    b for b in range(256) if not (0xC7 <= b <= 0xC9 or 0xD4 <= b <= 0xD8)
)


def weight(text: bytes | str) -> int:
    """The work a JSON text costs, in bytes (what `Workers.run` takes): its length, and
    `CONTAINER_BYTES` for each object or array it opens (braces and brackets counted at C
    speed, those inside strings too: more, never less). O(len(text)) at C speed."""
    if isinstance(text, str):
        return len(text) + CONTAINER_BYTES * (text.count("{") + text.count("["))
    return len(text) + CONTAINER_BYTES * (text.count(b"{") + text.count(b"["))


def parse_weight(data: bytes) -> int:
    """What parsing a JSON body costs, in bytes: its length, `PARSE_CONTAINER_BYTES` for
    each object or array it opens and `PARSE_VALUE_BYTES` for each comma (those inside
    strings too: more, never less). O(len(data)) at C speed."""
    containers = data.count(b"{") + data.count(b"[")
    return len(data) + PARSE_CONTAINER_BYTES * containers + PARSE_VALUE_BYTES * data.count(b",")


def packed_weight(data: bytes) -> int:
    """What parsing a msgpack body costs, in bytes: `PACKED_BYTE_COST` for each byte (a
    value may be one), `PARSE_CONTAINER_BYTES` for each byte that may open a map or an
    array and `PARSE_VALUE_BYTES` for each that may open an ext value (those inside strings
    and numbers too: more, never less; a msgpack body has no braces or commas to count).
    O(len(data)) at C speed: a pass deleting every other byte, for each."""
    containers = len(data.translate(None, _NOT_PACKED_CONTAINERS))
    exts = len(data.translate(None, _NOT_PACKED_EXTS))
    return (
        PACKED_BYTE_COST * len(data) + PARSE_CONTAINER_BYTES * containers + PARSE_VALUE_BYTES * exts
    )


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

    def weigh(self, *texts: bytes | str) -> int:
        """What work through the JSON `texts` costs (`weight`), counted only while it may
        stay under the threshold: once their lengths reach it, no brace is counted (a 32
        MiB body counted twice on the loop took tens of ms). O(min(their bytes, the
        threshold)) at C speed, and a step a text."""
        total = 0
        for text in texts:
            total += len(text)
            if self.threshold is None or total >= self.threshold:
                continue  # decided by size alone: nothing counted
            total = weight(text) - len(text) + total
        return total

    def weigh_parse(self, data: bytes, *, packed: bool) -> int:
        """What parsing a JSON (`parse_weight`) or msgpack (`packed_weight`) body costs,
        counted only while it may stay under the threshold. O(min(len(data), the
        threshold)) at C speed."""
        if self.threshold is None or len(data) >= self.threshold:
            return len(data)
        return packed_weight(data) if packed else parse_weight(data)

    def here(self, size: int) -> bool:
        """Work of `size` bytes runs on the caller's thread (`run` calls it in place)."""
        return self.threshold is None or size < self.threshold

    async def run(self, size: int, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`work(*args, **kwargs)`: in a worker thread when `size` (the bytes it works on)
        is at least the threshold, else here."""
        if self.here(size):
            return work(*args, **kwargs)
        return await self._in_thread(_Handoff(functools.partial(work, *args, **kwargs)))

    async def offload(self, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`work(*args, **kwargs)` in a worker thread whatever its size (inflating a
        compressed chunk: a few KB may inflate to the whole body limit)."""
        return await self._in_thread(_Handoff(functools.partial(work, *args, **kwargs)))

    async def _in_thread(self, handoff: _Handoff[T]) -> T:
        await asyncio.get_running_loop().run_in_executor(self._pool, handoff)
        return handoff.take()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


class _Handoff(Generic[T]):
    """One piece of work as a worker thread runs it, leaving the thread nothing of it.

    The pool's thread holds its work item (the callable, its arguments, the future and its
    result) until it next gets the GIL after setting the result: on a busy machine that may
    be after the loop has taken the result and gone on to the request's next steps, and what
    the item holds stays alive meanwhile (a request's inflated body, and its inflater, held
    through its registration: one more body at its peak, 7.02 times it where 6.02 is due).
    So the thread runs this: it lets go of the callable (and so of its arguments) before it
    returns, hands the pool's future nothing, and the caller takes the outcome out of it."""

    __slots__ = ("_error", "_result", "_work")

    def __init__(self, work: Callable[[], T]) -> None:
        self._work: Callable[[], T] | None = work
        self._result: T | None = None
        self._error: BaseException | None = None

    def __call__(self) -> None:  # in the worker thread
        work, self._work = self._work, None
        try:
            if work is not None:
                self._result = work()
        except BaseException as exc:  # the caller's, as the pool's future would have it
            self._error = exc
        finally:
            del work  # a traceback keeps this frame: not the callable with it

    def take(self) -> T:
        """The outcome, taken out: the result, or the exception raised."""
        result, error = self._result, self._error
        self._result = self._error = None
        if error is None:
            return cast(T, result)
        try:
            raise error
        finally:
            del error  # no cycle through this frame
