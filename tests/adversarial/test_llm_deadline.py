"""The LLM summarizer's deadline is the whole call.

Found: the timeout was per read, so a model dripping a byte every 2 s held requests 40 s
against a 3 s setting, and every request joined to that computation waited with it.
"""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from toolref import extractive
from toolref.kinds import KindTable

from .fake_llm import READ, Connection, FakeLLM, apps, completion, fake_llm, llm_id

TIMEOUT = 0.3  # TOOLREF_LLM_TIMEOUT in these tests
DRIP = 0.05  # seconds between two bytes: far under the timeout, so no single read times out
BODY = completion("read_file src/app.py: 300 numbered lines; nothing failed.")
KINDS = KindTable.parse("")


async def drip(server: FakeLLM, connection: Connection) -> None:
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
    async with fake_llm(drip) as llm, apps(redis) as build:
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
    async with fake_llm(drip) as llm, apps(redis) as build:
        app = await build(llm, llm_timeout=TIMEOUT)
        ref = await app.register(READ)
        loop = asyncio.get_running_loop()
        started = loop.time()
        answers = await asyncio.gather(*(app.summary(ref) for _ in range(20)))
        elapsed = loop.time() - started
        key = f"tr:local:s:{ref[3:]}:{llm_id(200)}"
        mark = await redis.get(key + ":lock")
    assert llm.calls == 1  # one computation, 20 requests joined to it
    assert all(a["fallback"] for a in answers)
    assert elapsed < len(BODY) * DRIP / 4
    assert mark == b"failed"  # remembered, so the next requests do not call it again
