"""`ToolReferenceManager.stream` / `astream`: streamed answers to requests sent as edits,
and their resends, over real sockets.

The paced backend (tests/integration/paced.py) sits behind `ToolRefMiddleware` on the real
registry; the client reads its event stream through the manager, with httpx's blocking
client (in a thread, as another process would) and its async client. The first event must
be readable before the app makes the second; every resend (409 missing-history, 409
missing-pieces, 400 dictionary-mismatch) must end in the stream, whole, and the app must
receive exactly the bytes of the conversation the client holds.
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

from tests.support.servers import edit_header
from toolref import ToolReferenceManager
from toolref.edits.wire import MEDIA_TYPE
from toolref.edits.wire import VERSION as EDITS_VERSION
from toolref.wire.compression import compress
from toolref.wire.encoding import dumps_json
from toolref.wire.headers import EDITS_HEADER

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
        assert self.stack.paced.calls[-1].raw == dumps_json(body)
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


def base_of(request: httpx.Request) -> str | None:
    """The base an edit names (None: no base)."""
    header = edit_header(request)  # type: ignore[arg-type]  # httpx's Request, read alike
    assert header is not None, "not an edit"
    base: str | None = header["b"]
    return base


def recipe_keys(names: list[str], kinds: str) -> list[str]:
    """The keys of recipes' nodes (`b`), chunks (`k`) or pieces (`p`) among `names`."""
    return [name for name in names if name.split(":")[2] in kinds]


@BLOCKING
async def test_each_turn_streams_and_later_ones_are_edits(stack: Stack, blocking: bool) -> None:
    client = Client(stack, ToolReferenceManager(), blocking)
    _, [first] = await client.turn()
    _, [second] = await client.turn()
    _, [third] = await client.turn()
    assert first.headers[EDITS_HEADER] == str(EDITS_VERSION)  # as it is, offering edits
    assert "content-encoding" not in first.headers
    assert edit_header(first) is None  # type: ignore[arg-type]
    assert base_of(second) is None  # nothing was kept of the first
    assert base_of(third) is not None
    assert len(third.read()) < len(json.dumps(client.history)) / 4
    assert client.manager.savings.edits == 2
    assert client.manager.savings.resends == 0


@BLOCKING
async def test_a_missing_history_is_resent_with_no_base_then_streamed(
    stack: Stack, blocking: bool
) -> None:
    client = Client(stack, ToolReferenceManager(), blocking)
    await client.turn()
    await client.turn()
    nodes = recipe_keys(await key_names(stack.redis), "b")
    assert nodes
    await stack.redis.delete(*nodes)
    _, sent = await client.turn()
    edited, again = sent
    assert base_of(edited) is not None
    assert base_of(again) is None
    assert client.manager.savings.resends == 1
    _, [later] = await client.turn()
    assert base_of(later) is not None  # confirmed again, edited against


@BLOCKING
async def test_evicted_pieces_are_resent_inline_then_streamed(stack: Stack, blocking: bool) -> None:
    """A segment of 16 KiB or more is a piece, kept once for every recipe holding it. A
    turn that repeats a piece another conversation holds names it by its id; that piece
    evicted, the edit is a 409 missing-pieces, resent with it inline, and the turn
    streams."""
    manager = ToolReferenceManager()
    one, other = Client(stack, manager, blocking), Client(stack, manager, blocking)
    # One line each: the long window cuts at line ends only, so each stays one segment.
    one.history[3]["content"] = "z = 3; " * 3500  # 24 KB: a piece
    other.history[3]["content"] = "w = 4; " * 2600  # 18 KB: another
    await one.turn()
    await one.turn()
    before = recipe_keys(await key_names(stack.redis), "p")
    await other.turn()
    await other.turn()
    [piece] = set(recipe_keys(await key_names(stack.redis), "p")) - set(before)
    one.history.append(dict(other.history[3]))  # the other's piece, in this conversation
    await stack.redis.delete(piece)
    _, sent = await one.turn()
    named, inline = (edit_header(request) for request in sent)  # type: ignore[arg-type]
    assert named is not None
    assert inline is not None
    assert named["b"] == inline["b"] is not None  # the base held whole all along
    assert [op for op in named["o"] if isinstance(op, str) and op.startswith("tp_")]
    assert not [op for op in inline["o"] if isinstance(op, str)]
    assert inline["n"] > 18_000 > named["n"]
    assert manager.savings.resends == 1


@BLOCKING
async def test_a_dictionary_mismatch_is_resent_uncompressed_then_streamed(
    stack: Stack, blocking: bool
) -> None:
    """Unguarded edits (`size_guard=False`, version 1) compress their new segments against
    the base's: when both ends disagree on those bytes (400 dictionary-mismatch), the edit
    is sent again without a dictionary."""
    client = Client(stack, ToolReferenceManager(size_guard=False), blocking)
    await client.turn()
    await client.turn()
    # New bytes worth compressing against the base (fewer travel as they are).
    client.history.append({"role": "user", "content": "read a.py and b.py again " * 100})

    def other_dictionary(request: httpx.Request) -> httpx.Request:
        """The first edit compressed against the base, compressed against another
        dictionary instead: what a client and server that disagree on it would see."""
        header = edit_header(request)  # type: ignore[arg-type]
        if header is None or not header.get("z") or client.manager.savings.resends:
            return request
        text = "".join(hashlib.sha256(b"%d" % i).hexdigest() for i in range(64))
        plain = (text * (header["n"] // len(text) + 1))[: header["n"]].encode()
        line = request.read().split(b"\n", 1)[0]
        content = line + b"\n" + compress(plain, text.encode(), 3)  # drawn from that dictionary
        headers = {**request.headers, "content-length": str(len(content))}
        return httpx.Request(request.method, request.url, headers=headers, content=content)

    _, sent = await client.turn(other_dictionary)
    compressed, plain = sent
    first, again = edit_header(compressed), edit_header(plain)  # type: ignore[arg-type]
    assert first is not None
    assert again is not None
    assert first["v"] == again["v"] == 1
    assert first["z"] > 0
    assert "z" not in again or again["z"] == 0
    assert again["b"] == first["b"]
    assert client.manager.savings.resends == 1


@BLOCKING
async def test_a_plain_backend_streams_and_is_never_sent_an_edit(
    stack: Stack, blocking: bool
) -> None:
    client = Client(stack, ToolReferenceManager(), blocking, stack.plain_url)
    for _ in range(3):
        sent = dumps_json({"model": "m", "messages": client.history, "stream": True})
        _, [request] = await client.turn()
        assert request.headers["content-type"] == "application/json"
        assert request.headers[EDITS_HEADER] == str(EDITS_VERSION)
        assert request.read() == sent
    assert client.manager.savings.edits == 0
    assert client.manager.savings.sent_bytes == client.manager.savings.full_bytes


async def test_an_answer_read_in_the_block_is_the_apps(stack: Stack) -> None:
    """A JSON answer streamed through the manager and read whole: the app's body as it
    wrote it (nothing added to an edit's answer), the edit's marks in its headers."""
    history = openai_conversation("json")
    manager = ToolReferenceManager()
    async with httpx.AsyncClient(base_url=stack.url, timeout=TIMEOUT) as http:
        for turn in range(2):
            body = {"messages": history}
            async with manager.astream(http, "POST", "/json", json=body) as response:
                await response.aread()
            assert response.status_code == 200
            assert response.json() == {"messages": [{"role": "assistant", "content": "done"}]}
            assert stack.paced.calls[-1].raw == dumps_json(body)
            assert response.headers[EDITS_HEADER] == str(EDITS_VERSION)
            edited = response.request.headers["content-type"] == MEDIA_TYPE
            assert edited is (turn == 1)
            history = [*history, {"role": "user", "content": "again"}]
    assert response.headers["toolref-history"].startswith("tb_")
    assert manager.savings.edits == 1


def test_only_post_carries_messages() -> None:
    manager = ToolReferenceManager()
    with (
        httpx.Client() as http,
        pytest.raises(ValueError, match=r"method must be 'POST', not 'GET'.*client.stream\('GET'"),
        manager.stream(http, "GET", "http://127.0.0.1:9/chat", json={"messages": []}),
    ):
        pass
