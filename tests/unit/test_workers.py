"""`toolref.asgi.workers`: work in a worker thread leaves the thread nothing of it.

Found: the pool's thread keeps its work item (the callable, its arguments, the future and its
result) until it next gets the GIL after setting the result. On a busy machine the loop may
take the result and go on first: the REST hydrate route's inflated body (the result of
`Inflater.finish`) stayed alive through the request's registration, one more body at its
peak (7.02 times the body in tests/adversarial/test_memory_bounds.py, now and then, where
6.02 is due), and its inflater and sink with it ("2 inflaters alive"). Here the thread is
made to hold its item until told, deterministically."""

from __future__ import annotations

import asyncio
import concurrent.futures.thread as pool_thread
import gc
import json
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest

from toolref.asgi.workers import (
    CONTAINER_BYTES,
    PACKED_BYTE_COST,
    PARSE_CONTAINER_BYTES,
    PARSE_VALUE_BYTES,
    Workers,
    packed_weight,
    parse_weight,
    weight,
)


class Blob:
    """Stands for a body: alive or not, by its weakref."""


def made_from(given: Blob) -> Blob:
    return Blob()


def failing(given: Blob) -> Blob:
    raise ValueError("no")


@pytest.fixture
def slow_to_let_go(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Each worker thread holds the work item it ran (as a thread that does not get the GIL
    back does) until the test ends; the items held, listed."""
    release = threading.Event()
    held: list[Any] = []
    run = pool_thread._WorkItem.run

    def holding(item: Any, *args: Any) -> None:
        run(item, *args)
        held.append(item)
        release.wait(30)

    monkeypatch.setattr(pool_thread._WorkItem, "run", holding)
    try:
        yield held
    finally:
        release.set()


def test_the_thread_keeps_neither_the_arguments_nor_the_result(slow_to_let_go: list[Any]) -> None:
    async def main() -> tuple[weakref.ref[Blob], weakref.ref[Blob]]:
        workers = Workers(2, 0)
        try:
            given = Blob()
            made = await workers.run(1, made_from, given)
            refs = weakref.ref(given), weakref.ref(made)
            del given, made
            gc.collect()
            return refs
        finally:
            workers.close()

    given, made = asyncio.run(main())
    assert slow_to_let_go, "the thread let go of its work item: nothing tested"
    assert given() is None
    assert made() is None


def test_offloaded_work_and_its_object_are_let_go_too(slow_to_let_go: list[Any]) -> None:
    """`offload(inflater.finish)`: the bound method kept its inflater alive."""

    class Finisher:
        def finish(self) -> Blob:
            return Blob()

    async def main() -> tuple[weakref.ref[Finisher], weakref.ref[Blob]]:
        workers = Workers(2, None)
        try:
            finisher = Finisher()
            made = await workers.offload(finisher.finish)
            refs = weakref.ref(finisher), weakref.ref(made)
            del finisher, made
            gc.collect()
            return refs
        finally:
            workers.close()

    finisher, made = asyncio.run(main())
    assert slow_to_let_go
    assert finisher() is None
    assert made() is None


def test_an_exception_reaches_the_caller_and_the_thread_keeps_it_not(
    slow_to_let_go: list[Any],
) -> None:
    async def main() -> weakref.ref[Blob]:
        workers = Workers(1, 0)
        try:
            given = Blob()
            ref = weakref.ref(given)
            with pytest.raises(ValueError, match="no") as caught:
                await workers.run(1, failing, given)
            del given, caught  # its traceback holds `failing` and its argument
            gc.collect()
            return ref
        finally:
            workers.close()

    assert asyncio.run(main())() is None
    assert slow_to_let_go


def test_small_work_runs_in_place_and_large_in_a_worker_thread() -> None:
    async def main() -> tuple[str, str]:
        workers = Workers(1, 100)
        try:
            here = await workers.run(99, lambda: threading.current_thread().name)
            there = await workers.run(100, lambda: threading.current_thread().name)
            return here, there
        finally:
            workers.close()

    here, there = asyncio.run(main())
    assert here == threading.current_thread().name
    assert there.startswith("toolref-work")


def test_a_json_text_weighs_its_bytes_and_its_containers() -> None:
    """Work that steps through a JSON text item by item costs per object and array, not
    only per byte: `weight` counts both, at C speed, for text and bytes alike."""
    tiny = '{"messages":[' + ",".join('{"role":"user","content":"x"}' for _ in range(200)) + "]}"
    assert weight(tiny) == len(tiny) + CONTAINER_BYTES * 202
    assert weight(tiny.encode()) == weight(tiny)
    assert weight(tiny) >= 512 << 10 > len(tiny)  # past the default threshold: a thread's
    text = '"' + "a" * 600_000 + '"'
    assert weight(text) == len(text)  # a long string: its bytes alone
    assert weight("") == 0


def test_a_msgpack_body_weighs_what_parsing_it_costs() -> None:
    """A msgpack body has no braces: `packed_weight` counts each byte (a value may be one),
    and the bytes that may open a map or an array, or an ext value, never fewer than it
    holds."""
    tiny = msgpack.packb({"messages": [{"role": "user", "content": "x"}] * 200})
    assert weight(tiny) == len(tiny)  # no braces: by its bytes alone
    assert packed_weight(tiny) >= PACKED_BYTE_COST * len(tiny) + PARSE_CONTAINER_BYTES * 202
    wide = msgpack.packb([[]] * 70_000 + [{}] * 70_000)  # array 32, maps and arrays in it
    assert packed_weight(wide) == PACKED_BYTE_COST * len(wide) + PARSE_CONTAINER_BYTES * 140_001
    big = msgpack.packb([msgpack.ExtType(1, b"7")] * 1000)  # fixext 1: 0xd4 each
    assert packed_weight(big) >= PACKED_BYTE_COST * len(big) + PARSE_VALUE_BYTES * 1000
    text = msgpack.packb("a" * 600_000)
    assert packed_weight(text) == PACKED_BYTE_COST * len(text)  # a long string: its bytes


@pytest.mark.parametrize(
    "body",
    [
        json.dumps({"messages": [0] * 99_000}),  # 198 KB: each message's span in Python
        json.dumps({"v": [1.5] * 99_000}),  # a float hook each
        json.dumps({"v": [""] * 100_000 + ["\ud83d\ude00"]}),  # each string's text checked
    ],
    ids=["zeros-as-messages", "floats", "empty-strings"],
)
def test_a_body_of_many_small_values_weighs_its_parse_past_the_threshold(body: str) -> None:
    """Found in review: the parse weighed a body's bytes and containers, not its values,
    and these bodies (under 512 KiB by bytes) took 17-110 ms of the loop to parse; each
    value (`PARSE_VALUE_BYTES`, by the commas) weighs what its parse costs."""
    data = body.encode()
    assert len(data) < 512 << 10 <= parse_weight(data)
    assert Workers(None, 512 << 10).weigh_parse(data, packed=False) == parse_weight(data)


def test_a_packed_body_of_many_keys_weighs_its_parse_past_the_threshold() -> None:
    """12 maps of 4,096 keys each (491 KB: each key checked in Python, about 0.5 us) and
    their values walked: every byte weighs `PACKED_BYTE_COST`."""
    keys = [[f"{n:08x}" for n in range(4096 * m, 4096 * (m + 1))] for m in range(12)]
    data = msgpack.packb([dict.fromkeys(names, 0) for names in keys])
    assert len(data) < 512 << 10 <= packed_weight(data)
    workers = Workers(None, 512 << 10)
    assert workers.weigh_parse(data, packed=True) == packed_weight(data)
    assert workers.weigh_parse(b"x" * (512 << 10), packed=True) == 512 << 10  # by length


class Counted(str):
    """A text that says when its braces are counted."""

    counted = 0

    def count(self, sub: str, *args: Any) -> int:
        Counted.counted += 1
        return super().count(sub, *args)


def test_workers_weigh_texts_only_while_they_may_stay_under_the_threshold() -> None:
    """`Workers.weigh` counts a text's braces only while the work may stay under the
    threshold: a body as long as the threshold goes to a thread by its length, with nothing
    counted on the loop (a 32 MiB body counted at each step took tens of ms of it)."""
    workers = Workers(None, 1000)
    small, large = Counted('{"a":[1]}'), Counted("x" * 1000)
    expected = weight(small)
    Counted.counted = 0
    assert workers.weigh(small) == expected
    assert Counted.counted == 2  # its braces and its brackets
    Counted.counted = 0
    assert workers.weigh(large, small) == 1000 + len(small)  # past it: lengths alone
    assert Counted.counted == 0
    assert workers.weigh(small, small) == weight(small) + len(small)  # the first reached it
    assert Workers(None, None).weigh(small, large) == len(small) + len(large)  # never by size
    assert not workers.here(workers.weigh(*[small] * 200))  # 200 small texts: a thread's
