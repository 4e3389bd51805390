"""The fake provider on a raw socket, for answers no well-behaved server sends: an
OpenAI-compatible `POST /v1/chat/completions` that misbehaves as a test asks.

The server runs on the test's own event loop (asyncio), speaks just enough HTTP/1.1 to
read a request and answer it, and records what happened on the wire: connections,
requests, the bytes it managed to send and whether the client hung up first. A behaviour
is an async function `(server, connection) -> None` that writes the answer; the default
one answers `ANSWER` as a Chat Completions body (`wire.chat_completion`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.support.fake_provider.wire import Reply, chat_completion

MODEL = "fake-model"
ANSWER = "read_file src/app.py: 300 numbered lines; nothing failed."


def completion(content: Any) -> bytes:
    """A Chat Completions answer whose message content is `content` (any JSON value: a
    test may send what no model should)."""
    body = chat_completion(Reply(), MODEL, 1)
    body["choices"][0]["message"]["content"] = content
    return json.dumps(body).encode()


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


Behaviour = Callable[["RawProvider", Connection], Awaitable[None]]


async def answers(server: RawProvider, connection: Connection) -> None:
    """A well-behaved model: answers ANSWER."""
    await connection.answer(completion(ANSWER))


class RawProvider:
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
async def raw_provider(behaviour: Behaviour = answers) -> AsyncIterator[RawProvider]:
    server = RawProvider(behaviour)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
