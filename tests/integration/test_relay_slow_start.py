"""The relay's start check (`toolref_relay.preflight.check`) and `toolref doctor`
(`toolref_relay.doctor.probe`) against a server whose answer's head comes and whose body then
trickles a byte at a time, or floods without end, over real sockets: the gateway's
capabilities, its answer to the key probe (`registry.verify`), the relay's `/toolref/check`,
a provider's `/v1/models`.

Before, each was read whole with `http.get`: no bound on its size, httpx's timeout only per
read, so a trickle hung the relay's start (or doctor) for ever and a flood grew its memory
without end. Now each is read within its size bound and `request_timeout` for the whole
(here made small), and what did not end is said. `TIMEOUT` is a net for a hang, not a timing
check.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.support.servers import serve
from toolref.wire.endpoints import CAPABILITIES
from toolref_relay.control import CHECK_PATH
from toolref_relay.doctor import probe
from toolref_relay.preflight import check

from .endless import HOW, Endless, Flood, Whole, capabilities, flood

TIMEOUT = 30  # a net for a hang, not a timing check
SHORT = 0.3  # request_timeout: each answer whole within it
PROBE = "/v1/invocations/tr_" + "a" * 26


@pytest.mark.parametrize("how", HOW)
async def test_a_capabilities_answer_that_never_ends_fails_the_start_check(how: str) -> None:
    server = Endless({CAPABILITIES: flood(how, b'{"version": "x", "upstreams": [')})
    async with serve(server) as url:
        found = await asyncio.wait_for(check(url, None, request_timeout=SHORT), TIMEOUT)
        assert found.reached
        assert not found.toolref
        assert found.problem is not None
        assert "did not end" in found.problem
        assert "--no-gateway-check" in found.problem
        await asyncio.wait_for(server.leaving(CAPABILITIES), TIMEOUT)


@pytest.mark.parametrize("how", HOW)
async def test_a_refusal_to_the_keys_probe_that_never_ends_fails_the_start_check(
    how: str,
) -> None:
    routes: dict[str, Whole | Flood] = {
        CAPABILITIES: Whole(200, capabilities()),
        PROBE: flood(how, b'{"x":', 401),
    }
    server = Endless(routes)
    async with serve(server) as url:
        found = await asyncio.wait_for(check(url, "k", request_timeout=SHORT), TIMEOUT)
        assert found.toolref
        assert found.problem is not None
        assert "refuses the relay's key" in found.problem
        assert "did not end" in found.problem
        await asyncio.wait_for(server.leaving(PROBE), TIMEOUT)


@pytest.mark.parametrize("how", HOW)
async def test_doctor_says_a_relay_check_that_never_ends(how: str) -> None:
    server = Endless({CHECK_PATH: flood(how, b'{"gateway": "')})
    async with serve(server) as url:
        hops = await asyncio.wait_for(probe(url, None, request_timeout=SHORT), TIMEOUT)
        assert [hop.ok for hop in hops] == [False]
        assert "did not end" in hops[0].detail
        await asyncio.wait_for(server.leaving(CHECK_PATH), TIMEOUT)


@pytest.mark.parametrize("how", HOW)
async def test_doctor_reads_a_providers_endless_models_answer_within_its_bound(
    how: str,
) -> None:
    found = {"gateway": "g", "reached": True, "toolref": True, "version": "t", "keys": False}
    found |= {"upstreams": ["p"], "key": None, "problem": None, "line": "", "seconds": 0.0}
    models = "/llm/p/v1/models"
    server = Endless(
        {CHECK_PATH: Whole(200, json.dumps(found).encode()), models: flood(how, b'{"data":[')}
    )
    async with serve(server) as url:
        hops = await asyncio.wait_for(probe(url, None, request_timeout=SHORT), TIMEOUT)
        upstream = hops[-1]
        assert upstream.name.startswith("upstream p")
        assert upstream.ok  # the provider answers: not a refusal
        assert upstream.status == 200
        await asyncio.wait_for(server.leaving(models), TIMEOUT)
