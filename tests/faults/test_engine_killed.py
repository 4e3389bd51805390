"""The engine is SIGKILLed while clients chat through the SDK, then started again.

The service (in-process, one app instance throughout) answers every ref operation with a
quick 503 problem+json and Retry-After, without a storm of reconnects; chat clients, whose
edits the middleware cannot apply meanwhile, send their turns as they are and never see a
failed turn; protocol-1 traffic is untouched; and once the engine is back on the same port
and data folder, the same app serves refs again, with every ref acknowledged before the kill
still there (appendfsync always), and the clients edit again against the recipes kept
before it: at most one resend each (a turn answered from the process's cache as the engine
died, its recipe kept after the answer, made a recipe the store never got).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from starlette.applications import Starlette

from toolref import AsyncRegistryClient, CircuitBreaker, ToolRefMiddleware
from toolref.sending import pause
from toolref.wire.headers import PROTOCOL_HEADER
from toolref_server.app import create_app
from toolref_server.embedded import EmbeddedEngine
from toolref_server.settings import Settings

from .support import (
    Backend,
    Conversation,
    Engines,
    Operation,
    TimingTransport,
    assert_unavailable,
    make_samples,
    ref_operations,
    sample_messages,
    timed,
)

pytestmark = [pytest.mark.engine, pytest.mark.latency]  # answers within a deadline: run alone

CONVERSATIONS = 4
HEALTHY, OUTAGE, RECOVERED = 4, 4, 3  # turns of every conversation in each phase
PROBE_ROUNDS = 5  # rounds of every ref operation while the engine is dead
BOUND = 0.100  # seconds: the bound on a 503 from a dead engine, on loopback
# Short, as an operator of a latency-sensitive deployment would set them.
REDIS_TIMEOUT, CONNECT_TIMEOUT = 0.25, 0.05
FAILURES, RESET = 3, 0.2  # the middleware's CircuitBreaker
# A user reads each answer before the next turn. All clients share the test's event loop with
# the service, so clients firing turns back to back would add their CPU time to the latency
# measured for the service (about 8 ms per conversation turn here).
THINK = 0.02
POOLED = 8  # connections the service holds in its pool when the engine restarts
UNAPPLIED = 0.2  # seconds a client sends no edits after a 415 (its pause, shortened)


@asynccontextmanager
async def serving(engine: EmbeddedEngine) -> AsyncIterator[tuple[Starlette, httpx.AsyncClient]]:
    """The service on `engine` (opened by its own lifespan, as in production) and a
    protocol-2 client for it."""
    settings = Settings(
        redis_url=engine.tcp_url,
        redis_timeout=REDIS_TIMEOUT,
        redis_connect_timeout=CONNECT_TIMEOUT,
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
        yield service, api


async def wait_until_ready(registry: AsyncRegistryClient, within: float = 5.0) -> None:
    """Until the SDK's own readiness call succeeds (its breaker lets a probe through after
    `reset_timeout`; a success closes it)."""
    deadline = time.monotonic() + within
    while not await registry.ready():
        assert time.monotonic() < deadline, "the SDK never saw the registry ready again"
        await asyncio.sleep(max(0.01, registry.breaker.retry_in()))


async def test_engine_killed_while_clients_chat(
    engines: Engines, monkeypatch: pytest.MonkeyPatch
) -> None:
    # After a 415 to an edit, the client sends no edits for a while: shortened.
    monkeypatch.setattr(pause, "FIRST", UNAPPLIED)
    monkeypatch.setattr(pause, "LONGEST", UNAPPLIED)
    engine = engines.start("engine", appendonly="yes", appendfsync="always")
    async with serving(engine) as (service, api):
        link = TimingTransport(httpx.ASGITransport(app=service))
        registry = AsyncRegistryClient(
            "http://localhost:8750",
            transport=link,
            retries=0,
            breaker=CircuitBreaker(FAILURES, RESET),
        )
        backend = Backend()
        async with (
            registry,
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=ToolRefMiddleware(backend.app(), registry)),
                base_url="http://backend",
            ) as http,
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=Backend().app()), base_url="http://backend"
            ) as bare,
        ):
            conversations = [Conversation(n, backend) for n in range(CONVERSATIONS)]

            async def phase(turns: int) -> None:
                async def chat(conversation: Conversation) -> None:
                    for _ in range(turns):
                        await conversation.turn(http)
                        await asyncio.sleep(THINK)

                await asyncio.gather(*(chat(c) for c in conversations))

            samples = await make_samples(api)
            await phase(HEALTHY)
            for conversation in conversations:  # edits in use
                assert conversation.edited == [False] + [True] * (HEALTHY - 1)
                assert conversation.small(range(2, HEALTHY)), conversation.sent_per_turn

            Engines.kill(engine)
            killed_at = time.monotonic()
            probes: list[tuple[str, httpx.Response, float]] = []
            plain: list[httpx.Response] = []

            async def probe() -> None:
                # Each operation once on an app of its own, whose first request meets the
                # dead engine (the shared app's breaker may refuse before trying).
                for name in ref_operations(api, samples):
                    async with serving(engine) as (_, cold):
                        response, elapsed = await timed(ref_operations(cold, samples)[name]())
                    probes.append((f"{name} (own app)", response, elapsed))
                for round_ in range(PROBE_ROUNDS):
                    for name, operation in ref_operations(api, samples).items():
                        response, elapsed = await timed(operation())
                        probes.append((name, response, elapsed))
                    # A protocol-1 client (no Toolref-Protocol header) through the middleware.
                    body = {
                        "messages": [
                            *sample_messages(f"p{round_}.txt"),
                            {"role": "user", "content": f"c99 turn {round_}"},
                        ]
                    }
                    response = await http.post("/chat", json=body)
                    alone = await bare.post("/chat", json=body)
                    assert response.status_code == 200, response.text
                    assert response.content == alone.content  # byte for byte the app's answer
                    assert PROTOCOL_HEADER.lower() not in response.headers
                    assert backend.seen[99][-1] == body["messages"]
                    plain.append(response)

            await asyncio.gather(phase(OUTAGE), probe())
            outage = time.monotonic() - killed_at

            # Every ref operation: 503 problem+json with Retry-After, within the bound.
            assert len(probes) == (PROBE_ROUNDS + 1) * 6
            for name, response, elapsed in probes:
                assert_unavailable(response)
                assert elapsed < BOUND, f"{name} took {elapsed * 1000:.1f} ms"
            assert len(plain) == PROBE_ROUNDS
            # The middleware's calls to the registry: each a quick 503, and few (its
            # breaker opened, then let one probe through per reset_timeout).
            during = [t for t in link.log if t.sent >= killed_at]
            assert during, "the middleware never tried the registry during the outage"
            # Its first calls may be answered from the process's cache (the base held there,
            # the recipe kept after the answer: `apply_edit(later=True)`), at most one per
            # conversation, before a call finds the store down; from then on a quick 503.
            # (conversations run at once: such an answer may be logged after another's 503)
            answered = [t for t in during if t.status == 200]
            assert len(answered) <= CONVERSATIONS, during
            refused = [t for t in during if t.status != 200]
            assert all(t.status == 503 and t.elapsed < BOUND for t in refused), during
            allowed = FAILURES + 2 * CONVERSATIONS + math.ceil(outage / RESET) + 1
            assert len(during) <= allowed, (len(during), allowed)
            # Every conversation sent its turns as they are (an edit could not be applied:
            # 415) and went on (Conversation.turn checked 200 and the backend's bytes).
            for conversation in conversations:
                assert not any(conversation.edited[HEALTHY + 1 :]), conversation.number
                assert conversation.turns == HEALTHY + OUTAGE

            # The engine comes back on the same port and data folder; the app is the same.
            Engines.restart(engine)
            ready = await api.get("/readyz")
            assert ready.status_code == 200, ready.text
            registered = await api.post(
                "/v1/invocations",
                json={"invocations": [{"name": "after", "args": {}, "result": "restart"}]},
            )
            assert registered.status_code == 200, registered.text
            assert registered.json()["refs"][0]["new"] is True
            again = await api.get(f"/v1/invocations/{samples.ref}")
            assert again.status_code == 200, again.text
            assert again.json() == samples.invocation

            # The SDK edits again (once an answer offers edits: the first turn at the latest),
            # against the recipes kept before the kill: none is missing, so no resend.
            await wait_until_ready(registry)
            await asyncio.sleep(UNAPPLIED)
            await phase(RECOVERED)
            end = HEALTHY + OUTAGE + RECOVERED
            for conversation in conversations:
                assert all(conversation.edited[end - RECOVERED + 1 :]), conversation.number
                assert conversation.small(range(end - 1, end)), conversation.number
            # At most one resend each: a turn answered from the cache as the engine died made
            # a recipe the store never got (`apply_edit(later=True)`); its next edit is 409.
            assert all(c.manager.savings.resends <= 1 for c in conversations)

    worst = max(elapsed for _, _, elapsed in probes)
    print(
        f"\nkilled engine: {len(probes)} ref operations answered 503 in at most "
        f"{worst * 1000:.1f} ms; middleware made {len(during)} registry calls in "
        f"{outage * 1000:.0f} ms of outage (worst {max(t.elapsed for t in during) * 1000:.1f} "
        f"ms); bytes sent per turn {[c.sent_per_turn for c in conversations]}"
    )


async def attempts_against_a_dropping_listener(engines: Engines) -> dict[str, list[int]]:
    """Kill the engine and hold its port with a listener that accepts each connection and
    closes it at once. For each operation (twice), how many connections one request opened;
    every answer is checked to be a quick 503."""
    engine = engines.start("engine", appendonly="no")
    attempts: dict[str, list[int]] = {}
    async with serving(engine) as (_, api):
        samples = await make_samples(api)
        Engines.kill(engine)
        accepted = 0

        async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal accepted
            accepted += 1
            writer.close()

        assert engine.tcp_port is not None
        server = await asyncio.start_server(drop, "127.0.0.1", engine.tcp_port, reuse_address=True)
        async with server:
            operations: dict[str, Operation] = {
                **ref_operations(api, samples),
                "readyz": lambda: api.get("/readyz"),
            }

            async def quiet() -> None:
                """Until no connection came for 0.2 s (at most 2 s): a request's retry may
                reach the listener after its 503 went, and is its own, not the next's."""
                for _ in range(10):
                    seen = accepted
                    await asyncio.sleep(0.2)
                    if accepted == seen:
                        return

            for _ in range(2):
                for name, operation in operations.items():
                    before = accepted
                    response, elapsed = await timed(operation())
                    assert_unavailable(response)
                    assert elapsed < BOUND, f"{name} took {elapsed * 1000:.1f} ms"
                    await quiet()
                    attempts.setdefault(name, []).append(accepted - before)
    return attempts


async def test_no_reconnect_storm_against_a_dead_engine(engines: Engines) -> None:
    """One request opens at most two connections to the engine (the first try and the one
    retry `open_redis` configures); readiness always tries, ref operations may be refused
    before trying when the store's breaker is open."""
    attempts = await attempts_against_a_dropping_listener(engines)
    assert all(n <= 2 for counts in attempts.values() for n in counts), attempts
    assert all(n >= 1 for n in attempts["readyz"]), attempts
    assert sum(sum(counts) for name, counts in attempts.items() if name != "readyz") >= 1
    print(f"\nconnections opened per request, by operation: {attempts}")


@pytest.mark.parametrize("stop", ["kill", "graceful"])
async def test_the_first_requests_after_an_engine_restart_succeed(
    engines: Engines, stop: str
) -> None:
    """The engine restarts while the service is idle: its pooled connections are dead, and
    the retry `open_redis` configures for exactly this should reconnect each, not answer 503
    (three such 503s in a row also open the store's breaker: then every request is refused
    for Retry-After seconds although the engine is back)."""
    engine = engines.start("engine", appendonly="yes", appendfsync="always")
    async with serving(engine) as (_, api):
        samples = await make_samples(api)

        async def burst() -> list[httpx.Response]:
            return await asyncio.gather(
                *(
                    api.post("/v1/invocations:resolve", json={"refs": [samples.ref]})
                    for _ in range(POOLED)
                )
            )

        assert all(r.status_code == 200 for r in await burst())  # POOLED pooled connections
        if stop == "kill":
            Engines.kill(engine)
        Engines.restart(engine)  # a graceful stop first when it still runs
        after = await burst()
        assert [r.status_code for r in after] == [200] * POOLED, after[0].text
        then = await api.post("/v1/invocations:findMissing", json={"refs": [samples.ref]})
        assert then.status_code == 200, then.text
