"""Agents that hang up, and turns of one conversation in flight at once, through the relay
(over its channel) to the service's real gateway on the test engine; a provider behind
that streams each answer and can hold it before its head or after its first event (the
only fake: what is outside the machine).

Whenever the agent hangs up (its body half sent, the edit sent and no head back, mid-answer,
at the answer's end), the conversation's next turn reaches the provider byte for byte with
at most one resend, and nothing stays held: the relay's budget of bodies in flight, its
channel's streams, the client's lock, the tasks it started, the gateway's writes under way.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.support.fake_provider import wire
from tests.support.servers import serve, serve_all
from tests.unit.edits.agents import HEADERS
from toolref.sending.channel_transport import ChannelTransport
from toolref_relay import Relay, RelayConfig
from toolref_server.app import create_app
from toolref_server.gateway.gateway import Gateway
from toolref_server.settings import Settings

pytestmark = pytest.mark.engine

KEY = "tenant-key-of-the-hang-up-tests"
MODEL = "scripted-1"
URL = "/llm/anthropic/v1/messages"
_GUARD = 30.0  # seconds: a failure guard only (a stalled turn would never end)
_SLUGS = ("applied", "missing-history", "missing-pieces", "dictionary-mismatch")


@dataclass
class Provider:
    """Streams a text answer for each request, recording its body. A request whose last
    message says `hold-head:NAME` waits for `release(NAME)` before its head; one saying
    `hold-middle:NAME` sends its first event, then waits (`die-middle:NAME`: then breaks
    off). `reached(NAME)`: that request
    arrived (and, held mid-answer, its first event went)."""

    seen: list[bytes] = field(default_factory=list)
    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    arrived: dict[str, asyncio.Event] = field(default_factory=dict)
    streamed: dict[int, bytes] = field(default_factory=dict)  # by turn: the answer's bytes

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/{path:path}", self._answer, methods=["POST"])])

    def _gate(self, name: str) -> asyncio.Event:
        return self.gates.setdefault(name, asyncio.Event())

    def reached(self, name: str) -> asyncio.Event:
        return self.arrived.setdefault(name, asyncio.Event())

    def release(self, name: str) -> None:
        self._gate(name).set()

    async def _answer(self, request: Request) -> Response:
        body = await request.body()
        self.seen.append(body)
        turn = len(self.seen) - 1
        last = json.loads(body)["messages"][-1]["content"]
        how, _, name = last.partition(":") if isinstance(last, str) else ("", "", "")
        name = name.split()[0] if name else ""
        frames = wire.frames("messages", wire.Reply(text=f"answer {turn} " * 30), MODEL, 9, False)
        self.streamed[turn] = b"".join(frames)
        if how == "hold-head":
            self.reached(name).set()
            await self._gate(name).wait()

        async def events() -> AsyncIterator[bytes]:
            for n, frame in enumerate(frames):
                yield frame
                if n == 0 and how in ("hold-middle", "die-middle"):
                    self.reached(name).set()
                    await self._gate(name).wait()
                if n == 0 and how == "die-middle":
                    raise RuntimeError("the provider died mid-stream (on purpose)")

        return StreamingResponse(events(), media_type="text/event-stream")


@dataclass
class Stack:
    relay_url: str
    relay: Relay
    gateway: Any  # the service's app
    provider: Provider

    @property
    def channel(self) -> ChannelTransport:
        assert isinstance(self.relay.pool, ChannelTransport)
        return self.relay.pool

    def streams(self) -> int:
        if not isinstance(self.relay.pool, ChannelTransport):
            return 0
        link = self.channel._link
        return 0 if link is None else len(link.streams)

    def slugs(self) -> dict[str, float]:
        edits = self.gateway.state.services.metrics.edits
        return {slug: float(edits.labels(slug)._value.get()) for slug in _SLUGS}

    def under_way(self) -> int:
        return len(self.gateway.state.services.recipes.under_way._all)

    def gateway_held(self) -> tuple[int, int]:
        """The gateway's body bytes in flight and its requests admitted."""
        layer = self.gateway.middleware_stack
        while layer is not None and not isinstance(layer, Gateway):
            layer = getattr(layer, "app", None)
        assert layer is not None
        return (
            self.gateway.state.services.metrics._budget.in_flight,
            layer.admission.in_flight.total,
        )


@asynccontextmanager
async def relayed(redis: Redis, *, channel: bool = True, **settings: Any) -> AsyncIterator[Stack]:
    provider = Provider()
    async with serve_all(provider.app()) as [provider_url]:
        tenant = f"t={hashlib.sha256(KEY.encode()).hexdigest()}"
        config = Settings(
            redis_url="unused", upstreams=f"anthropic={provider_url}", api_keys=tenant, **settings
        )
        app = create_app(config, redis=redis)
        async with serve_all(app) as [url]:
            relay = Relay(RelayConfig(url, key=KEY, channel=channel), report=lambda _: None)
            async with serve(relay) as relay_url:
                yield Stack(relay_url, relay, app, provider)


class Conversation:
    """An agent's conversation: each turn the one before, its answer and a new message."""

    def __init__(self, seed: int) -> None:
        self.messages: list[dict[str, Any]] = [
            {"role": "user", "content": f"conversation {seed}: build it. " + "word " * 400}
        ]
        self.seed = seed

    def body(self, last: str | None = None) -> bytes:
        messages = self.messages if last is None else [*self.messages, user(last)]
        value = {"model": MODEL, "max_tokens": 512, "stream": True, "messages": messages}
        return json.dumps(value).encode()

    def step(self, n: int) -> None:
        self.messages += [
            {"role": "assistant", "content": f"answer {self.seed}.{n} " * 30},
            user(f"result {self.seed}.{n}: " + "line of output\n" * 60),
        ]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


async def turn(agent: httpx.AsyncClient, stack: Stack, body: bytes) -> bytes:
    """One turn, its answer read whole (200 or the test fails)."""
    answer = await agent.post(stack.relay_url + URL, content=body, headers=HEADERS)
    assert answer.status_code == 200, answer.text
    return answer.content


async def until(done: Callable[[], object]) -> None:
    """Until `done()` is true (the state of objects with no event to wait on), or the guard
    fails the test."""
    async with asyncio.timeout(_GUARD):
        while not done():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


def held(stack: Stack) -> dict[str, int]:
    """What the relay and the gateway hold of turns: the relay's body bytes in flight, its
    channel's streams, its clients' locks taken; the gateway's store writes under way, its
    body bytes in flight and requests admitted."""
    clients = stack.relay.clients._clients
    return {
        "in flight": stack.relay.budget.in_flight,
        "streams": stack.streams(),
        "locks": sum(clients[k].lock.locked() for k in clients),
        "under way": stack.under_way(),
        "gateway in flight": stack.gateway_held()[0],
        "gateway requests": stack.gateway_held()[1],
    }


async def settled(stack: Stack) -> None:
    """Until the relay and the gateway hold nothing of a turn (or the guard fails it)."""
    try:
        await until(lambda: not any(held(stack).values()))
    except TimeoutError:
        raise AssertionError(f"a turn's state is still held: {held(stack)}") from None


def assert_nothing_held(stack: Stack) -> None:
    assert not any(held(stack).values()), held(stack)


async def hang_up_uploading(stack: Stack, body: bytes) -> None:
    """The agent sends its head and half its body, then closes the connection."""
    host, port = stack.relay_url.removeprefix("http://").split(":")
    _, writer = await asyncio.open_connection(host, int(port))
    head = f"POST {URL} HTTP/1.1\r\nhost: {host}:{port}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in HEADERS)
    head += f"content-length: {len(body)}\r\n\r\n"
    writer.write(head.encode() + body[: len(body) // 2])
    await writer.drain()
    await asyncio.sleep(0.05)  # the relay reads what came
    writer.close()
    await writer.wait_closed()


async def hang_up_before_head(stack: Stack, body: bytes, name: str) -> None:
    """The agent's turn reached the provider, which holds its head; the agent leaves."""
    async with httpx.AsyncClient(timeout=_GUARD) as agent:
        task = asyncio.create_task(turn(agent, stack, body))
        async with asyncio.timeout(_GUARD):
            await stack.provider.reached(name).wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    stack.provider.release(name)


async def hang_up_mid_answer(stack: Stack, body: bytes, name: str) -> None:
    """The agent reads the answer's first event, then leaves while the rest is held."""
    async with httpx.AsyncClient(timeout=_GUARD) as agent:
        request = agent.build_request("POST", stack.relay_url + URL, content=body, headers=HEADERS)
        response = await agent.send(request, stream=True)
        assert response.status_code == 200
        async with asyncio.timeout(_GUARD):
            async for _ in response.aiter_raw():
                break
            await stack.provider.reached(name).wait()
        await response.aclose()
    stack.provider.release(name)


async def hang_up_at_the_end(stack: Stack, body: bytes) -> None:
    """The agent reads the answer up to its end event, then closes at once."""
    async with httpx.AsyncClient(timeout=_GUARD) as agent:
        request = agent.build_request("POST", stack.relay_url + URL, content=body, headers=HEADERS)
        response = await agent.send(request, stream=True)
        got = b""
        async with asyncio.timeout(_GUARD):
            async for piece in response.aiter_raw():
                got += piece
                if b"message_stop" in got:
                    break
        await response.aclose()


HANG_UPS = ["uploading", "before-head", "mid-answer", "at-the-end"]


@pytest.mark.parametrize("channel", [True, False], ids=["channel", "http"])
@pytest.mark.parametrize("how", HANG_UPS)
async def test_a_turn_the_agent_hangs_up_on_leaves_nothing_and_the_next_is_exact(
    redis: Redis, how: str, channel: bool
) -> None:
    async with relayed(redis, channel=channel) as stack, httpx.AsyncClient(timeout=_GUARD) as agent:
        talk = Conversation(1)
        for n in range(2):
            await turn(agent, stack, talk.body())
            talk.step(n)
        await settled(stack)
        before, tasks = stack.slugs(), len(asyncio.all_tasks())
        if how == "uploading":
            await hang_up_uploading(stack, talk.body())
        elif how == "before-head":
            await hang_up_before_head(stack, talk.body("hold-head:b"), "b")
        elif how == "mid-answer":
            await hang_up_mid_answer(stack, talk.body("hold-middle:c"), "c")
        else:
            await hang_up_at_the_end(stack, talk.body())
        await settled(stack)
        assert_nothing_held(stack)
        for n in range(2, 4):  # the agent retries the turn, then goes on
            body = talk.body()
            answer = await turn(agent, stack, body)
            assert stack.provider.seen[-1] == body
            assert answer == stack.provider.streamed[len(stack.provider.seen) - 1]
            talk.step(n)
        await settled(stack)
        assert_nothing_held(stack)
        after = stack.slugs()
        misses = sum(after[s] - before[s] for s in _SLUGS[1:])
        assert misses <= 1, after
        assert len(asyncio.all_tasks()) <= tasks


ORDERS = ["msu", "mus", "smu", "sum", "ums", "usm"]


@pytest.mark.parametrize("order", ORDERS)
async def test_turns_of_one_conversation_at_once_keep_the_editor_consistent(
    redis: Redis, order: str
) -> None:
    """The main turn (m), a side request of the same conversation (s: its messages and one
    more, as Claude Code's summary) and a short new one (u: a title) in flight at once
    through one client's editor, answered in `order`: every body exact, and the turns after
    them edits of recipes the gateway holds, with no miss."""
    async with relayed(redis) as stack, httpx.AsyncClient(timeout=_GUARD) as agent:
        talk = Conversation(2)
        for n in range(2):
            await turn(agent, stack, talk.body())
            talk.step(n)
        await settled(stack)
        before = stack.slugs()
        title = {"model": MODEL, "max_tokens": 9, "stream": True, "messages": [
            user("hold-middle:u write a title for: build it")
        ]}  # fmt: skip
        bodies = {
            "s": talk.body("hold-middle:s summarize this conversation"),
            "u": json.dumps(title).encode(),
        }
        last = talk.messages[-1]
        last["content"] = "hold-middle:m " + last["content"]  # the main turn's, held
        bodies["m"] = talk.body()
        tasks = {k: asyncio.create_task(turn(agent, stack, b)) for k, b in bodies.items()}
        async with asyncio.timeout(_GUARD):
            for name in bodies:
                await stack.provider.reached(name).wait()
        for name in order:
            stack.provider.release(name)
            answer = await tasks[name]
            index = stack.provider.seen.index(bodies[name])
            assert answer == stack.provider.streamed[index]
        talk.step(2)
        for n in range(3, 6):
            body = talk.body()
            await turn(agent, stack, body)
            assert stack.provider.seen[-1] == body
            talk.step(n)
        await settled(stack)
        assert_nothing_held(stack)
        after = stack.slugs()
        assert after["applied"] - before["applied"] == 6
        assert all(after[s] == before[s] for s in _SLUGS[1:]), after


@pytest.mark.parametrize("side", ["summary", "title"])
async def test_a_side_request_between_turns_costs_the_next_no_miss(redis: Redis, side: str) -> None:
    async with relayed(redis) as stack, httpx.AsyncClient(timeout=_GUARD) as agent:
        talk = Conversation(3)
        for n in range(2):
            await turn(agent, stack, talk.body())
            talk.step(n)
        await settled(stack)
        before = stack.slugs()
        await turn(agent, stack, talk.body())  # T2
        if side == "summary":
            aside = talk.body("summarize this conversation")
        else:
            aside = Conversation(9).body("title")
        await turn(agent, stack, aside)
        talk.step(2)
        for n in range(3, 6):
            body = talk.body()
            await turn(agent, stack, body)
            assert stack.provider.seen[-1] == body
            talk.step(n)
        await settled(stack)
        after = stack.slugs()
        assert all(after[s] == before[s] for s in _SLUGS[1:]), after


async def test_a_turn_left_while_its_client_is_busy_leaves_no_stream_open(redis: Redis) -> None:
    """The answer's head came while another turn of the client holds its editor (a large
    body prepared in a worker thread: here the test holds its lock), and the agent left:
    the answer is closed (its channel stream freed, the gateway told), not left open."""
    async with relayed(redis) as stack, httpx.AsyncClient(timeout=_GUARD) as agent:
        talk = Conversation(4)
        for n in range(2):
            await turn(agent, stack, talk.body())
            talk.step(n)
        await settled(stack)
        client = next(iter(stack.relay.clients._clients._entries.values()))[0]
        body = talk.body("hold-head:x")
        task = asyncio.create_task(turn(agent, stack, body))
        async with asyncio.timeout(_GUARD):
            await stack.provider.reached("x").wait()
        async with client.lock:  # the edit went: its answer's head waits for the lock
            stack.provider.release("x")
            await until(lambda: waiting(client.lock))
            task.cancel()  # the agent leaves: the relay stops waiting
            with pytest.raises(asyncio.CancelledError):
                await task
            await until(lambda: not waiting(client.lock))
        await settled(stack)
        assert_nothing_held(stack)
        body = talk.body()  # and the conversation goes on
        await turn(agent, stack, body)
        assert stack.provider.seen[-1] == body


def waiting(lock: asyncio.Lock) -> int:
    """The tasks waiting for `lock`."""
    return len(lock._waiters or ())


@pytest.mark.parametrize("how", ["upstream-breaks", "channel-closes"])
async def test_a_turn_the_gateway_side_cuts_is_recovered_by_the_next(
    redis: Redis, how: str
) -> None:
    """The provider breaks off mid-answer, or the relay's channel closes while a turn is
    answered: the agent's answer breaks off (never looks whole); the next turn is exact,
    with at most one resend, and nothing stays held on either side."""
    async with relayed(redis) as stack, httpx.AsyncClient(timeout=_GUARD) as agent:
        talk = Conversation(5)
        for n in range(2):
            await turn(agent, stack, talk.body())
            talk.step(n)
        await settled(stack)
        before = stack.slugs()
        verb = "die-middle" if how == "upstream-breaks" else "hold-middle"
        request = agent.build_request(
            "POST", stack.relay_url + URL, content=talk.body(f"{verb}:g"), headers=HEADERS
        )
        response = await agent.send(request, stream=True)
        assert response.status_code == 200
        await stack.provider.reached("g").wait()
        link = stack.channel._link
        assert link is not None
        if how == "channel-closes":
            link.socket.abort()
        stack.provider.release("g")
        with pytest.raises(httpx.RemoteProtocolError):
            await response.aread()
        await settled(stack)
        assert_nothing_held(stack)
        for n in range(2, 4):
            body = talk.body()
            answer = await turn(agent, stack, body)
            assert stack.provider.seen[-1] == body
            assert answer == stack.provider.streamed[len(stack.provider.seen) - 1]
            talk.step(n)
        await settled(stack)
        assert_nothing_held(stack)
        after = stack.slugs()
        assert sum(after[s] - before[s] for s in _SLUGS[1:]) <= 1, after


async def test_many_conversations_stream_on_while_one_agent_hangs_up_each_turn(
    redis: Redis,
) -> None:
    """32 conversations at once over the relay's one channel, one agent of them leaving
    mid-answer each round (its answer held until it left): every other answer arrives
    whole and exact, and what the relay and the gateway hold does not grow from round to
    round (tasks included)."""
    talks = [Conversation(100 + n) for n in range(32)]
    async with relayed(redis) as stack, httpx.AsyncClient(timeout=_GUARD) as agent:
        tasks: list[int] = []
        for round_ in range(4):
            leaving = round_ % len(talks)
            name = f"r{round_}"
            bodies = [
                t.body(f"hold-middle:{name}") if n == leaving else t.body()
                for n, t in enumerate(talks)
            ]
            url = stack.relay_url + URL
            request = agent.build_request("POST", url, content=bodies[leaving], headers=HEADERS)
            held_answer = await agent.send(request, stream=True)
            async for _ in held_answer.aiter_raw():  # its first event: the rest is held
                break
            answers = await asyncio.gather(
                *(turn(agent, stack, b) for n, b in enumerate(bodies) if n != leaving)
            )
            await held_answer.aclose()  # the agent leaves, its answer still held
            stack.provider.release(name)
            for body in bodies:
                assert body in stack.provider.seen
            stayed = [b for n, b in enumerate(bodies) if n != leaving]
            for answer, body in zip(answers, stayed, strict=True):
                assert answer == stack.provider.streamed[stack.provider.seen.index(body)]
            for t in talks:
                t.step(round_)
            await settled(stack)
            assert_nothing_held(stack)
            tasks.append(len(asyncio.all_tasks()))
            assert len(stack.relay.clients) == 1
        assert tasks[-1] <= tasks[0], tasks
