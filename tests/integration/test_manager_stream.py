"""`ToolReferenceManager.stream` / `astream`: streamed answers with refs, history refs and
resends, over real sockets.

The paced backend (tests/integration/paced.py) sits behind `ToolRefMiddleware` on the real
registry; the client reads its event stream through the manager, with httpx's blocking
client (in a thread, as another process would) and its async client. The first event must
be readable before the app makes the second; every resend (409 missing-refs, 409
missing-history, 400 dictionary-mismatch) must end in the stream, whole, and the app must
receive exactly the conversation the client holds.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.support.servers import markers
from toolref import ToolReferenceManager
from toolref.wire.compression import compress

from ..conftest import key_names
from .paced import (
    OPENAI,
    TIMEOUT,
    Events,
    Frame,
    Stack,
    assert_app_got,
    openai_conversation,
    openai_next,
    paced_stack,
)

Tamper = Callable[[httpx.Request], httpx.Request]


@pytest.fixture
async def stack(redis: Redis) -> AsyncIterator[Stack]:
    async with paced_stack(redis) as stack:
        yield stack


class Recording(httpx.HTTPTransport):
    """The real transport, keeping what went over the wire (after `tamper`, if given)."""

    def __init__(self, tamper: Tamper | None = None) -> None:
        super().__init__()
        self.sent: list[httpx.Request] = []
        self.tamper = tamper

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.tamper is not None:
            request = self.tamper(request)
        self.sent.append(request)
        return super().handle_request(request)


class AsyncRecording(httpx.AsyncHTTPTransport):
    def __init__(self, tamper: Tamper | None = None) -> None:
        super().__init__()
        self.sent: list[httpx.Request] = []
        self.tamper = tamper

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.tamper is not None:
            request = self.tamper(request)
        self.sent.append(request)
        return await super().handle_async_request(request)


class Client:
    """One conversation, streamed through a manager with a blocking or an async client."""

    def __init__(
        self, stack: Stack, manager: ToolReferenceManager, blocking: bool, url: str = ""
    ) -> None:
        self.stack, self.manager, self.blocking = stack, manager, blocking
        self.url = (url or stack.url) + "/starlette/v1/chat/completions"
        self.history = openai_conversation(f"{id(self)} {blocking}")

    async def turn(self, tamper: Tamper | None = None) -> tuple[list[Frame], list[httpx.Request]]:
        """Send the history, read the answer's events as they come; then add the next turn."""
        body = {"model": "m", "messages": self.history, "stream": True}
        if self.blocking:
            frames, sent = await asyncio.to_thread(self._blocking, body, tamper)
        else:
            frames, sent = await self._async(body, tamper)
        assert frames == OPENAI
        assert_app_got(self.stack.paced, self.history)
        openai_next(self.history)
        return frames, sent

    def _blocking(
        self, body: dict[str, Any], tamper: Tamper | None
    ) -> tuple[list[Frame], list[httpx.Request]]:
        wire, frames, events = Recording(tamper), list[Frame](), Events()
        with (
            httpx.Client(transport=wire, timeout=TIMEOUT) as http,
            self.manager.stream(http, "POST", self.url, json=body) as response,
        ):
            assert response.status_code == 200
            for frame in events.frames(response.iter_lines()):
                frames.append(frame)
                if len(frames) == 1:
                    self.stack.paced.release()
        return frames, wire.sent

    async def _async(
        self, body: dict[str, Any], tamper: Tamper | None
    ) -> tuple[list[Frame], list[httpx.Request]]:
        wire, frames, events = AsyncRecording(tamper), list[Frame](), Events()
        async with (
            httpx.AsyncClient(transport=wire, timeout=TIMEOUT) as http,
            self.manager.astream(http, "POST", self.url, json=body) as response,
        ):
            assert response.status_code == 200
            async for line in response.aiter_lines():
                frame = events.feed(line)
                if frame is not None:
                    frames.append(frame)
                    if len(frames) == 1:
                        self.stack.paced.release()
        return frames, wire.sent


BLOCKING = pytest.mark.parametrize("blocking", [True, False], ids=["Client", "AsyncClient"])


def body_of(request: httpx.Request) -> Any:
    assert "content-encoding" not in request.headers
    return json.loads(request.read())


@BLOCKING
async def test_each_turn_streams_and_later_ones_continue_the_history(
    stack: Stack, blocking: bool
) -> None:
    client = Client(stack, ToolReferenceManager(), blocking)
    _, first = await client.turn()
    _, second = await client.turn()
    _, third = await client.turn()
    assert first[0].headers["toolref-history"] == "?1"
    for [request] in (second, third):
        assert request.headers["toolref-history"].startswith("th_")
        assert request.headers["content-encoding"] == "zstd"
    assert len(third[0].read()) < len(json.dumps(client.history)) / 4
    assert client.manager.savings.histories_used == 2
    assert client.manager.savings.fallbacks == 0


@BLOCKING
async def test_missing_refs_are_resent_in_full_then_streamed(stack: Stack, blocking: bool) -> None:
    client = Client(stack, ToolReferenceManager(history_refs=False), blocking)
    await client.turn()
    assert client.manager.confirmed  # from the stream's Toolref-References header
    invocations = [n for n in await key_names(stack.redis) if ":i:" in n]
    await stack.redis.delete(*invocations)
    _, sent = await client.turn()
    markers_sent, in_full = sent
    assert markers(body_of(markers_sent)) == 2
    assert markers(body_of(in_full)) == 0
    assert client.manager.savings.fallbacks == 1
    # Confirmed again by that answer: three invocations now (the last two the same call
    # made twice, one ref), all as markers.
    _, later = await client.turn()
    assert markers(body_of(later[0])) == 6


@BLOCKING
async def test_a_missing_history_is_resent_whole_then_streamed(
    stack: Stack, blocking: bool
) -> None:
    client = Client(stack, ToolReferenceManager(compress=False), blocking)
    await client.turn()
    nodes = [n for n in await key_names(stack.redis) if ":h:" in n]
    await stack.redis.delete(*nodes)
    _, sent = await client.turn()
    continued, whole = sent
    assert "historyRef" in body_of(continued)
    assert "historyRef" not in body_of(whole)
    assert len(body_of(whole)["messages"]) == len(client.history) - 3
    assert client.manager.savings.fallbacks == 1


@BLOCKING
async def test_a_dictionary_mismatch_is_resent_uncompressed_then_streamed(
    stack: Stack, blocking: bool
) -> None:
    client = Client(stack, ToolReferenceManager(max_prior_bytes=0), blocking)
    await client.turn()

    def other_dictionary(request: httpx.Request) -> httpx.Request:
        """The first body compressed against the history, compressed against another
        dictionary instead: what a client and server that disagree on it would see."""
        if request.headers.get("content-encoding") != "zstd" or client.manager.savings.fallbacks:
            return request
        text = "".join(hashlib.sha256(b"%d" % i).hexdigest() for i in range(64))
        plain = json.dumps({"messages": [{"role": "user", "content": text}]}).encode()
        content = compress(plain, text.encode(), 3)  # all of it drawn from that dictionary
        headers = {**request.headers, "content-length": str(len(content))}
        return httpx.Request(request.method, request.url, headers=headers, content=content)

    _, sent = await client.turn(other_dictionary)
    compressed, plain = sent
    assert compressed.headers["toolref-history"].startswith("th_")
    assert body_of(plain)["historyRef"] == compressed.headers["toolref-history"]
    assert client.manager.savings.fallbacks == 1


@BLOCKING
async def test_a_refused_prior_body_is_resent_against_the_history_alone(
    stack: Stack, blocking: bool
) -> None:
    """A body compressed against a history and the body kept with it, refused (here it
    names a body the backend never kept, as another replica would see it): resent
    compressed against the history's own dictionary."""
    client = Client(stack, ToolReferenceManager(), blocking)
    await client.turn()
    [named] = client.manager.priors
    elsewhere = "th_" + "a" * 26

    def other_replica(request: httpx.Request) -> httpx.Request:
        if request.headers.get("toolref-dictionary") != named:
            return request
        headers = {**request.headers, "toolref-dictionary": elsewhere}
        return httpx.Request(request.method, request.url, headers=headers, content=request.content)

    _, sent = await client.turn(other_replica)
    primed, compressed = sent
    assert primed.headers["toolref-dictionary"] == elsewhere
    assert "toolref-dictionary" not in compressed.headers
    assert compressed.headers["content-encoding"] == "zstd"
    assert compressed.headers["toolref-history"] == named
    assert client.manager.savings.fallbacks == 1
    assert client.manager.prior_refusals == 1


@BLOCKING
async def test_a_protocol_1_backend_streams_and_is_never_sent_refs(
    stack: Stack, blocking: bool
) -> None:
    client = Client(stack, ToolReferenceManager(), blocking, stack.plain_url)
    for _ in range(3):
        _, [request] = await client.turn()
        body = body_of(request)
        assert markers(body) == 0
        assert "historyRef" not in body
    assert not client.manager.refs_accepted
    assert client.manager.savings.refs_sent == 0


async def test_a_json_answer_read_in_the_block_teaches_its_tool_references(
    stack: Stack,
) -> None:
    history = openai_conversation("json")
    async with httpx.AsyncClient(base_url=stack.url, timeout=TIMEOUT) as http:
        unread = ToolReferenceManager(history_refs=False)
        async with unread.astream(http, "POST", "/json", json={"messages": history}):
            pass  # headers only: the refs are in the body
        assert not unread.confirmed
        manager = ToolReferenceManager(history_refs=False)
        async with manager.astream(http, "POST", "/json", json={"messages": history}) as response:
            await response.aread()
            references = response.json()["toolReferences"]
        assert list(manager.confirmed) == list(references.values())


def test_only_post_carries_messages() -> None:
    manager = ToolReferenceManager()
    with (
        httpx.Client() as http,
        pytest.raises(ValueError, match=r"method must be 'POST', not 'GET'.*client.stream\('GET'"),
        manager.stream(http, "GET", "http://127.0.0.1:9/chat", json={"messages": []}),
    ):
        pass
