"""The LLM summarizer's deadline is the whole call, and no request waits longer than its
bound for a summary computation it started or joined.

Found: the timeout was per read, so a model dripping a byte every 2 s held requests 40 s
against a 3 s setting, and every request joined to that computation waited with it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import types
from collections.abc import Mapping
from typing import Any

import pytest
from redis.asyncio import Redis

from tests.support.fake_provider.raw import Connection, RawProvider, completion, raw_provider
from toolref.kit import extractive
from toolref.kit.kinds import KindTable
from toolref.wire.canonical import digest_of
from toolref_server.registry import summarizers
from toolref_server.registry.llm_quotas import ModelCallQuotas
from toolref_server.registry.summarizers import ExtractiveSummarizer
from toolref_server.registry.summary_cache import SummaryCache
from toolref_server.storage.counters import ModelCallCounters
from toolref_server.storage.store import Store
from toolref_server.storage.summary_store import SummaryStore

from .summarizer_app import READ, apps, llm_id

TIMEOUT = 0.3  # TOOLREF_LLM_TIMEOUT in these tests
DRIP = 0.05  # seconds between two bytes: far under the timeout, so no single read times out
BODY = completion("read_file src/app.py: 300 numbered lines; nothing failed.")
KINDS = KindTable.parse("")


async def drip(server: RawProvider, connection: Connection) -> None:
    """A valid answer, one byte at a time: the whole would take len(BODY) * DRIP seconds."""
    if not await connection.head(Content_Length=str(len(BODY))):
        return
    for byte in BODY:
        await asyncio.sleep(DRIP)
        if not await connection.send(bytes([byte])):
            return


async def test_a_model_dripping_its_answer_is_cut_off_at_the_total_deadline(
    redis: Redis,
) -> None:
    async with raw_provider(drip) as llm, apps(redis) as build:
        app = await build(llm, llm_timeout=TIMEOUT)
        ref = await app.register(READ)
        loop = asyncio.get_running_loop()
        started = loop.time()
        answer = await app.summary(ref)
        elapsed = loop.time() - started
        [connection] = llm.connections
        await asyncio.wait_for(connection.hung_up.wait(), 5)  # the service hung up on it
        dripped = connection.sent
    whole = len(BODY) * DRIP
    assert answer == {
        "summarizer": "extractive:v1:200",
        "summary": extractive.summarize(READ, 200, KINDS),
        "cached": False,
        "fallback": True,
    }
    # Cut off at the deadline: a small part of the answer had been sent (headers included),
    # never the whole.
    assert dripped < len(BODY) / 2, (dripped, len(BODY))
    assert TIMEOUT <= elapsed < whole / 4, (elapsed, whole)
    print(f"\ndrip: answered after {elapsed:.2f}s (timeout {TIMEOUT}s; whole answer {whole:.1f}s)")


async def test_requests_joined_to_a_dripping_call_return_with_it(redis: Redis) -> None:
    async with raw_provider(drip) as llm, apps(redis) as build:
        app = await build(llm, llm_timeout=TIMEOUT)
        ref = await app.register(READ)
        loop = asyncio.get_running_loop()
        started = loop.time()
        answers = await asyncio.gather(*(app.summary(ref) for _ in range(20)))
        elapsed = loop.time() - started
        key = f"tr:local:s:{ref[3:]}:{llm_id(200)}"
        mark = await redis.get(key + ":lock")
    print(f"\n20 joined to a dripping call: all answered after {elapsed:.2f}s")
    assert llm.calls == 1  # one computation, 20 requests joined to it
    assert all(a["fallback"] for a in answers)
    assert elapsed < len(BODY) * DRIP / 4
    assert mark == b"failed"  # remembered, so the next requests do not call it again


class Stuck:
    """A plugged-in summarizer that ignores every deadline (cancellation included) until
    the test releases it: only the cache's own bound can end the requests' wait."""

    name = "stuck"

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls = 0
        self.returned = False

    def id(self, max_chars: int) -> str:
        return f"stuck:v1:{max_chars}"

    async def summarize(self, invocation: Mapping[str, Any], max_chars: int) -> str:
        self.calls += 1
        await asyncio.shield(self.release.wait())
        self.returned = True
        return "too late"


async def test_joined_requests_stop_waiting_at_the_bound_whatever_the_summarizer(
    redis: Redis,
) -> None:
    """In one process (joined to one task) and across two (polling the Redis lock), every
    request answers with the extractive summary while the computation is still stuck."""
    stuck = Stuck()
    wait = 0.3
    stores = [Store(redis, 60) for _ in range(2)]  # two replicas
    caches = [
        SummaryCache(
            SummaryStore(store, lock_seconds=30, failure_seconds=60),
            {"extractive": ExtractiveSummarizer(KINDS), "stuck": stuck},
            wait_seconds=wait,
            quotas=ModelCallQuotas(
                ModelCallCounters(store),
                per_request=16,
                per_tenant_minute=1000,
                breaker_failures=5,
                breaker_seconds=30,
            ),
        )
        for store in stores
    ]
    ref = digest_of(READ).ref
    loop = asyncio.get_running_loop()
    started = loop.time()
    first = asyncio.ensure_future(caches[0].many("local", [(ref, READ)], "stuck", 200))
    await asyncio.sleep(0.05)  # the first holds the lock; the rest join it
    rest = [cache.many("local", [(ref, READ)], "stuck", 200) for cache in caches for _ in range(10)]
    answers = [await first, *await asyncio.gather(*rest)]
    elapsed = loop.time() - started
    print(
        f"\n21 requests joined to a stuck summarizer, two replicas: answered after {elapsed:.2f}s"
    )
    try:
        assert not stuck.returned  # all answered while the computation was still stuck
        assert stuck.calls == 1
        for [summary] in answers:
            assert summary.fallback
            assert summary.summarizer == "extractive:v1:200"
            assert summary.text == extractive.summarize(READ, 200, KINDS)
        assert elapsed >= wait
        assert await redis.get(f"tr:local:s:{ref.key}:stuck:v1:200") is None
    finally:
        stuck.release.set()
        await asyncio.sleep(0)


async def test_the_prompt_is_written_out_off_the_event_loop(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in review: the LLM summarizer wrote a result that is no string out whole as
    JSON on the event loop, before cutting it to TOOLREF_LLM_INPUT_CHARS: a 64 MiB result
    held every request of the process about 0.4 s, once per model call (300 a minute per
    tenant by default). The prompt is now made in a worker thread, as extractive is."""
    threads: list[int] = []

    def dumps(value: Any, **options: Any) -> str:
        threads.append(threading.get_ident())
        return json.dumps(value, **options)

    monkeypatch.setattr(summarizers, "json", types.SimpleNamespace(dumps=dumps))
    rows = [{"path": f"src/module_{n}.py", "lines": n} for n in range(2000)]
    structured = {"name": "list_files", "args": {"root": "src"}, "result": rows}

    async def answer(server: RawProvider, connection: Connection) -> None:
        await connection.answer(completion("2000 files under src"))

    async with raw_provider(answer) as llm, apps(redis) as build:
        app = await build(llm)
        threads.clear()  # (building the app writes its kind table out)
        summary = await app.summary(await app.register(structured))
    assert (summary["summary"], summary["fallback"]) == ("2000 files under src", False)
    sent = llm.connections[0].body["messages"][1]["content"]
    assert "src/module_0.py" in sent
    assert "characters omitted" in sent  # the result, cut to TOOLREF_LLM_INPUT_CHARS
    assert threads  # the result and the arguments were written out
    assert threading.get_ident() not in threads  # (the test shares the service's loop)
