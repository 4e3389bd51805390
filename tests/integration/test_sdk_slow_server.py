"""`toolref.Transport` / `AsyncTransport` against a slow or hostile receiver, over a real
local socket (uvicorn): an answer to an edit that the SDK itself reads to decide what to do
next (a 409, 415 or 503 refusal's problem) whose head comes and whose body then trickles a
byte at a time and never ends; and a gateway's refusal the transport reads to hand the SDK
in its API's error shape, trickled under a `Content-Length` it never reaches.

Each trickled byte comes well within httpx's read timeout (which applies per read), so
before, the SDK's read never ended and the caller's request waited for ever. Now the read
has a deadline for the whole (`PROBLEM_READ_S`, here made small): a problem from a receiver
of edits is handed on with the bytes read first, then the rest as they come; a refusal the
SDK drops is closed (the server sees its connection end) and the request sent as it is.
Nothing asserts a duration: `TIMEOUT` is a net for a hang.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.support.servers import serve
from toolref import AsyncTransport, Transport
from toolref.edits.wire import MEDIA_TYPE
from toolref.registry import bounded

TIMEOUT = 30  # a net for a hang, not a timing check
PROBLEM = "application/problem+json"
PATH = "/v1/chat/completions"


@dataclass
class Stand:
    """A receiver: a request as it is answered 200 with `Toolref-Edits: 5` (or, `refuse`,
    as `answer` says); an edit answered as `answer` says: its head, `start`, then a byte
    every 20 ms until the client leaves (`closed`)."""

    status: int
    headers: list[tuple[bytes, bytes]]
    start: bytes
    refuse: bool = False
    kinds: list[str] = field(default_factory=list)
    plain: list[bytes] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    begun: asyncio.Event = field(default_factory=asyncio.Event)  # a refusal's first bytes sent

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        kind = dict(scope["headers"]).get(b"content-type", b"")
        if kind != MEDIA_TYPE.encode() and not self.refuse:
            self.kinds.append("as it is")
            self.plain.append(body)
            head = [(b"content-type", b"application/json"), (b"toolref-edits", b"5")]
            await send({"type": "http.response.start", "status": 200, "headers": head})
            await send({"type": "http.response.body", "body": b'{"answered":true}'})
            return
        self.kinds.append("edit" if kind == MEDIA_TYPE.encode() else "as it is")
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.start, "more_body": True})
        self.begun.set()
        left = asyncio.ensure_future(receive())  # http.disconnect once the client leaves
        try:
            while not left.done():
                await asyncio.wait({left}, timeout=0.02)
                await send({"type": "http.response.body", "body": b" ", "more_body": True})
        except OSError:
            pass
        finally:
            left.cancel()
            self.closed.set()


def body(turns: int) -> dict[str, Any]:
    messages: list[dict[str, str]] = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"question {turn}: " + "why blue " * 60})
        messages.append({"role": "assistant", "content": f"answer {turn}: " + "scatter " * 80})
    return {"model": "m", "messages": messages}


@asynccontextmanager
async def standing(stand: Stand) -> AsyncIterator[str]:
    async with serve(stand) as url:
        yield url + PATH


Ask = Callable[[str, list[dict[str, Any]]], Any]


async def _sync_turns(url: str, turns: list[dict[str, Any]]) -> list[tuple[int, bytes]]:
    """Each turn posted through a sync `Transport` (off the loop); each answer's status and
    its first bytes (the whole of a finished one)."""

    def run() -> list[tuple[int, bytes]]:
        got = []
        with httpx.Client(transport=Transport()) as http:
            for turn in turns:
                with http.stream("POST", url, json=turn) as answer:
                    got.append((answer.status_code, next(answer.iter_bytes(), b"")))
        return got

    return await asyncio.wait_for(asyncio.to_thread(run), TIMEOUT)


async def _async_turns(url: str, turns: list[dict[str, Any]]) -> list[tuple[int, bytes]]:
    async def run() -> list[tuple[int, bytes]]:
        got = []
        async with httpx.AsyncClient(transport=AsyncTransport()) as http:
            for turn in turns:
                async with http.stream("POST", url, json=turn) as answer:
                    got.append((answer.status_code, await anext(answer.aiter_bytes(), b"")))
        return got

    return await asyncio.wait_for(run(), TIMEOUT)


TURNS = {"sync": _sync_turns, "async": _async_turns}


@pytest.fixture(autouse=True)
def short_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bounded, "PROBLEM_READ_S", 0.2)


@pytest.mark.parametrize("how", TURNS)
@pytest.mark.parametrize(
    ("status", "length"), [(409, None), (503, None), (409, b"500"), (503, b"500")]
)
async def test_a_problem_from_a_receiver_of_edits_trickled_is_handed_on_past_the_deadline(
    how: str, status: int, length: bytes | None
) -> None:
    start = b'{"type":"urn:toolref:problem:missing-'
    headers = [(b"content-type", PROBLEM.encode()), (b"toolref-edits", b"5")]
    if length is not None:
        headers.append((b"content-length", length))
    stand = Stand(status, headers, start)
    async with standing(stand) as url:
        got = await TURNS[how](url, [body(1), body(2)])
        assert got[0] == (200, b'{"answered":true}')
        # handed on with the bytes read first (the rest would follow as they come)
        assert got[1][0] == status
        assert got[1][1].startswith(start)
        assert stand.kinds == ["as it is", "edit"]
        await asyncio.wait_for(stand.closed.wait(), TIMEOUT)  # closed once the caller left


@pytest.mark.parametrize("how", TURNS)
@pytest.mark.parametrize(
    ("status", "kind"), [(415, PROBLEM), (400, "text/html"), (409, PROBLEM), (500, PROBLEM)]
)
async def test_a_refusal_from_no_receiver_of_edits_trickled_is_dropped_and_sent_as_it_is(
    how: str, status: int, kind: str
) -> None:
    stand = Stand(status, [(b"content-type", kind.encode())], b"{")
    async with standing(stand) as url:
        got = await TURNS[how](url, [body(1), body(2)])
        assert got == [(200, b'{"answered":true}')] * 2
        assert stand.kinds == ["as it is", "edit", "as it is"]
        assert json.loads(stand.plain[-1]) == body(2)  # the request as it is, unchanged
        await asyncio.wait_for(stand.closed.wait(), TIMEOUT)  # the edit's refusal closed


@pytest.mark.parametrize("how", TURNS)
async def test_a_gateway_refusal_trickled_under_its_length_is_handed_on_unshaped(
    how: str,
) -> None:
    """A toolref problem to a request as it is, which the transport reads whole to hand the
    SDK in its API's error shape: past the deadline it is handed on as it comes."""
    start = b'{"type":"urn:toolref:problem:unknown-key",'
    headers = [(b"content-type", PROBLEM.encode()), (b"content-length", b"300")]
    stand = Stand(401, headers, start, refuse=True)
    async with standing(stand) as url:
        got = await TURNS[how](url, [body(1)])
        assert got[0][0] == 401
        assert got[0][1].startswith(start)  # not shaped: the bytes as they came
        await asyncio.wait_for(stand.closed.wait(), TIMEOUT)


async def test_the_caller_cancelled_while_a_refusal_trickles_closes_it_and_its_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Cancelled during the SDK's own read (its deadline far off): the read pending is
    cancelled, no task of it left behind, and the connection closed."""
    monkeypatch.setattr(bounded, "PROBLEM_READ_S", 3600.0)
    headers = [(b"content-type", PROBLEM.encode()), (b"toolref-edits", b"5")]
    stand = Stand(409, headers, b"{")
    async with standing(stand) as url, httpx.AsyncClient(transport=AsyncTransport()) as http:
        await http.post(url, json=body(1))
        sending = asyncio.ensure_future(http.post(url, json=body(2)))
        await asyncio.wait_for(stand.begun.wait(), TIMEOUT)
        await asyncio.sleep(0.1)  # the head read, the SDK reading the trickle
        assert not sending.done()
        sending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sending
        reads = [t for t in asyncio.all_tasks() if "_piece" in repr(t.get_coro())]
        assert reads == []
        await asyncio.wait_for(stand.closed.wait(), TIMEOUT)
