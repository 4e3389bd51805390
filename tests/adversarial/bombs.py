"""Compressed bombs and what they are sent to: bodies small on the wire that inflate to
megabytes (gzip and zstd), an upstream provider on a real socket that keeps nothing of what
it is sent, and the checks every memory test shares."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
import zstandard
from redis.asyncio import Redis

from toolref.asgi.budget import Budget

ENCODINGS: Final = ("gzip", "zstd")
CHAT: Final = "/llm/up/v1/chat/completions"  # an OpenAI Chat Completions endpoint of the gateway
PROTOCOL: Final = {"content-type": "application/json", "toolref-protocol": "2"}
_LENGTH: Final = re.compile(rb"(?im)^content-length:\s*(\d+)\s*$")


def compressed(body: bytes, encoding: str) -> bytes:
    return gzip.compress(body) if encoding == "gzip" else zstandard.compress(body)


def sent(body: bytes, encoding: str) -> dict[str, Any]:
    """`httpx` keywords for `body` sent compressed with `encoding`, as protocol 2."""
    headers = {**PROTOCOL, "content-encoding": encoding}
    return {"content": compressed(body, encoding), "headers": headers}


def result(n: int, size: int) -> str:
    """A tool result of `size` characters, distinct for each `n` (so it is stored apart)."""
    head = f"result {n}: "
    return head + "x" * (size - len(head))


def register_body(n: int, size: int) -> bytes:
    """A register request of one invocation whose body is about `size` bytes."""
    invocation = {"name": "read_file", "args": {"n": n}, "result": result(n, size - 80)}
    return json.dumps({"invocations": [invocation]}).encode()


def chat(n: int, size: int, results: int = 1, *, bomb: bool = False) -> list[dict[str, Any]]:
    """An OpenAI Chat Completions conversation of `results` tool results of about
    `size // results` characters each (distinct for each `n`): numbered lines, or with
    `bomb` one letter repeated (a few hundred bytes once compressed)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"read the files ({n})"}]
    for at in range(results):
        call = f"call_{n}_{at}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": f'{{"at": {at}}}'},
                    }
                ],
            }
        )
        each = size // results
        text = result(n, each) if bomb else "".join(f"{n}:{at}:{i:09d} " for i in range(each // 16))
        messages.append({"role": "tool", "tool_call_id": call, "content": text})
    return messages


def chat_body(n: int, size: int, results: int = 1, *, bomb: bool = False) -> bytes:
    return json.dumps({"model": "m", "messages": chat(n, size, results, bomb=bomb)}).encode()


def hydrate_body(n: int, size: int, results: int = 1, *, bomb: bool = False) -> bytes:
    return json.dumps({"messages": chat(n, size, results, bomb=bomb)}).encode()


async def stored_records(redis: Redis) -> int:
    """Invocation records in the engine (`tr:{tenant}:i:{ref}`)."""
    return len([key async for key in redis.scan_iter(match="tr:*:i:*")])


def assert_overloaded(answer: httpx.Response, setting: str, limit: int) -> None:
    """503 `overloaded` problem+json naming `setting`, with `Retry-After` and `limit`."""
    assert answer.status_code == 503, (answer.status_code, answer.text[:300])
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.headers["retry-after"].isdigit()
    problem = answer.json()
    assert problem["type"] == "urn:toolref:problem:overloaded", problem
    assert problem["limit"] == limit
    assert setting in problem["detail"], problem["detail"]


async def until(condition: Callable[[], bool], seconds: float = 30.0) -> None:
    """Wait (polling) until `condition` holds; fail after `seconds`."""
    for _ in range(int(seconds / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


async def charged(budget: Budget, at_least: int) -> None:
    """Wait until `budget` holds at least `at_least` bytes."""
    await until(lambda: budget.in_flight >= at_least)


async def stalled(body: bytes, release: asyncio.Event) -> AsyncIterator[bytes]:
    """An upload that sends `body` and then waits for `release` before it ends."""
    yield body
    await release.wait()


@dataclass
class Upstream:
    """An LLM provider on a real socket: it reads each request's body in 64 KiB pieces,
    keeping none of them (so it adds nothing to the memory measured in this process), and
    answers a small JSON; with `hold`, the first answer is an event stream that stays open
    after its first event until `release` is set."""

    hold: bool = False
    release: asyncio.Event = field(default_factory=asyncio.Event)
    bodies: list[int] = field(default_factory=list)  # the size of each body received

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            found = _LENGTH.search(head)
            left = int(found.group(1)) if found else 0
            got = 0
            while got < left:
                piece = await reader.read(min(65536, left - got))
                if not piece:
                    break
                got += len(piece)
            self.bodies.append(got)
            if self.hold and len(self.bodies) == 1:
                writer.write(_head(b"text/event-stream", chunked=True) + _chunks([b"data: 1\n\n"]))
                await writer.drain()
                await self.release.wait()
                writer.write(_chunks([b"data: 2\n\n", b""]))
            else:
                body = json.dumps({"received": got}).encode()
                writer.write(_head(b"application/json", length=len(body)) + body)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


def _head(media: bytes, *, length: int | None = None, chunked: bool = False) -> bytes:
    framing = b"transfer-encoding: chunked" if chunked else b"content-length: %d" % (length or 0)
    return b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\n%s\r\nconnection: close\r\n\r\n" % (
        media,
        framing,
    )


def _chunks(pieces: Sequence[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces)
