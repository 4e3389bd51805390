"""The soak's traffic: every kind of request toolref serves, mixed, at a steady rate.

One action at a time is started every 1/rate seconds, in the order of `SCHEDULE` (open
loop: a slow answer does not slow the sending, up to `in_flight` actions at once; the rate
may change between phases):

- the registry's REST API (register, findMissing, resolve, summaries, optimize then
  hydrate), JSON and msgpack in turn, each body identity, zstd or gzip in turn;
- the middleware: a chat backend (examples/llm_backend.py behind `ToolRefMiddleware`)
  called through the SDK's `AsyncTransport` (edits once the backend says it reads them),
  streamed every other turn;
- the gateway: an agent's turn (Anthropic Messages or OpenAI Chat, streamed every other
  turn, its body identity, zstd or gzip as agents send them) to `toolref relay`, which
  sends it on to the service's `/llm/fake/...` and the fake provider;
- the gateway's answer taps: OpenAI Responses and Gemini conversations through the relay
  (`loadtests/soak_items.py`), every turn streamed, each answer written back as the next
  turn's history as Codex CLI and Gemini CLI do, so that the relay's and the gateway's
  answers are the dictionaries of the next edits (issue 39);
- clients going away: a body cut off half way (to the service, the relay and the
  backend, zstd), and a stream read to its first bytes and dropped (relay: a Responses or
  Gemini stream every other time; and backend);
- edits meant to make the gateway build far more than it was sent (issue 37): a few KB
  keeping a held base hundreds of times over, empty inline segments, a header line nested
  past the parser, no ops; each refused at once (413 or 400), or it fails the run.

Conversations run `turns` turns, then a new one starts with new payloads (`salt`), so
records are written all along; a few run side by side per path.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import random
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
import zstandard

import toolref
from loadtests.soak_items import GEMINI, HEADERS, ITEM_APIS, PATHS, RESPONSES, ItemConversations
from loadtests.soak_items import events as sse_events
from loadtests.workload import TOOL_SCHEMA, anthropic, cuts, invocation, synthetic
from toolref.edits.edit import Inline, Keep
from toolref.edits.recipe import entry_of, recipe_ref
from toolref.edits.wire import MEDIA_TYPE as EDIT_TYPE
from toolref.edits.wire import encode
from toolref.wire.encoding import JSON_TYPE, MSGPACK_TYPE, packb, unpackb

REST, MIDDLEWARE, GATEWAY = "rest", "middleware", "gateway"
CUT_REQUEST, CUT_STREAM = "disconnect mid-request", "disconnect mid-stream"
EDIT_ATTACK: Final = "edit attack"
SAVINGS: Final = "toolref-savings"  # the relay's answer header: raw=, wire=
EDIT_ATTACKS: Final = ("amplify", "empty segments", "nested header", "no ops")
# One round of actions, 20 of them: what each slot starts.
SCHEDULE: Final = (
    "register", "middleware", "gateway", "findMissing", "optimize",
    "resolve", RESPONSES, "middleware", "register", CUT_REQUEST,
    "summary", "middleware", "gateway", "findMissing", "optimize",
    EDIT_ATTACK, GEMINI, "middleware", "resolve", CUT_STREAM,
)  # fmt: skip
CODINGS: Final = ("identity", "zstd", "gzip")
AGENT_TOOLS: Final = {
    "anthropic": [
        {"name": "Bash", "description": "Run a command", "input_schema": TOOL_SCHEMA},
        {"name": "Read", "description": "Read a file", "input_schema": TOOL_SCHEMA},
    ],
    "openai-chat": [
        {"type": "function", "function": {"name": n, "parameters": TOOL_SCHEMA}}
        for n in ("shell", "read_file")
    ],
}
_PATHS: Final = {"anthropic": "/v1/messages", "openai-chat": "/v1/chat/completions"}
_ENDS: Final = {"anthropic": b"message_stop", "openai-chat": b"[DONE]"}


@dataclass(frozen=True, slots=True)
class Targets:
    service: str  # base URLs
    relay: str
    backend: str
    key: str  # the tenant's toolref key


@dataclass
class Tally:
    """Requests by kind, bodies by encoding, errors by kind and what went wrong."""

    requests: Counter[str] = field(default_factory=Counter)
    bodies: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    late: int = 0  # actions started over a second late (every slot in flight)

    @property
    def total(self) -> int:
        return sum(self.requests.values())


class Failed(Exception):
    """A request that did not get the answer it should have."""


def compress(data: bytes, coding: str) -> bytes:
    if coding == "zstd":
        return zstandard.ZstdCompressor(level=3).compress(data)
    return gzip.compress(data, 6) if coding == "gzip" else data


@dataclass
class Conversation:
    """One conversation's turns, one at a time."""

    messages: list[dict[str, Any]]
    cuts: list[int]
    turn: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Conversations:
    """`width` conversations side by side, each replaced by a new one after its turns."""

    def __init__(self, salt: str, width: int, turns: int) -> None:
        self.salt, self.turns = salt, turns
        self._numbers = itertools.count()
        self._slots = [self._new() for _ in range(width)]
        self._next = itertools.cycle(range(width))

    def _new(self) -> Conversation:
        n = next(self._numbers)
        messages = synthetic(n, self.turns, f"{self.salt}-{n}")
        return Conversation(messages, cuts(messages))

    async def turn(self, send: Callable[[list[dict[str, Any]], int], Awaitable[None]]) -> None:
        """`send(history, turn)` the next turn of the next conversation (a turn that fails
        is not sent again: the conversation goes on)."""
        slot = next(self._next)
        while True:
            conversation = self._slots[slot]
            async with conversation.lock:
                if conversation.turn == len(conversation.cuts):
                    continue  # it ended while this waited: the slot holds a new one
                at = conversation.turn
                conversation.turn += 1
                if conversation.turn == len(conversation.cuts):
                    self._slots[slot] = self._new()
                await send(conversation.messages[: conversation.cuts[at]], at)
                return

    def peek(self) -> tuple[list[dict[str, Any]], int]:
        """The history the next conversation's next turn would send (not taken)."""
        conversation = self._slots[0]
        at = min(conversation.turn, len(conversation.cuts) - 1)
        return conversation.messages[: conversation.cuts[at]], at


class Traffic:
    """The clients and their state; `run` sends for `seconds`. `tally` counts as it goes."""

    def __init__(
        self, targets: Targets, salt: str, tally: Tally, width: int = 4, turns: int = 12
    ) -> None:
        self.targets, self.tally = targets, tally
        self.rng = random.Random(salt)
        # Registered in the last seconds, for reads (older ones may have expired: --ttl)
        self.refs: deque[str] = deque(maxlen=100)
        self.rest = Conversations(f"{salt}-rest", width, turns)
        self.sdk_conversations = Conversations(f"{salt}-sdk", width, turns)
        self.agent_conversations = Conversations(f"{salt}-agent", width, turns)
        self.item_conversations = ItemConversations(f"{salt}-items", width, turns)
        self._counts: Counter[str] = Counter()
        timeout = httpx.Timeout(60, connect=10)
        auth = {"Authorization": f"Bearer {targets.key}", "Toolref-Protocol": "2"}
        self.service = httpx.AsyncClient(base_url=targets.service, headers=auth, timeout=timeout)
        transport = toolref.AsyncTransport(httpx.AsyncHTTPTransport())
        self.sdk = httpx.AsyncClient(base_url=targets.backend, transport=transport, timeout=timeout)
        self.agent = httpx.AsyncClient(base_url=targets.relay, timeout=timeout)

    async def aclose(self) -> None:
        for client in (self.service, self.sdk, self.agent):
            await client.aclose()

    def _nth(self, what: str) -> int:
        self._counts[what] += 1
        return self._counts[what] - 1

    # --- the schedule ----------------------------------------------------------------------

    async def run(self, phases: Sequence[tuple[float, float]], in_flight: int) -> None:
        """Send for `seconds` at `rate` actions a second, for each phase in turn (no pause
        between them), at most `in_flight` actions at once."""
        loop = asyncio.get_running_loop()
        slots = asyncio.Semaphore(in_flight)
        tasks: set[asyncio.Task[None]] = set()
        n, due = 0, loop.time()
        for seconds, rate in phases:
            end = due + seconds
            while due < end:
                await asyncio.sleep(max(0.0, due - loop.time()))
                await slots.acquire()
                if loop.time() - due > 1.0:
                    self.tally.late += 1
                task = asyncio.create_task(self._action(SCHEDULE[n % len(SCHEDULE)]))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                task.add_done_callback(lambda _: slots.release())
                n, due = n + 1, due + 1 / rate
        await asyncio.gather(*tasks)

    async def _action(self, action: str) -> None:
        actions: dict[str, Callable[[], Awaitable[None]]] = {
            "register": self.register,
            "findMissing": self.find_missing,
            "resolve": self.resolve,
            "summary": self.summary,
            "optimize": lambda: self.rest.turn(self.optimize_hydrate),
            "middleware": lambda: self.sdk_conversations.turn(self.middleware_turn),
            "gateway": lambda: self.agent_conversations.turn(self.gateway_turn),
            RESPONSES: lambda: self.item_turn(RESPONSES),
            GEMINI: lambda: self.item_turn(GEMINI),
            CUT_REQUEST: self.cut_request,
            CUT_STREAM: self.cut_stream,
            EDIT_ATTACK: self.edit_attack,
        }
        try:
            await actions[action]()
        except Exception as exc:  # counted, shown and judged: the run goes on
            what = str(exc) if isinstance(exc, Failed) else f"{type(exc).__name__}: {exc}"
            self.tally.errors[f"{action}: {what[:160]}"] += 1

    # --- the registry's REST API -----------------------------------------------------------

    async def _rest(self, kind: str, path: str, value: Any) -> Any:
        """POST `value` as JSON or msgpack, identity, zstd or gzip in turn; the answer."""
        n = self._nth("rest")
        media = (JSON_TYPE, MSGPACK_TYPE)[n % 2]
        coding = CODINGS[(n // 2) % 3]
        raw = packb(value) if media == MSGPACK_TYPE else json.dumps(value).encode()
        headers = {"Content-Type": media, "Accept": media}
        if coding != "identity":
            headers["Content-Encoding"] = coding
        self.tally.bodies[f"{coding} ({media.split('/')[1]})"] += 1
        answer = await self.service.post(path, content=compress(raw, coding), headers=headers)
        self.tally.requests[f"{REST} {kind}"] += 1
        if answer.status_code != 200:
            raise Failed(f"HTTP {answer.status_code}: {answer.text[:120]}")
        return unpackb(answer.content) if media == MSGPACK_TYPE else answer.json()

    async def register(self) -> None:
        sizes = (400, 4000, 20000)
        items = [invocation(self.rng.choice(sizes)) for _ in range(5)]
        answer = await self._rest("register", "/v1/invocations", {"invocations": items})
        self.refs.extend(item["ref"] for item in answer["refs"])

    def _some(self, count: int) -> list[str]:
        return self.rng.sample(list(self.refs), min(count, len(self.refs)))

    async def find_missing(self) -> None:
        if self.refs:
            path = "/v1/invocations:findMissing"
            await self._rest("findMissing", path, {"refs": self._some(50)})

    async def resolve(self) -> None:
        if self.refs:
            await self._rest("resolve", "/v1/invocations:resolve", {"refs": self._some(20)})

    async def summary(self) -> None:
        if self.refs:
            ref = self.refs[-1 - self.rng.randrange(min(10, len(self.refs)))]  # a recent one
            answer = await self.service.get(f"/v1/invocations/{ref}/summary")
            self.tally.requests[f"{REST} summary"] += 1
            if answer.status_code != 200:
                raise Failed(f"HTTP {answer.status_code}: {answer.text[:120]}")

    async def optimize_hydrate(self, history: list[dict[str, Any]], turn: int) -> None:
        """A chat backend's turn on the REST API: optimize the conversation, hydrate it."""
        optimized = await self._rest("optimize", "/v1/messages:optimize", {"messages": history})
        hydrated = await self._rest(
            "hydrate", "/v1/messages:hydrate", {"messages": optimized["messages"]}
        )
        if len(hydrated["messages"]) != len(history):
            raise Failed(f"hydrate answered {len(hydrated['messages'])} of {len(history)}")

    # --- the middleware and the gateway ---------------------------------------------------

    async def middleware_turn(self, history: list[dict[str, Any]], turn: int) -> None:
        """A client app's turn through the SDK's transport to the backend (an edit once the
        backend says it reads them), streamed every other turn."""
        stream = turn % 2 == 1
        raw = json.dumps({"model": "scripted-1", "messages": history, "stream": stream}).encode()
        end = _ENDS["openai-chat"] if stream else None
        path = "/v1/chat/completions"
        await self._read_whole(self.sdk, MIDDLEWARE, path, content=raw, headers={}, end=end)

    def _agent_body(self, history: list[dict[str, Any]], turn: int) -> tuple[str, bytes]:
        api = ("anthropic", "openai-chat")[self._nth("agent") % 2]
        body: dict[str, Any] = {"model": "soak-1", "stream": turn % 2 == 0}
        if api == "anthropic":
            body["system"], body["messages"] = anthropic(history)
            body["max_tokens"] = 1024
        else:
            body["messages"] = history
        body["tools"] = AGENT_TOOLS[api]
        return api, json.dumps(body).encode()

    async def gateway_turn(self, history: list[dict[str, Any]], turn: int) -> None:
        """An agent's turn to the relay, which sends it through the gateway to the fake."""
        api, raw = self._agent_body(history, turn)
        coding = CODINGS[self._nth("agent body") % 3]
        headers = {"Content-Type": JSON_TYPE, "x-api-key": "provider-key"}
        if coding != "identity":
            headers["Content-Encoding"] = coding
        self.tally.bodies[f"{coding} (agent)"] += 1
        path = f"/llm/fake{_PATHS[api]}"
        content = compress(raw, coding)
        end = _ENDS[api] if json.loads(raw)["stream"] else None
        await self._read_whole(self.agent, GATEWAY, path, content=content, headers=headers, end=end)

    async def item_turn(self, api: str) -> None:
        """A Responses or Gemini agent's turn to the relay (streamed; its body identity,
        zstd or gzip), the answer read and written back (`soak_items`)."""
        at, conversation = self.item_conversations.slot(api)
        async with conversation.lock:
            ok = False
            try:
                raw = conversation.body()
                coding = CODINGS[self._nth("item body") % 3]
                headers = {"Content-Type": JSON_TYPE, **HEADERS[api]}
                if coding != "identity":
                    headers["Content-Encoding"] = coding
                self.tally.bodies[f"{coding} (agent)"] += 1
                content = compress(raw, coding)
                async with self.agent.stream(
                    "POST", PATHS[api], content=content, headers=headers
                ) as answer:
                    data = b"".join([chunk async for chunk in answer.aiter_bytes()])
                self.tally.requests[f"{GATEWAY} {api} stream"] += 1
                if answer.status_code != 200:
                    raise Failed(f"HTTP {answer.status_code}: {data[:120]!r}")
                if conversation.turn:  # the first turn has no answer before it
                    self.item_conversations.saved(api, answer.headers.get(SAVINGS))
                conversation.answered(sse_events(data))
                ok = True
            finally:
                self.item_conversations.finished(api, at, conversation, ok)

    async def _read_whole(
        self,
        client: httpx.AsyncClient,
        kind: str,
        path: str,
        *,
        content: bytes,
        headers: dict[str, str],
        end: bytes | None,
    ) -> None:
        """POST and read the answer to its end; a stream (`end` given) must end with `end`."""
        headers = {"Content-Type": JSON_TYPE, **headers}
        async with client.stream("POST", path, content=content, headers=headers) as answer:
            data = b"".join([chunk async for chunk in answer.aiter_bytes()])
        self.tally.requests[f"{kind}{' stream' if end else ''}"] += 1
        if answer.status_code != 200:
            raise Failed(f"HTTP {answer.status_code}: {data[:120]!r}")
        if end is not None and end not in data[-200:]:
            raise Failed(f"the stream ended without {end.decode()}: {data[-120:]!r}")

    # --- edits that would amplify ---------------------------------------------------------

    async def edit_attack(self) -> None:
        """One of `EDIT_ATTACKS`, in turn, to the service's gateway: refused at once with the
        status it must have, else `Failed`."""
        kind = EDIT_ATTACKS[self._nth(EDIT_ATTACK) % len(EDIT_ATTACKS)]
        segments = [b"", b'{"pad":"', *[b"x"] * 2000, b'"}']
        base = recipe_ref([entry_of(s) for s in segments])
        headers = {"Content-Type": EDIT_TYPE, "Toolref-Key": self.targets.key}
        path = "/llm/fake/v1/messages"
        if kind == "amplify":  # its base held first (kept whatever the provider says)
            first = encode(None, [Inline(s) for s in segments], b"")
            held = await self.service.post(path, content=first, headers=headers)
            if held.status_code >= 500:
                raise Failed(f"{kind}: the base answered HTTP {held.status_code}")
            body, status = encode(base, [Keep(0, len(segments))] * 500, None), 413
        elif kind == "empty segments":
            body, status = encode(None, [Inline(b"")] * 1000, None), 400
        elif kind == "nested header":
            body, status = b'{"v":1,"o":' + b"[" * 5000 + b"]" * 5000 + b"}\n", 400
        else:
            body, status = b'{"v":1,"b":null,"o":[],"n":0}\n', 400
        answer = await self.service.post(path, content=body, headers=headers)
        self.tally.requests[f"{EDIT_ATTACK} ({kind})"] += 1
        if answer.status_code != status:
            raise Failed(f"{kind}: HTTP {answer.status_code}, not {status}: {answer.text[:120]}")

    # --- clients that go away -------------------------------------------------------------

    async def cut_request(self) -> None:
        """A body cut off half way, the connection then reset: to the service (a register),
        the relay (an agent's turn) or the backend (a protocol-2 body), zstd, in turn."""
        where = (REST, GATEWAY, MIDDLEWARE)[self._nth(CUT_REQUEST) % 3]
        history, turn = self.agent_conversations.peek()
        if where == REST:
            items = [invocation(20000) for _ in range(3)]
            url, path = self.targets.service, "/v1/invocations"
            raw = json.dumps({"invocations": items}).encode()
            headers = {"Authorization": f"Bearer {self.targets.key}", "Toolref-Protocol": "2"}
        elif where == GATEWAY:
            url, (api, raw) = self.targets.relay, self._agent_body(history, turn)
            path, headers = f"/llm/fake{_PATHS[api]}", {"x-api-key": "provider-key"}
        else:
            url, path = self.targets.backend, "/v1/chat/completions"
            raw = json.dumps({"model": "scripted-1", "messages": history}).encode()
            headers = {"Toolref-Protocol": "2"}
        body = compress(raw, "zstd")
        parts = urlsplit(url)
        head = [f"POST {path} HTTP/1.1", f"Host: {parts.netloc}", f"Content-Type: {JSON_TYPE}"]
        head += ["Content-Encoding: zstd", f"Content-Length: {len(body)}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        _, writer = await asyncio.open_connection(parts.hostname, parts.port)
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body[: len(body) // 2])
        await writer.drain()
        await asyncio.sleep(0.05)  # the server has begun on the body
        writer.transport.abort()  # a reset, as a killed client's kernel sends
        self.tally.requests[f"{CUT_REQUEST} ({where})"] += 1

    async def cut_stream(self) -> None:
        """A streamed answer read to its first bytes, then the connection dropped: from the
        relay (the gateway's stream) and from the backend (through the SDK), in turn."""
        n = self._nth(CUT_STREAM)
        where = (GATEWAY, MIDDLEWARE)[n % 2]
        if where == GATEWAY and n // 2 % 2 == 1:  # a Responses or Gemini stream
            api = ITEM_APIS[n // 4 % 2]
            raw, path = self.item_conversations.peek(api), PATHS[api]
            client, headers = self.agent, {"Content-Type": JSON_TYPE, **HEADERS[api]}
        elif where == GATEWAY:
            history, _ = self.agent_conversations.peek()
            api, raw = self._agent_body(history, 0)  # turn 0: streamed
            client, path = self.agent, f"/llm/fake{_PATHS[api]}"
            headers = {"Content-Type": JSON_TYPE, "x-api-key": "provider-key"}
        else:
            history, _ = self.sdk_conversations.peek()
            raw = json.dumps({"model": "scripted-1", "messages": history, "stream": True}).encode()
            client, path, headers = self.sdk, "/v1/chat/completions", {"Content-Type": JSON_TYPE}
        async with client.stream("POST", path, content=raw, headers=headers) as answer:
            if answer.status_code != 200:
                self.tally.requests[f"{CUT_STREAM} ({where})"] += 1
                raise Failed(f"HTTP {answer.status_code} before the stream")
            async for _ in answer.aiter_raw():
                break  # the first bytes: then away (leaving the block closes the connection)
        self.tally.requests[f"{CUT_STREAM} ({where})"] += 1
