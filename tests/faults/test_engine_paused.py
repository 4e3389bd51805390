"""The engine is frozen (SIGSTOP) for longer than `redis_timeout` while a burst of requests
arrives: the kernel still accepts connections for it, but nothing answers.

Every request is answered with 503 problem+json and Retry-After within its deadline: at most
`redis_timeout` waiting for a free pooled connection plus `redis_timeout` for the command, and a
small margin; nothing piles up (no task left pending, the
engine never holds more connections from the service than its pool allows, requests that
waited for a pooled connection while the breaker opened do not reconnect to the frozen engine,
and no pool slot leaks); after SIGCONT the same app serves again at once.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from toolref.wire.headers import PROTOCOL_HEADER
from toolref_server.app import create_app
from toolref_server.settings import Settings

from .support import Engines, assert_unavailable, engine_info, make_samples, ref_operations, timed

pytestmark = [pytest.mark.engine, pytest.mark.latency]  # answers within a deadline: run alone

REQUESTS = 50
POOL = 16  # redis_max_connections, below REQUESTS so the pool's bound is what is tested
TIMEOUT = 0.2  # redis_timeout
DEADLINE = 2 * TIMEOUT  # a wait for a pooled connection, then the command, each bounded
# For 50 requests through the in-process app on one event loop; on a loaded machine, twice
# what the same 50 requests cost when refused at once (measured in the same run).
MARGIN = 0.15


async def test_a_paused_engine_answers_every_request_in_time(engines: Engines) -> None:
    engine = engines.start("engine", appendonly="no")
    settings = Settings(
        redis_url=engine.tcp_url,
        redis_timeout=TIMEOUT,
        redis_connect_timeout=0.1,
        redis_max_connections=POOL,
    )
    service = create_app(settings)
    async with (
        service.router.lifespan_context(service),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=service),
            base_url="http://localhost:8750",
            headers={PROTOCOL_HEADER: "2"},
        ) as api,
    ):
        samples = await make_samples(api)
        operations = list(ref_operations(api, samples).values())
        received = (await engine_info(engine, "stats"))["total_connections_received"]
        tasks = asyncio.all_tasks()

        with Engines.paused(engine):
            stopped = time.monotonic()
            answers = await asyncio.gather(
                *(timed(operations[n % len(operations)]()) for n in range(REQUESTS))
            )
            left = asyncio.all_tasks() - tasks  # gather's own tasks are done by now
            frozen = time.monotonic() - stopped
            # The same burst once more, the breaker now open: what handling 50 refusals on
            # one event loop costs on this machine right now, the margin's measure.
            refused = await asyncio.gather(
                *(timed(operations[n % len(operations)]()) for n in range(REQUESTS))
            )
        assert frozen > TIMEOUT  # stopped for longer than redis_timeout

        overhead = max(elapsed for _, elapsed in refused)
        margin = max(MARGIN, 2 * overhead)
        for response, elapsed in answers:
            assert_unavailable(response)
            assert elapsed <= DEADLINE + margin, (
                f"answered after {elapsed * 1000:.0f} ms (50 fast refusals took "
                f"{overhead * 1000:.0f} ms)"
            )
        assert not left, left

        # After SIGCONT the same app serves at once.
        ready = await api.get("/readyz")
        assert ready.status_code == 200, ready.text
        # The engine has accepted every connection queued while it was stopped (it accepts
        # in order, and the readiness PING came last). A slot's connection is dropped when
        # its command times out, and whoever gets the slot next connects anew; but the store
        # records each failure before it hands the slot on, and a request that then finds
        # the breaker open does not connect. So only the first holder of each slot, and the
        # at most breaker_failures - 1 requests handed a slot before the breaker opened, may
        # connect; plus one for readiness, plus this INFO's own.
        opened = (await engine_info(engine, "stats"))["total_connections_received"] - received
        assert opened <= POOL + settings.breaker_failures - 1 + 2, opened
        resolved = await api.post("/v1/invocations:resolve", json={"refs": [samples.ref]})
        assert resolved.status_code == 200, resolved.text
        assert resolved.json()["invocations"] == {samples.ref: samples.invocation}
        # No pool slot leaked: as many concurrent requests as the pool holds all succeed.
        burst = await asyncio.gather(
            *(
                api.post("/v1/invocations:findMissing", json={"refs": [samples.ref]})
                for _ in range(POOL)
            )
        )
        assert [r.status_code for r in burst] == [200] * POOL, [r.text for r in burst]
        clients = (await engine_info(engine, "clients"))["connected_clients"]
        assert clients <= POOL + 3, clients  # the pool (POOL), this INFO, and a few

    latencies = sorted(elapsed for _, elapsed in answers)
    waited = sum(elapsed >= TIMEOUT for elapsed in latencies)
    print(
        f"\npaused engine: {REQUESTS} concurrent requests all 503, worst "
        f"{latencies[-1] * 1000:.0f} ms (redis_timeout {TIMEOUT * 1000:.0f} ms); {waited} waited "
        f"out the timeout, {REQUESTS - waited} were refused sooner (fastest "
        f"{latencies[0] * 1000:.1f} ms); engine stopped {frozen * 1000:.0f} ms; {opened} "
        f"connections opened over the episode, "
        f"{clients} connected after the burst (pool {POOL})"
    )


async def test_a_burst_beyond_the_pool_waits_for_a_connection(engines: Engines) -> None:
    """A healthy engine and more concurrent requests than pooled connections: the extra ones
    wait for a free connection instead of failing with "Too many connections"."""
    engine = engines.start("engine", appendonly="no")
    settings = Settings(redis_url=engine.tcp_url, redis_max_connections=4)
    service = create_app(settings)
    async with (
        service.router.lifespan_context(service),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=service),
            base_url="http://localhost:8750",
            headers={PROTOCOL_HEADER: "2"},
        ) as api,
    ):
        samples = await make_samples(api)
        burst = await asyncio.gather(
            *(
                api.post("/v1/invocations:resolve", json={"refs": [samples.ref]})
                for _ in range(REQUESTS)
            )
        )
        assert [r.status_code for r in burst] == [200] * REQUESTS, burst[0].text
        clients = (await engine_info(engine, "clients"))["connected_clients"]
        assert clients <= 4 + 1, clients  # the pool, and this INFO's own
