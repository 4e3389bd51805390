"""The gateway applying edits (`application/vnd.toolref.edit`, issue 30): any worker or
replica serves any turn, the upstream receives exactly the agent's request, and a miss is
answered with exactly what the registry lacks, storing nothing.

Over real sockets: the service (on the test engine) and an upstream that records the raw
header lines and body bytes it receives (a provider: outside the machine, so a fake). The
edits are made with the pure core (`tests/integration/edit_client.py`).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.conftest import need, snapshot
from tests.support.servers import serve_all
from tests.unit.edits.test_edits import EDITS, conversation, edited
from toolref.edits import wire
from toolref.edits.edit import Inline, Keep, Named, Op
from toolref.edits.recipe import PIECE_MIN, entry_of, piece_of, piece_ref
from toolref.edits.wire import VERSION as EDITS_VERSION
from toolref.wire.headers import HISTORY_HEADER, SAVINGS_HEADER
from toolref_server.app import create_app
from toolref_server.settings import LOCAL_TENANT, Settings
from toolref_server.storage import keys
from toolref_server.storage.recipe_nodes import Delta, decode_node

from .edit_client import AGENT_HEADERS, EditClient, encoded

pytestmark = pytest.mark.engine

PATH = "/llm/up/v1/messages"


@dataclass
class Upstream:
    """Records each request's raw header lines and body; answers a small stream."""

    seen: list[tuple[list[tuple[bytes, bytes]], bytes]] = field(default_factory=list)

    def app(self) -> Starlette:
        async def record(request: Request) -> Response:
            body = await request.body()
            self.seen.append((list(request.headers.raw), body))

            async def events() -> AsyncIterator[bytes]:
                yield b"event: message_start\ndata: {}\n\n"
                yield b"event: message_stop\ndata: {}\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")

        return Starlette(routes=[Route("/{path:path}", record, methods=["POST"])])


@dataclass
class Stack:
    gateways: list[str]
    upstream: Upstream
    upstream_url: str


async def stack_of(redis: Redis, count: int, **options: Any) -> AsyncIterator[Stack]:
    upstream = Upstream()
    async with serve_all(upstream.app()) as [upstream_url]:
        config = Settings(redis_url="unused", upstreams=f"up={upstream_url}", **options)
        apps = [create_app(config, redis=redis) for _ in range(count)]
        async with serve_all(*apps) as urls:
            yield Stack(urls, upstream, upstream_url)


@pytest.fixture
async def one(redis: Redis) -> AsyncIterator[Stack]:
    async for stack in stack_of(redis, 1):
        yield stack


@pytest.fixture
async def two(redis: Redis) -> AsyncIterator[Stack]:
    """Two replicas of the service on one engine."""
    async for stack in stack_of(redis, 2):
        yield stack


def body_of(messages: list[Any]) -> bytes:
    return json.dumps(
        {"model": "claude", "max_tokens": 1024, "tools": ["t" * 300], "messages": messages}
    ).encode()


def expected_headers(upstream_url: str, body: bytes) -> list[tuple[bytes, bytes]]:
    """What the upstream must receive: its Host, the agent's headers as they were (names
    lowercased, as HTTP/1.1 servers hand them over), the body's length."""
    host = upstream_url.removeprefix("http://").encode()
    agent = [(k.lower().encode(), v.encode()) for k, v in AGENT_HEADERS]
    return [(b"host", host), *agent, (b"content-length", str(len(body)).encode())]


def assert_exact(stack: Stack, body: bytes) -> None:
    headers, received = stack.upstream.seen[-1]
    assert received == body
    assert headers == expected_headers(stack.upstream_url, body)


async def client(url: str) -> EditClient:
    return EditClient(httpx.AsyncClient(base_url=url, timeout=30), PATH)


async def test_a_conversation_of_edits_reaches_the_upstream_byte_for_byte(one: Stack) -> None:
    """Every turn an edit of the last: the upstream gets the agent's headers and body
    exactly, the answer streams back with the recipe's ref and what was saved."""
    sender = await client(one.gateways[0])
    rng = random.Random(7)
    messages = conversation(12, 7)
    for how in [
        "append",
        "edit-middle",
        "mark",
        "delete-middle",
        "insert-middle",
        "append",
        "compact",
        "append",
        "same",
        "append",
    ]:
        messages = edited(messages, how, rng)
        body = body_of(messages)
        answer = await sender.send(body)
        assert answer.status_code == 200, answer.text
        assert (
            answer.content == b"event: message_start\ndata: {}\n\nevent: message_stop\ndata: {}\n\n"
        )
        assert answer.headers[HISTORY_HEADER] == sender.cut(body).ref
        raw, wire_bytes = (
            int(p.split("=")[1]) for p in answer.headers[SAVINGS_HEADER].split(", ")[:2]
        )
        assert (raw, wire_bytes) == (len(body), len(sender.sent[-1]))
        assert_exact(one, body)
    assert len(sender.answers) == 10  # no resend
    assert len(sender.sent[-1]) < len(body) / 5


async def test_with_no_cache_every_turn_reads_the_store_and_is_exact(redis: Redis) -> None:
    """TOOLREF_EDIT_CACHE_BYTES=0: nothing held in memory, the same bytes upstream."""
    async for stack in stack_of(redis, 1, edit_cache_bytes=0):
        sender = await client(stack.gateways[0])
        rng = random.Random(3)
        messages = conversation(9, 3)
        for how in ["append", "edit-middle", "mark", "append", "compact", "append"]:
            messages = edited(messages, how, rng)
            answer = await sender.send(body_of(messages))
            assert answer.status_code == 200, answer.text
            assert_exact(stack, body_of(messages))
        assert len(sender.answers) == 6


async def test_each_turn_ends_once_its_recipe_is_in_the_store(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recipe is kept while the upstream answers (it does not hold the request up), and
    the answer's end waits for it: the moment a turn's answer is whole, its recipe is in the
    store, even when the store writes slower than the upstream answers."""
    from toolref_server.storage import recipes as stored

    keep = stored.Recipes.keep

    async def slow_keep(self: stored.Recipes, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.05)  # the store slower than the upstream
        return await keep(self, *args, **kwargs)

    monkeypatch.setattr(stored.Recipes, "keep", slow_keep)
    async for stack in stack_of(redis, 1, edit_cache_bytes=0):
        sender = await client(stack.gateways[0])
        messages = conversation(6, 5)
        for _ in range(4):
            messages = edited(messages, "append", random.Random(1))
            answer = await sender.send(body_of(messages))
            assert answer.status_code == 200, answer.text
            kept = keys.recipe_node(LOCAL_TENANT, answer.headers[HISTORY_HEADER])
            assert await redis.exists(kept)
        assert len(sender.answers) == 4  # every turn found its base: no resend


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    turns=st.integers(1, 20),
    seed=st.integers(0, 10**6),
    hows=st.lists(EDITS, min_size=1, max_size=5),
    replica=st.lists(st.integers(0, 1), min_size=6, max_size=6),
)
async def test_any_edit_pattern_on_any_replica_is_exact(
    two: Stack, turns: int, seed: int, hows: list[str], replica: list[int]
) -> None:
    rng = random.Random(seed)
    senders = [await client(url) for url in two.gateways]
    messages = conversation(turns, seed)
    last = None
    for n, how in enumerate(["append", *hows]):
        messages = edited(messages, how, rng)
        body = body_of(messages)
        sender = senders[replica[n]]
        sender.last, sender.held = last, senders[1 - replica[n]].held | sender.held
        before = len(sender.answers)
        answer = await sender.send(body)
        assert answer.status_code == 200, answer.text
        assert len(sender.answers) == before + 1  # the other replica's base was there
        assert_exact(two, body)
        last = sender.last


async def test_two_replicas_serve_alternate_turns_with_bounded_reads(
    two: Stack, redis: Redis
) -> None:
    """Alternate turns on two replicas: no resend, and each turn reads the store at most
    three times (GET the base's node, then MGETs of what this replica lacks of it: its
    chunks when it is a snapshot, the pieces the other replica wrote), at turn 40 as at
    turn 4."""
    senders = [await client(url) for url in two.gateways]
    messages: list[Any] = []
    reads = []
    for turn in range(40):
        messages = [
            *messages,
            {"role": "user", "content": f"q{turn} " + "x" * 200},
            {"role": "assistant", "content": f"a{turn} " + "y" * 100},
        ]
        sender = senders[turn % 2]
        sender.last = senders[1 - turn % 2].last or sender.last
        before = await _reads(redis)
        answer = await sender.send(body_of(messages))
        reads.append(await _reads(redis) - before)
        assert answer.status_code == 200, answer.text
        assert_exact(two, body_of(messages))
    assert sum(len(s.answers) for s in senders) == 40  # 0 extra round trips
    assert max(reads[1:]) <= 3, reads
    assert reads[-1] <= reads[3]


async def _reads(redis: Redis) -> int:
    stats = await redis.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("get", "mget"))


async def refused(
    stack: Stack,
    redis: Redis,
    data: bytes,
    secrets: list[tuple[str, str]],
    extra: Sequence[tuple[str, str]] = (),
) -> httpx.Response:
    before = await snapshot(redis)
    async with httpx.AsyncClient(base_url=stack.gateways[0]) as http:
        answer = await http.post(
            PATH, content=data, headers=[("content-type", wire.MEDIA_TYPE), *secrets, *extra]
        )
    assert await snapshot(redis) == before, f"a refusal changed what is stored: {answer.text}"
    assert answer.headers["content-type"] == "application/problem+json"
    return answer


async def test_refusals_say_what_and_store_nothing(one: Stack, redis: Redis) -> None:
    sender = await client(one.gateways[0])
    first = body_of(conversation(6, 1))
    assert (await sender.send(first)).status_code == 200
    base = sender.last
    assert base is not None
    secrets = base.secrets
    second = sender.cut(body_of([*conversation(6, 1), {"role": "user", "content": "z" * 500}]))

    # A base never kept.
    other = sender.cut(body_of(conversation(3, 99)))
    data, _ = encoded(other, second, set())
    answer = await refused(one, redis, data, secrets)
    assert (answer.status_code, answer.json()["missingHistory"]) == (409, other.ref)

    # Pieces named and never kept: every one listed at once, in order.
    strangers = [b"s" * PIECE_MIN + bytes([i]) for i in range(3)]
    ops: list[Op] = [Keep(0, len(base.entries))]
    ops += [Named(piece_of(entry_of(s))) for s in strangers]
    answer = await refused(one, redis, wire.encode(base.ref, ops, b""), secrets)
    assert answer.status_code == 409
    assert answer.json()["missingPieces"] == [piece_ref(piece_of(entry_of(s))) for s in strangers]

    # Inline bytes compressed against another dictionary.
    words = b"a dictionary that is not the base's segments, 0123456789 " * 40
    ops = [Keep(0, len(base.entries)), Inline(words[:600])]
    data = wire.encode(base.ref, ops, words)
    answer = await refused(one, redis, data, secrets)
    assert (answer.status_code, answer.json()["type"].rsplit(":", 1)[-1]) == (
        400,
        "dictionary-mismatch",
    )

    # A range outside the base.
    data = wire.encode(base.ref, [Keep(0, len(base.entries) + 5)], None)
    answer = await refused(one, redis, data, secrets)
    assert answer.status_code == 400
    assert "toolref.edits.edit.diff" in answer.json()["detail"]

    # A credential the headers segment names, not sent.
    data, _ = encoded(base, second, sender.held)
    answer = await refused(one, redis, data, [])
    assert answer.status_code == 400
    assert "credential" in answer.json()["detail"]

    # Not an edit at all.
    answer = await refused(one, redis, b"{}", secrets)
    assert (answer.status_code, answer.json()["type"].rsplit(":", 1)[-1]) == (400, "malformed-body")
    assert one.upstream.seen[-1][1] == first  # nothing refused was forwarded


async def test_a_body_past_the_inflated_limit_is_413_and_stores_nothing(
    redis: Redis,
) -> None:
    async for stack in stack_of(redis, 1, max_decompressed_bytes=4096):
        sender = await client(stack.gateways[0])
        first = body_of(conversation(4, 2))
        assert (await sender.send(first)).status_code == 200
        base = sender.last
        assert base is not None
        # Each edit carries little; what it stands for is past the limit.
        ops = [Keep(0, len(base.entries))] * 12
        answer = await refused(stack, redis, wire.encode(base.ref, ops, None), base.secrets)
        assert answer.status_code == 413


async def test_a_base_gone_is_missing_history_and_the_client_recovers(
    two: Stack, redis: Redis
) -> None:
    """The registry flushed mid-conversation: the replica that did not serve the last turn
    answers 409 missing-history; without a base the named pieces are missing, every one
    listed; sent inline the turn goes through, exactly. The replica that served the last
    turn serves from its memory, exactly."""
    first, second = await client(two.gateways[0]), await client(two.gateways[1])
    large = [{"role": "user", "content": f"{n} " + "p" * PIECE_MIN} for n in range(2)]
    messages = [*large, *conversation(10, 3)]  # two pieces, and literals
    assert (await first.send(body_of(messages))).status_code == 200
    await redis.flushall()
    messages = edited(messages, "append", random.Random(0))
    second.last, second.held = first.last, set(first.held)
    answer = await second.send(body_of(messages))
    assert answer.status_code == 200
    slugs = [a.json()["type"].rsplit(":", 1)[-1] for a in second.answers[:-1]]
    assert slugs == ["missing-history", "missing-pieces"]
    assert set(second.answers[1].json()["missingPieces"]) == {piece_ref(p) for p in first.held} & {
        piece_ref(piece_of(e)) for e in second.cut(body_of(messages)).entries if e[:1] == b"\0"
    }
    assert_exact(two, body_of(messages))
    await redis.flushall()
    messages = edited(messages, "append", random.Random(1))
    answer = await second.send(body_of(messages))
    assert answer.status_code == 200
    assert len(second.answers) == 4
    assert_exact(two, body_of(messages))


async def nodes(redis: Redis, refs: list[str]) -> list[bytes]:
    found: list[bytes] = []
    for ref in refs:
        value = await redis.get(keys.recipe_node(LOCAL_TENANT, ref))
        assert isinstance(value, bytes)
        found.append(value)
    return found


async def test_a_snapshot_every_n_edits_and_nodes_of_the_edit_size(
    one: Stack, redis: Redis
) -> None:
    """TOOLREF_EDIT_SNAPSHOT_EVERY=8 (the default): turns 0, 8, 16, ... write a snapshot
    (the slices of chunks it is made of); the others write their own edit and the ids of
    the deltas before it, so a node at turn 100 is no larger than the node at the same
    depth at turn 10, for edits of the same size (but the width of its ranges' integers, and
    how their literals compress against the base)."""
    sender = await client(one.gateways[0])
    messages: list[Any] = []
    refs = []
    for turn in range(104):
        messages = [
            *messages,
            {"role": "user", "content": f"q{turn:04} " + "x" * 200},
            {"role": "assistant", "content": f"a{turn:04} " + "y" * 100},
        ]
        assert (await sender.send(body_of(messages))).status_code == 200
        assert sender.last is not None
        refs.append(sender.last.ref)
    values = await nodes(redis, refs[-8:] + refs[8:16])
    decoded = [decode_node(v) for v in values]
    assert [n.depth if isinstance(n, Delta) else 0 for n in decoded if n] == [*range(8)] * 2
    late, early = values[:8], values[8:]
    print(
        "node bytes by depth, turns 8-15:",
        [len(v) for v in early],
        "turns 96-103:",
        [len(v) for v in late],
    )
    for at in range(1, 8):  # literals compressed against the base: a few bytes either way
        assert len(late[at]) <= len(early[at]) + 16, (at, len(late[at]), len(early[at]))
    assert len(late[0]) < 512  # a snapshot of 104 turns: a slice per chunk (one per 8 turns)
    assert len(late[7]) < 40 * 8  # its edit (one message pair), the ids of 6 deltas


async def test_redis_bytes_of_a_long_trace_are_at_most_half_its_json(
    one: Stack, redis: Redis
) -> None:
    """Issue 30's target, measured as `loadtests.edit_sizing` measures it: right after the
    last turn of the longest shared trace (165 turns), replayed one request per assistant
    turn as a client sends it (`loadtests.bandwidth.turns_of`), every superseded node
    still held, the tenant's keys (MEMORY USAGE) per byte of the last request's body: at
    most 0.5. The first layout (a key per piece, snapshots listing every entry, deltas
    every edit since) held 1.0 per byte here; each literal is now stored once, in the
    node of the turn that brought it, compressed beside its group's (docs/edits.md, Storage)."""
    from loadtests.bandwidth import turns_of
    from loadtests.traces import TRACES, Trace

    trace = TRACES / "SWE-agent_mini-swe-agent__django__django-13964.openai-chat.json"
    if not trace.exists():
        need(f"no shared trace at {trace}")
    _, messages, cuts = turns_of(Trace("django", json.loads(trace.read_text())["messages"]))
    sender = await client(one.gateways[0])
    sender.path = "/llm/up/v1/chat/completions"
    body = b""
    for at in cuts:
        body = json.dumps({"model": "m", "messages": messages[:at]}).encode()
        assert (await sender.send(body)).status_code == 200
    held, kinds = 0, Counter[str]()
    async for key in redis.scan_iter(match=keys.scan_pattern(LOCAL_TENANT)):
        size = int(await redis.memory_usage(key, samples=0) or 0)
        held += size
        kinds[key.split(b":")[2].decode()] += size
    ratio = held / len(body)
    print(f"redis bytes {held} {dict(kinds)} for {len(body)} raw bytes: {ratio:.3f}")
    assert len(sender.answers) == len(cuts)
    assert kinds["k"] < held / 10  # chunks: a slice list each, the literals in the nodes
    assert ratio <= 0.5


async def test_a_sender_that_offers_edits_is_told_the_gateway_reads_them(one: Stack) -> None:
    """Negotiation (issue 38): an LLM request sent as it is with `Toolref-Edits: 2` is
    forwarded as it is (the offer stays home) and answered `Toolref-Edits: 2`; an edit's
    answer says it too; a request without the offer is not told."""
    body = body_of(conversation(2, 5))
    async with httpx.AsyncClient(base_url=one.gateways[0]) as http:
        plain = await http.post(PATH, content=body, headers={"content-type": "application/json"})
        offered = await http.post(
            PATH, content=body, headers={"content-type": "application/json", "Toolref-Edits": "2"}
        )
    assert "toolref-edits" not in plain.headers
    assert offered.headers["toolref-edits"] == str(EDITS_VERSION)
    headers, received = one.upstream.seen[-1]
    assert received == body
    assert not any(name.lower().startswith(b"toolref-") for name, _ in headers)
    sender = await client(one.gateways[0])
    answer = await sender.send(body)
    assert answer.headers["toolref-edits"] == str(EDITS_VERSION)
