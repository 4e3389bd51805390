"""The relay against a slow or hostile gateway, over real sockets: its answer to an edit,
which the relay reads itself to decide what to do next (a 409 or 400 it may resend on, a
503 that may say the gateway's store is down), whose head comes and whose body then
trickles a byte at a time, or floods without end.

Before, the relay read such a body whole with no bound: a trickle held the agent's turn
for up to one read timeout (600 s) per byte, a flood grew the relay's memory without end.
Now the read stops at `MAX_PROBLEM_BYTES` or `PROBLEM_READ_S` (here made small), and the
answer goes on to the agent as it comes, the bytes read first; or, a 4xx that names nothing
of toolref's (`toolref.sending.stranger`), is closed and the turn goes as it came.
`TIMEOUT` is a net for a hang, not a timing check.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from tests.support.servers import serve
from toolref.edits.wire import MEDIA_TYPE
from toolref.registry import bounded
from toolref.wire.endpoints import CAPABILITIES
from toolref_relay import Relay, RelayConfig
from toolref_relay.preflight import Preflight

TIMEOUT = 30  # a net for a hang, not a timing check
PROBLEM = b"application/problem+json"
URL = "/llm/anthropic/v1/messages"


class Gateway:
    """Takes edits (capabilities); answers a request as it came 200, an edit with `status`
    and `kind`, `start`, then `piece` every `pause` seconds until the relay leaves."""

    def __init__(self, status: int, kind: bytes, start: bytes, piece: bytes, pause: float):
        self.status, self.kind, self.start, self.piece, self.pause = (
            status,
            kind,
            start,
            piece,
            pause,
        )
        self.kinds: list[str] = []
        self.closed = asyncio.Event()
        self.refuse_all = False  # a request as it came refused too
        self.endless_caps = False  # the capabilities document: `piece` after `piece`
        self.head: list[tuple[bytes, bytes]] = []  # more headers of the refusal

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        more = True  # the request read whole: the next receive waits for the relay to leave
        while more:
            more = (await receive()).get("more_body", False)
        if scope["method"] == "GET" and scope["path"] == CAPABILITIES and self.endless_caps:
            head = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": head})
            await send({"type": "http.response.body", "body": b'{"edits": 5', "more_body": True})
            await self._endless(receive, send)
            return
        if scope["method"] == "GET" and scope["path"] == CAPABILITIES:
            head = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": head})
            await send({"type": "http.response.body", "body": b'{"edits": 5}'})
            return
        edit = dict(scope["headers"]).get(b"content-type") == MEDIA_TYPE.encode()
        if not edit and not self.refuse_all:
            self.kinds.append("as it came")
            head = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": head})
            await send({"type": "http.response.body", "body": b'{"answered":true}'})
            return
        self.kinds.append("edit" if edit else "as it came")
        head = [(b"content-type", self.kind), *self.head]
        await send({"type": "http.response.start", "status": self.status, "headers": head})
        await send({"type": "http.response.body", "body": self.start, "more_body": True})
        await self._endless(receive, send)

    async def _endless(self, receive: Any, send: Any) -> None:
        left = asyncio.ensure_future(receive())
        try:
            while not left.done():
                await asyncio.wait({left}, timeout=self.pause)
                await send({"type": "http.response.body", "body": self.piece, "more_body": True})
        except OSError:
            pass
        finally:
            left.cancel()
            self.closed.set()


def turn() -> bytes:
    messages = [{"role": "user", "content": "why is the sky blue? " * 200}]
    return json.dumps({"model": "m", "max_tokens": 5, "messages": messages}).encode()


@pytest.fixture(autouse=True)
def short_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bounded, "PROBLEM_READ_S", 0.2)


HOW = {"trickled": (b" ", 0.02), "flooded": (b" " * 65536, 0)}


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize(("status", "kind"), [(409, PROBLEM), (503, PROBLEM), (400, b"text/html")])
async def test_a_gateways_refusal_to_an_edit_that_never_ends_goes_on_to_the_agent(
    how: str, status: int, kind: bytes
) -> None:
    start = b'{"type":"urn:toolref:problem:missing-'
    gateway = Gateway(status, kind, start, *HOW[how])
    async with serve(gateway) as url:
        found = Preflight(url, True, True, "test", ("anthropic",), False, line="checked")
        relay = Relay(
            RelayConfig(url, key="k", channel=False), report=lambda _: None, preflight=found
        )
        async with serve(relay) as relay_url, httpx.AsyncClient(timeout=TIMEOUT) as agent:

            async def ask() -> tuple[int, bytes]:
                headers = {"content-type": "application/json", "x-api-key": "a"}
                async with agent.stream(
                    "POST", relay_url + URL, content=turn(), headers=headers
                ) as answer:
                    return answer.status_code, await anext(answer.aiter_bytes(), b"")

            status_got, first = await asyncio.wait_for(ask(), TIMEOUT)
            await asyncio.wait_for(gateway.closed.wait(), TIMEOUT)
        if status == 503:
            assert gateway.kinds == ["edit"]
            assert status_got == status
            assert first.startswith(start)  # the bytes the relay read first, then the rest
        else:  # a 4xx naming nothing of toolref's, unread: the turn as it came (`stranger`)
            assert gateway.kinds == ["edit", "as it came"]
            assert (status_got, first) == (200, b'{"answered":true}')


@pytest.mark.parametrize(
    ("kind", "start"),
    [(PROBLEM, b'{"type":"urn:toolref:problem:unknown-key",'), (b"text/html", b"<html>")],
)
async def test_a_gateways_refusal_trickled_under_its_length_goes_on_as_it_comes(
    kind: bytes, start: bytes
) -> None:
    """A refusal to a turn as it came, which the relay reads whole to tell the agent in its
    provider's shape (a toolref problem; a proxy's page): past the deadline, as it comes."""
    gateway = Gateway(401, kind, start, b" ", 0.02)
    gateway.refuse_all, gateway.head = True, [(b"content-length", b"4000")]
    async with serve(gateway) as url:
        found = Preflight(url, True, True, "test", ("anthropic",), False, line="checked")
        config = RelayConfig(url, key="k", channel=False, edits=False)
        relay = Relay(config, report=lambda _: None, preflight=found)
        async with serve(relay) as relay_url, httpx.AsyncClient(timeout=TIMEOUT) as agent:

            async def ask() -> tuple[int, bytes]:
                headers = {"content-type": "application/json", "x-api-key": "a"}
                async with agent.stream(
                    "POST", relay_url + URL, content=turn(), headers=headers
                ) as answer:
                    return answer.status_code, await anext(answer.aiter_bytes(), b"")

            status_got, first = await asyncio.wait_for(ask(), TIMEOUT)
            assert gateway.kinds == ["as it came"]
            assert (status_got, first[: len(start)]) == (401, start)
            await asyncio.wait_for(gateway.closed.wait(), TIMEOUT)


@pytest.mark.parametrize("how", HOW)
async def test_a_capabilities_document_that_never_ends_sends_the_turn_as_it_came(
    how: str,
) -> None:
    """The relay reads the gateway's capabilities itself, before a turn: one that trickles
    or floods without end is given up at the deadline or the size bound (its connection
    closed), and the turn goes as it came."""
    gateway = Gateway(200, b"application/json", b"", *HOW[how])
    gateway.endless_caps = True
    async with serve(gateway) as url:
        found = Preflight(url, True, True, "test", ("anthropic",), False, line="checked")
        relay = Relay(
            RelayConfig(url, key="k", channel=False), report=lambda _: None, preflight=found
        )
        async with serve(relay) as relay_url, httpx.AsyncClient(timeout=TIMEOUT) as agent:
            headers = {"content-type": "application/json", "x-api-key": "a"}
            send = agent.post(relay_url + URL, content=turn(), headers=headers)
            answer = await asyncio.wait_for(send, TIMEOUT)
            assert (answer.status_code, answer.content) == (200, b'{"answered":true}')
            assert gateway.kinds == ["as it came"]
            await asyncio.wait_for(gateway.closed.wait(), TIMEOUT)
