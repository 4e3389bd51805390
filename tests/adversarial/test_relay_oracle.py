"""Attacks on the relay (issue 28, finding 3), over real sockets: the relay in front of the
service's gateway on the test engine, a scripted provider behind it.

- A compression oracle (CRIME): a victim's conversation holds a secret; another sender
  guesses it, a new conversation a guess, and reads the wire size of each in
  `Toolref-Savings`. Before the fix every conversation on an upstream shared one manager,
  and a new conversation was compressed against the latest kept body of any: the right
  guess travelled smaller than the wrong ones (a local process recovered a 12-character
  secret in 768 requests).
- A web page: after DNS rebinding its requests reach the loopback port with its own
  `Host`; from any page they carry an `Origin`; a cross-site `text/plain` POST to
  `/toolref/switch` switched the agent's upstream; `/metrics` was open to any Host.
"""

from __future__ import annotations

import random
import re
import statistics
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.support.servers import serve
from toolref.edits.wire import described
from toolref_relay import Relay, RelayConfig

from ..integration.relay_gateway import KEY, Recorded, Scripted, gateway, wire_bytes

pytestmark = pytest.mark.engine

TIMEOUT = 30
SAVINGS = re.compile(r"^raw=(\d+), wire=(\d+), ratio=")
SECRET = "q7Xk2LmP9vRt"  # 12 distinct characters
# Wrong guesses of the same characters (so of the same size plain, and the same literals
# to zstd), sharing no two consecutive characters with the secret: before the fix, only
# the right guess matched the victim's body.
WRONG = (SECRET[::-1], SECRET[::2] + SECRET[1::2], SECRET[1::2][::-1] + SECRET[::2][::-1])
# What every conversation of the agent carries: its system prompt (which an attacker knows).
SYSTEM = " ".join(
    f"You are a coding agent; rule {n}: read files before editing them." for n in range(40)
)
VICTIM = {"x-api-key": "sk-ant-victim-credential"}


@dataclass
class Stack:
    url: str
    port: int
    relay: Relay
    gateway: Recorded
    provider: Scripted
    lines: list[str] = field(default_factory=list)

    @property
    def token(self) -> str:
        # (getattr: so that these tests fail on their assertions on the code before)
        return str(getattr(self.relay.config, "token", "the relay had no token"))

    def control(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"}


@asynccontextmanager
async def relayed(redis: Redis, **options: Any) -> AsyncIterator[Stack]:
    """The relay (`options`: `RelayConfig`'s) before the gateway, providers `a` and `b`."""
    a, b = Scripted(), Scripted()
    async with gateway(redis, {"a": a.app(), "b": b.app()}) as recorded:
        lines: list[str] = []
        # Each turn watched as the HTTP request it is at the gateway: the HTTP path, the
        # channel's fallback (the channel has its own tests: test_channel.py).
        options.setdefault("channel", False)
        relay = Relay(RelayConfig(recorded.url, key=KEY, **options), report=lines.append)
        async with serve(relay) as url:
            port = int(url.rsplit(":", 1)[1])
            yield Stack(url, port, relay, recorded, a, lines)


def _body(text: str, *more: dict[str, Any]) -> dict[str, Any]:
    messages = [{"role": "user", "content": text}, *more]
    return {"model": "m", "max_tokens": 5, "system": SYSTEM, "messages": messages}


async def _say(
    agent: httpx.AsyncClient, stack: Stack, body: dict[str, Any], headers: dict[str, str]
) -> int:
    """Send `body` as an LLM request; the wire size its answer's `Toolref-Savings` tells."""
    answer = await agent.post(
        stack.url + "/llm/a/v1/messages", json=body, headers={**headers, "anthropic-version": "x"}
    )
    assert answer.status_code == 200, answer.text
    found = SAVINGS.match(answer.headers["toolref-savings"])
    assert found is not None
    return int(found[2])


@pytest.mark.parametrize(
    "attacker",
    [
        pytest.param({"x-api-key": "sk-ant-attacker"}, id="another-credential"),
        pytest.param({}, id="no-credential"),
        pytest.param({"authorization": "Bearer sk-ant-attacker"}, id="bearer"),
        pytest.param(VICTIM, id="the-victim-s-credential-another-conversation"),
    ],
)
async def test_a_guess_at_another_conversation_s_secret_travels_the_same_size(
    redis: Redis, attacker: dict[str, str]
) -> None:
    """The victim's conversation holds the secret, and the gateway keeps the body of its
    latest turn (the victim's next turn compresses against it). Between two of the
    victim's turns the attacker sends a guess, each a new conversation of its own: the
    right one and three wrong ones travel the same number of bytes, and none is
    compressed against the victim's body (no `Toolref-Dictionary`). Before the fix the
    right guess was smaller and every guess named the victim's latest history (fails on
    the code before, with history refs, retired in 0.3). As edits (issue 30): a guess is a
    new conversation, sent with no base and no dictionary; the attacker's own first request
    (its system prompt) goes first, so that every guess finds the same state of its own."""
    secret_text = f"Deploy with this .env:\nDEPLOY_TOKEN={SECRET}\nREGION=eu-west-1\n"
    victim = _body(secret_text)
    sizes, probes, turns = {}, [], []
    async with relayed(redis) as stack, httpx.AsyncClient(timeout=TIMEOUT) as agent:
        await _say(agent, stack, _body("the attacker's own first conversation"), attacker)
        for n, guess in enumerate((SECRET, *WRONG)):
            await _say(agent, stack, victim, VICTIM)
            turns.append(stack.gateway.arrivals[-1])
            victim["messages"] += [
                {"role": "assistant", "content": f"step {n} done"},
                {"role": "user", "content": f"go on with step {n + 1}"},
            ]
            probe = f"Is this right? DEPLOY_TOKEN={guess}\nREGION=eu-west-1\n"
            sizes[guess] = await _say(agent, stack, _body(probe), attacker)
            probes.append(stack.gateway.arrivals[-1])
        await _say(agent, stack, victim, VICTIM)
        turns.append(stack.gateway.arrivals[-1])
    assert len(set(sizes.values())) == 1, sizes
    assert len({len(a.body) for a in probes}) == 1
    for arrival in probes:  # no base, so no dictionary: its own bytes only
        header = described(arrival.body)
        assert header["b"] is None, arrival.body[:80]
        assert "z" not in header
    for turn in turns[1:]:  # the victim's turns: edits of its own recipe before
        assert described(turn.body)["b"] is not None


def _wrong(seed: int) -> str:
    """A wrong guess of the secret's characters, new each time, sharing no two consecutive
    characters with it (so that only the right guess repeats the secret)."""
    rng = random.Random(seed)
    pairs = {SECRET[i : i + 2] for i in range(len(SECRET) - 1)}
    while True:
        guess = "".join(rng.sample(SECRET, len(SECRET)))
        if not any(guess[i : i + 2] in pairs for i in range(len(guess) - 1)):
            return guess


def _page(turn: int, guess: str) -> str:
    """A web page an attacker serves (fetched by the agent as a tool result): text of its
    own and a guess at the secret, with the context the attacker knows around it."""
    lines = [f"Release notes, part {turn}: the deploy pipeline reads its token from .env."]
    lines += [
        f"Example {turn}.{n}: set REGION and the token, then run make deploy." for n in range(6)
    ]
    lines.append(f"DEPLOY_TOKEN={guess}\nREGION=eu-west-1\n")
    return "\n".join(lines)


@pytest.mark.parametrize("guarded", [True, False], ids=["size-guard", "no-size-guard"])
async def test_a_guess_in_the_conversation_s_own_tool_result_travels_the_same_size(
    redis: Redis, guarded: bool
) -> None:
    """Issue 37, M1: the secret is in the agent's own conversation (a `.env` it read), and
    an attacker's page, fetched as a tool result turn after turn, carries guesses at it.
    Every turn is an edit of the turn before; the bytes on the relay->gateway socket
    (header lines and body) of the turns carrying the right guess and of those carrying
    wrong ones: size-guarded (the default), the medians are within 2 bytes (each new
    segment compressed alone: its size is its own). Without the guard the right guess
    travels smaller (its text repeats the secret in the window it is compressed against):
    the attack this test makes is one that works."""
    opening = f"Deploy with this .env:\nDEPLOY_TOKEN={SECRET}\nREGION=eu-west-1\n"
    body = _body(opening, {"role": "assistant", "content": "I will check the notes."})
    right: list[int] = []
    wrong: list[int] = []
    async with (
        relayed(redis, size_guard=guarded) as stack,
        httpx.AsyncClient(timeout=TIMEOUT) as agent,
    ):
        await _say(agent, stack, body, VICTIM)
        for turn in range(12):
            guess = SECRET if turn % 2 == 0 else _wrong(turn)
            call: dict[str, Any] = {"type": "tool_use", "id": f"toolu_{turn:02d}"}
            call["name"] = "web_fetch"
            call["input"] = {"url": f"https://attacker.example/notes/{turn:02d}"}
            result = {"type": "tool_result", "tool_use_id": f"toolu_{turn:02d}"}
            result["content"] = _page(turn, guess)
            body["messages"] += [
                {"role": "assistant", "content": [call]},
                {"role": "user", "content": [result]},
            ]
            await _say(agent, stack, body, VICTIM)
            arrival = stack.gateway.arrivals[-1]
            assert arrival.headers["content-type"] == "application/vnd.toolref.edit"
            (right if guess == SECRET else wrong).append(wire_bytes(arrival))
    gap = statistics.median(wrong) - statistics.median(right)
    if guarded:
        assert abs(gap) <= 2, (right, wrong)
    else:
        assert gap > 2, (right, wrong)


async def test_clients_share_no_confirmed_refs(redis: Redis) -> None:
    """A tool result the victim's conversation holds travels by reference only in the
    victim's own later requests: a guess at it by another client is sent in full, so its
    size does not say whether the victim holds it (before the fix, one manager per upstream:
    the guess travelled as a ref, a few hundred bytes smaller). As edits: the result's piece
    is named only by the victim's own editor."""
    result = "AWS_SECRET_ACCESS_KEY=" + SECRET * 20

    def conversation(opening: str) -> dict[str, Any]:
        call = {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"p": ".env"}}
        answer = {"type": "tool_result", "tool_use_id": "toolu_1", "content": result}
        body = _body(opening, {"role": "assistant", "content": [call]})
        body["messages"].append({"role": "user", "content": [answer]})
        return body

    async with relayed(redis) as stack, httpx.AsyncClient(timeout=TIMEOUT) as agent:
        await _say(agent, stack, conversation("read .env"), VICTIM)
        await _say(agent, stack, conversation("read .env, the guess"), {"x-api-key": "other"})
        await _say(agent, stack, conversation("read .env, the victim again"), VICTIM)
    _, guess, again = (described(a.body) for a in stack.gateway.arrivals)
    assert guess["b"] is None
    assert not any(isinstance(op, str) for op in guess["o"])  # nothing named: inline
    assert guess["n"] > len(result)
    assert again["b"] is not None  # the victim's own recipe, the result kept in it
    assert again["n"] < len(result)


@pytest.mark.parametrize(
    ("path", "method"),
    [("/llm/a/v1/messages", "POST"), ("/metrics", "GET"), ("/toolref/switch", "POST")],
)
async def test_a_dns_rebound_host_is_refused(redis: Redis, path: str, method: str) -> None:
    """A page that pointed its own name at 127.0.0.1 reaches the port with its own Host:
    403 in the provider's shape, saying which Host is served and why; nothing reaches the
    gateway, nothing switches, even with the token (served before the fix)."""
    async with (
        relayed(redis, switch=("a", "b")) as stack,
        httpx.AsyncClient(timeout=TIMEOUT) as agent,
    ):
        headers = {**stack.control(), "host": f"evil.example:{stack.port}"}
        body = _body("hi") if path.startswith("/llm/") else {"upstream": "b"}
        answer = await agent.request(method, stack.url + path, json=body, headers=headers)
        assert stack.relay.switchboard.selected == "a"
    assert answer.status_code == 403
    message = answer.json()["error"]["message"]
    assert f"127.0.0.1:{stack.port}" in message
    assert "evil.example" in message
    assert "DNS rebinding" in message
    assert stack.gateway.arrivals == []


async def test_the_relay_s_own_names_are_served(redis: Redis) -> None:
    """127.0.0.1, localhost and [::1] on the relay's port (what agents send); the same
    names on another port, or without one, are refused."""
    async with relayed(redis) as stack, httpx.AsyncClient(timeout=TIMEOUT) as agent:
        statuses = {}
        for host in (
            f"127.0.0.1:{stack.port}",
            f"localhost:{stack.port}",
            f"LOCALHOST:{stack.port}",
            f"[::1]:{stack.port}",
            f"127.0.0.1:{stack.port + 1}",
            "localhost",
            f"127.0.0.1.evil.example:{stack.port}",
        ):
            answer = await agent.get(
                stack.url + "/metrics", headers={**stack.control(), "host": host}
            )
            statuses[host] = answer.status_code
    assert list(statuses.values()) == [200, 200, 200, 200, 403, 403, 403], statuses


async def test_a_request_with_an_origin_is_refused(redis: Redis) -> None:
    """Agents send no Origin; a page's fetch does: 403 in the provider's shape (Anthropic's
    `permission_error` here), and the request goes nowhere (forwarded before the fix)."""
    async with relayed(redis) as stack, httpx.AsyncClient(timeout=TIMEOUT) as agent:
        answer = await agent.post(
            stack.url + "/llm/a/v1/messages",
            json=_body("hi"),
            headers={"origin": "https://evil.example", "anthropic-version": "x"},
        )
    assert answer.status_code == 403
    error = answer.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "permission_error"
    assert "https://evil.example" in error["error"]["message"]
    assert "browsers" in error["error"]["message"]
    assert stack.gateway.arrivals == []


async def test_a_cross_site_text_plain_post_switches_nothing(redis: Redis) -> None:
    """A form or `fetch(no-cors)` needs no preflight for `text/plain`: from a page it
    carries an Origin (403); from a process without the token it is 401. Before the fix
    both switched the agent's upstream."""
    async with (
        relayed(redis, switch=("a", "b")) as stack,
        httpx.AsyncClient(timeout=TIMEOUT) as agent,
    ):
        url = stack.url + "/toolref/switch"
        content, plain = '{"upstream": "b"}', {"content-type": "text/plain"}
        page = await agent.post(url, content=content, headers={**plain, "origin": "null"})
        local = await agent.post(url, content=content, headers=plain)
        selected = stack.relay.switchboard.selected
    assert (page.status_code, local.status_code) == (403, 401)
    assert selected == "a"


@pytest.mark.parametrize("path", ["/metrics", "/toolref/switch"])
async def test_control_endpoints_need_this_start_s_token(redis: Redis, path: str) -> None:
    """No token or a wrong one: 401 with a Bearer challenge, saying how to send it; this
    start's: 200. An earlier start's token is another, so it is wrong (200 before)."""
    async with (
        relayed(redis, switch=("a", "b")) as stack,
        httpx.AsyncClient(timeout=TIMEOUT) as agent,
    ):
        url = stack.url + path
        missing = await agent.get(url)
        wrong = await agent.get(url, headers={"authorization": "Bearer " + "x" * 43})
        basic = await agent.get(url, headers={"authorization": f"Basic {stack.token}"})
        right = await agent.get(url, headers=stack.control())
    for refused in (missing, wrong, basic):
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert "Authorization: Bearer <token>" in refused.json()["error"]
        assert stack.token not in refused.text
    assert right.status_code == 200
    assert getattr(RelayConfig("http://g"), "token", stack.token) != stack.token  # per start


async def test_the_switch_header_needs_the_token(redis: Redis) -> None:
    """`Toolref-Switch` switches from any LLM request, so it needs the token too: without
    it (or with a wrong one) 403 in the provider's shape, nothing sent, nothing switched;
    with `; token="..."` it switches (switched without a token before)."""
    async with (
        relayed(redis, switch=("a", "b")) as stack,
        httpx.AsyncClient(timeout=TIMEOUT) as agent,
    ):
        url = stack.url + "/llm/a/v1/messages"
        statuses = []
        for value in ("b", 'b; token="wrong-token-of-some-length"'):
            answer = await agent.post(url, json=_body("hi"), headers={"toolref-switch": value})
            statuses.append(answer.status_code)
            assert 'Toolref-Switch: b; token="<token>"' in answer.json()["error"]["message"]
        refused = (list(statuses), stack.relay.switchboard.selected, len(stack.gateway.arrivals))
        token = stack.token
        switched = await agent.post(
            url, json=_body("hi"), headers={"toolref-switch": f'b; token="{token}"'}
        )
    assert refused == ([403, 403], "a", 0)
    assert switched.status_code == 200
    assert stack.relay.switchboard.selected == "b"
    assert [a.path for a in stack.gateway.arrivals] == ["/llm/b/v1/messages"]
