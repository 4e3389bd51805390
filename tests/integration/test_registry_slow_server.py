"""The registry clients (`RegistryClient`, `AsyncRegistryClient` on `PlainTransport` or on
httpx's transport) against a registry whose answer's head comes and whose body then
trickles a byte at a time, or floods without end, over real sockets (`POST
/v1/edits:apply`, the call a chat backend's `ToolRefMiddleware` makes per request; the key
probe of `verify`).

Before, each answer was read whole: httpx's timeout applies per read, so a trickle held the
caller (and the middleware's client) for ever, and a flood grew memory without end. Now the
body is read whole within the client's `timeout` and `MAX_ANSWER_BYTES` (here made small),
else the attempt fails as a transport error (retried, then `RegistryUnreachableError`), the
connection closed. `TIMEOUT` is a net for a hang, not a timing check.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.support.servers import serve
from toolref.registry import client as client_module
from toolref.registry import plain_transport
from toolref.registry.client import AsyncRegistryClient, RegistryClient
from toolref.wire.endpoints import APPLY_EDIT, CAPABILITIES
from toolref.wire.errors import RegistryUnreachableError

from .endless import HOW, Endless, Whole, capabilities, flood

TIMEOUT = 30  # a net for a hang, not a timing check
SHORT = 0.3  # the client's timeout
PROBE = "/v1/invocations/tr_" + "a" * 26


@pytest.fixture(autouse=True)
def small_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plain_transport, "MAX_ANSWER_BYTES", 1 << 20)
    monkeypatch.setattr(client_module, "MAX_ANSWER_BYTES", 1 << 20)


def registry(how: str, path: str) -> Endless:
    return Endless({CAPABILITIES: Whole(200, capabilities()), path: flood(how, b"{")})


@pytest.mark.parametrize("transport", ["plain", "httpx"])
@pytest.mark.parametrize("how", HOW)
async def test_an_endless_answer_to_an_edit_fails_the_call(how: str, transport: str) -> None:
    server = registry(how, APPLY_EDIT)
    async with serve(server) as url:
        chosen = httpx.AsyncHTTPTransport() if transport == "httpx" else None
        client = AsyncRegistryClient(url, timeout=SHORT, retries=1, transport=chosen)
        try:
            with pytest.raises(RegistryUnreachableError) as caught:
                await asyncio.wait_for(client.apply_edit(b"edit"), TIMEOUT)
        finally:
            await client.aclose()
        assert "after 2 attempt(s)" in caught.value.detail
        assert server.seen.count(f"POST {APPLY_EDIT}") == 2
        await asyncio.wait_for(server.leaving(APPLY_EDIT, 2), TIMEOUT)  # both closed


@pytest.mark.parametrize("how", HOW)
async def test_an_endless_answer_fails_a_blocking_call(how: str) -> None:
    server = registry(how, PROBE)
    async with serve(server) as url:

        def verify() -> str | None:
            with RegistryClient(url, timeout=SHORT, retries=0) as client:
                return client.verify()

        said = await asyncio.wait_for(asyncio.to_thread(verify), TIMEOUT)
        assert said is not None
        assert "did not end within" in said
        await asyncio.wait_for(server.leaving(PROBE), TIMEOUT)
