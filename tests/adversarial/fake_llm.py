"""A fake OpenAI-compatible LLM on a real socket, that misbehaves as a test asks; and the
app under test wired to it.

The server runs on the test's own event loop (asyncio), speaks just enough HTTP/1.1 to
read a request and answer it, and records what happened on the wire: connections,
requests, the bytes it managed to send and whether the client hung up first. A behaviour
is an async function `(server, connection) -> None` that writes the answer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from redis.asyncio import Redis
from starlette.applications import Starlette

from toolref_server.app import create_app
from toolref_server.services import Services
from toolref_server.settings import Settings

MODEL = "fake-model"
ANSWER = "read_file src/app.py: 300 numbered lines; nothing failed."
LLM = "openai-compatible"
LINES = "".join(f"line {i:04d}\n" for i in range(300))
READ = {"name": "read_file", "args": {"path": "src/app.py"}, "result": LINES}


def llm_id(max_chars: int) -> str:
    return f"{LLM}:{MODEL}:v1:{max_chars}"


def completion(content: Any) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
        }
    ).encode()


@dataclass
class Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    body: dict[str, Any]  # the request's JSON body
    sent: int = 0  # answer bytes written (headers included)
    hung_up: asyncio.Event = field(default_factory=asyncio.Event)  # the client closed first

    async def send(self, data: bytes) -> bool:
        """Write `data`; False once the client has hung up (nothing more is sent)."""
        if self.hung_up.is_set():
            return False
        try:
            self.writer.write(data)
            await self.writer.drain()
        except (ConnectionError, RuntimeError):
            self.hung_up.set()
            return False
        self.sent += len(data)
        return True

    async def head(self, status: int = 200, **headers: str) -> bool:
        lines = [f"HTTP/1.1 {status} X", "Content-Type: application/json", "Connection: close"]
        lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
        return await self.send(("\r\n".join(lines) + "\r\n\r\n").encode())

    async def answer(self, body: bytes, status: int = 200) -> None:
        if await self.head(status, Content_Length=str(len(body))):
            await self.send(body)


Behaviour = Callable[["FakeLLM", Connection], Awaitable[None]]


async def answers(server: FakeLLM, connection: Connection) -> None:
    """A well-behaved model: answers ANSWER."""
    await connection.answer(completion(ANSWER))


class FakeLLM:
    """`POST /v1/chat/completions` on 127.0.0.1, answered by `behaviour`."""

    def __init__(self, behaviour: Behaviour = answers) -> None:
        self.behaviour = behaviour
        self.connections: list[Connection] = []
        self.tools: list[str] = []  # the tool named in each request's prompt
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def calls(self) -> int:
        return len(self.connections)

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            body = json.loads(await reader.readexactly(length)) if length else {}
            connection = Connection(reader, writer, body)
            self.connections.append(connection)
            prompt = body.get("messages", [{}, {}])[-1].get("content", "")
            self.tools.append(prompt.removeprefix("Tool: ").split("\n", 1)[0])
            watcher = asyncio.create_task(self._watch(connection))
            try:
                await self.behaviour(self, connection)
            finally:
                watcher.cancel()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    @staticmethod
    async def _watch(connection: Connection) -> None:
        """Notice the client hanging up (end of stream or a reset) while the answer is sent."""
        try:
            while await connection.reader.read(4096):
                pass
        except ConnectionError:
            pass
        connection.hung_up.set()


@asynccontextmanager
async def fake_llm(behaviour: Behaviour = answers) -> AsyncIterator[FakeLLM]:
    server = FakeLLM(behaviour)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@dataclass
class App:
    app: Starlette
    http: httpx.AsyncClient

    @property
    def services(self) -> Services:
        found: Services = self.app.state.services
        return found

    async def register(self, invocation: dict[str, Any]) -> str:
        response = await self.http.post("/v1/invocations", json={"invocations": [invocation]})
        assert response.status_code == 200, response.text
        ref: str = response.json()["refs"][0]["ref"]
        return ref

    async def summary(self, ref: str, max_chars: int = 200) -> dict[str, Any]:
        response = await self.http.get(
            f"/v1/invocations/{ref}/summary", params={"summarizer": LLM, "maxChars": max_chars}
        )
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer


Build = Callable[..., Awaitable[App]]


@asynccontextmanager
async def apps(redis: Redis) -> AsyncIterator[Build]:
    """Builds the app on the test engine with the openai-compatible summarizer pointed at a
    fake LLM (over its real socket), lifespan run; all closed together at the end."""
    async with AsyncExitStack() as stack:

        async def build(
            llm: FakeLLM, headers: dict[str, str] | None = None, **settings: Any
        ) -> App:
            config = Settings(
                **{
                    "redis_url": "unused",
                    "llm_base_url": llm.url,
                    "llm_model": MODEL,
                    "llm_input_chars": 1000,
                    **settings,
                }
            )
            app = create_app(config, redis=redis)
            await stack.enter_async_context(app.router.lifespan_context(app))
            http = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://toolref.test",
                headers={"Toolref-Protocol": "2", **(headers or {})},
                timeout=60,
            )
            await stack.enter_async_context(http)
            return App(app, http)

        yield build


def invocation(n: int, result: str = LINES) -> dict[str, Any]:
    """A distinct read of `src/module_{n}.py`."""
    return {"name": f"read_{n}", "args": {"path": f"src/module_{n}.py"}, "result": result}
