"""A streaming LLM backend the test paces, behind `ToolRefMiddleware`, over real sockets.

Each request is a `Call`: the app records the body it got and every event it produced, and
holds back the second event until the test releases it (`Paced.release`, once it has read
the first). A client that reads event 1 has it while event 2 does not exist yet, so nothing
on the way buffered the stream. Between the other events the app awaits `asyncio.sleep`,
as a model's tokens come. The events are the providers' own: OpenAI `chat.completion.chunk`s
with a tool call, and Anthropic `message_start` .. `message_stop`; sent by Starlette's
`StreamingResponse` (`/starlette/...`) or by sse-starlette's `EventSourceResponse`
(`/sse/...`). `/{kind}/forever` streams one event, then waits for the client to leave
(`/poll/forever`: an ASGI app that asks `request.is_disconnected()`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.fake_provider import wire
from tests.support.servers import serve, serve_all
from toolref import AsyncRegistryClient, ToolRefMiddleware
from toolref_server.app import create_app
from toolref_server.settings import Settings

CALL_B = wire.Reply(call=wire.Call("read_file", {"path": "b.py"}), index=1)
Frame = tuple[str | None, str]  # (event name, data) of one server-sent event
OPENAI: list[Frame] = [
    (None, json.dumps(c)) for c in wire.chat_chunks(CALL_B, "scripted-1", 1, False)
]
OPENAI.append((None, "[DONE]"))
ANTHROPIC: list[Frame] = [
    (e, json.dumps(d)) for e, d in wire.anthropic_events(CALL_B, "scripted-1", 1)
]


PAYLOAD = "x = 1\n" * 300
# A net for a hang, not a timing check: a buffered stream never shows its first event.
TIMEOUT = 30


def openai_conversation(tag: str) -> list[dict[str, Any]]:
    """A conversation holding one complete tool invocation, and a question after it."""
    call = {"name": "read_file", "arguments": json.dumps({"path": "a.py"})}
    return [
        {"role": "system", "content": f"conversation {tag}"},
        {"role": "user", "content": "read a.py"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": call}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": PAYLOAD},
        {"role": "user", "content": "and b.py?"},
    ]


def openai_next(history: list[dict[str, Any]]) -> None:
    """The client's side of the next turn: the streamed call (call_2), its result, a
    question."""
    call = {"name": "read_file", "arguments": json.dumps({"path": "b.py"})}
    history += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_2", "type": "function", "function": call}],
        },
        {"role": "tool", "tool_call_id": "call_2", "content": "y = 2\n" * 200},
        {"role": "user", "content": "thanks"},
    ]


def assert_app_got(paced: Paced, history: list[dict[str, Any]]) -> None:
    got = paced.calls[-1].body["messages"]
    assert got == history
    assert json.dumps(got) == json.dumps(history)  # key order too


@dataclass
class Call:
    """One request as the app saw it."""

    body: dict[str, Any]
    raw: bytes = b""  # the body's bytes, as the app got them
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    produced: list[int] = field(default_factory=list)  # events made, in order
    gone: asyncio.Event = field(default_factory=asyncio.Event)  # it saw the client leave
    how: str = ""  # how it saw it
    early: bool | None = None  # what is_disconnected() said while the client was there


class Paced:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.loop = asyncio.get_running_loop()

    def release(self) -> None:
        """The client has read the first event of the last call: check that the app has
        made no other yet, and let it make the rest. Safe from any thread."""
        call = self.calls[-1]
        assert call.produced == [0], f"events made before the first was read: {call.produced}"
        self.loop.call_soon_threadsafe(call.gate.set)

    def app(self) -> Starlette:
        async def paced(call: Call, frames: list[Frame]) -> AsyncIterator[Frame]:
            for n, frame in enumerate(frames):
                if n == 1:
                    await call.gate.wait()
                elif n:
                    await asyncio.sleep(0.001)
                call.produced.append(n)
                yield frame

        def respond(kind: str, call: Call, frames: list[Frame]) -> Response:
            events = paced(call, frames)
            if kind == "sse":
                return EventSourceResponse(
                    ServerSentEvent(data=data, event=event) async for event, data in events
                )
            return StreamingResponse(
                (_frame(event, data) async for event, data in events),
                media_type="text/event-stream",
            )

        async def begin(request: Request) -> Call:
            raw = await request.body()
            call = Call(json.loads(raw), raw)
            self.calls.append(call)
            return call

        async def chat(request: Request) -> Response:
            call = await begin(request)
            return respond(request.path_params["kind"], call, OPENAI)

        async def messages(request: Request) -> Response:
            call = await begin(request)
            return respond(request.path_params["kind"], call, ANTHROPIC)

        async def forever(request: Request) -> Response:
            call = await begin(request)
            if request.path_params["kind"] == "sse":
                return EventSourceResponse(_cancelled(call))
            return StreamingResponse(_endless(call), media_type="text/event-stream")

        async def whole(request: Request) -> Response:
            await begin(request)
            return JSONResponse({"messages": [{"role": "assistant", "content": "done"}]})

        return Starlette(
            routes=[
                Route("/{kind}/v1/chat/completions", chat, methods=["POST"]),
                Route("/{kind}/v1/messages", messages, methods=["POST"]),
                Route("/poll/forever", _Polling(self), methods=["POST"]),
                Route("/{kind}/forever", forever, methods=["POST"]),
                Route("/json", whole, methods=["POST"]),
            ]
        )


def _frame(event: str | None, data: str) -> bytes:
    return (f"event: {event}\n" if event else "").encode() + f"data: {data}\n\n".encode()


class _Polling:
    """An ASGI app that sends one event, then only asks `request.is_disconnected()` (the
    receive it asks is the one the middleware hands on once the body is in)."""

    def __init__(self, paced: Paced) -> None:
        self.paced = paced

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        request = Request(scope, receive)
        call = Call(await request.json())
        self.paced.calls.append(call)
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        call.produced.append(0)
        await send({"type": "http.response.body", "body": _frame(None, "first"), "more_body": True})
        # Asked while the client is sure to be there: it reads the next event before leaving.
        call.early = await request.is_disconnected()
        call.produced.append(1)
        await send(
            {"type": "http.response.body", "body": _frame(None, "second"), "more_body": True}
        )
        while not await request.is_disconnected():  # noqa: ASYNC110 - the call under test
            await asyncio.sleep(0.005)
        call.how = "is_disconnected"
        call.gone.set()


async def _endless(call: Call) -> AsyncIterator[bytes]:
    """One event, then waits; Starlette cancels it when it hears the client leave."""
    try:
        call.produced.append(0)
        yield _frame(None, "first")
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        call.how = "cancelled"
        call.gone.set()
        raise


async def _cancelled(call: Call) -> AsyncIterator[ServerSentEvent]:
    """One event, then waits; sse-starlette cancels it when the client leaves."""
    try:
        call.produced.append(0)
        yield ServerSentEvent(data="first")
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        call.how = "cancelled"
        call.gone.set()
        raise


class Events:
    """Server-sent events from text lines (the fields tests compare: event and data)."""

    def __init__(self) -> None:
        self.event: str | None = None
        self.data: list[str] = []

    def feed(self, line: str) -> Frame | None:
        """The frame `line` completes, if it does."""
        if line == "":
            frame = (self.event, "\n".join(self.data)) if self.data else None
            self.event, self.data = None, []
            return frame
        if line.startswith(":"):
            return None  # a comment (keep-alive)
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self.event = value
        elif name == "data":
            self.data.append(value)
        return None

    def frames(self, lines: Iterable[str]) -> Iterator[Frame]:
        for line in lines:
            frame = self.feed(line)
            if frame is not None:
                yield frame


@dataclass
class Stack:
    paced: Paced
    url: str  # the paced backend behind the middleware
    plain_url: str  # the same app without it
    redis: Redis


@asynccontextmanager
async def paced_stack(redis: Redis) -> AsyncIterator[Stack]:
    """The registry on the test engine (no edit cache: the store decides what is held, so
    evicting keys is felt), and the paced backend with and without the middleware, each
    served by uvicorn."""
    service = create_app(Settings(redis_url="unused", edit_cache_bytes=0), redis=redis)
    async with serve(service) as registry_url:
        registry = AsyncRegistryClient(registry_url, retries=0)
        paced = Paced()
        backend = ToolRefMiddleware(paced.app(), registry)
        async with serve_all(backend, paced.app()) as [url, plain_url]:
            yield Stack(paced, url, plain_url, redis)
        await registry.aclose()
