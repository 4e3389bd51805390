"""The relay over real sockets: the official SDKs pointed at it, the service's gateway
behind it (on the test engine, with a tenant key), providers behind that.

Every conversation must reach the provider as the SDK built it (byte for byte), while the
relay sends its turns as edits (or, with `--no-edits`, as they came); answers stream
through as they come; and no failure of the gateway bricks a session.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import random
import re
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
import zstandard
from examples import anthropic_client, openai_client
from examples.llm_backend import create_backend
from redis.asyncio import Redis

from tests.support.servers import serve
from toolref.edits import wire
from toolref.edits.wire import described
from toolref_relay import Relay, RelayConfig
from toolref_relay.ledger import UPLOAD_BYTES

from .relay_gateway import KEY, Arrival, Recorded, Scripted, gateway, header_lines, wire_bytes

TIMEOUT = 30
TASKS = anthropic_client.TASKS[:3]
SAVINGS = re.compile(r"^raw=(\d+), wire=(\d+), ratio=(\d+\.\d)$")


@dataclass
class Stack:
    relay_url: str
    gateway: Recorded
    relay: Relay
    lines: list[str] = field(default_factory=list)


@asynccontextmanager
async def relayed(
    redis: Redis,
    providers: dict[str, Any],
    settings: dict[str, Any] | None = None,
    **options: Any,
) -> AsyncIterator[Stack]:
    """The gateway with `providers` as upstreams, and the relay in front of it
    (`settings`: the service's; `options`: `RelayConfig`'s)."""
    async with gateway(redis, providers, **(settings or {})) as recorded:
        lines: list[str] = []
        # Each turn watched as the HTTP request it is at the gateway: the HTTP path, the
        # channel's fallback (the channel has its own tests: test_channel.py).
        options.setdefault("channel", False)
        relay = Relay(RelayConfig(recorded.url, key=KEY, **options), report=lines.append)
        async with serve(relay) as relay_url:
            yield Stack(relay_url, recorded, relay, lines)


def control(stack: Stack) -> dict[str, str]:
    """The header the relay's control endpoints need: this start's token."""
    return {"authorization": f"Bearer {stack.relay.config.token}"}


def closed_port_url() -> str:
    """A loopback URL nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def recording_client() -> tuple[httpx2.AsyncClient, list[bytes], list[httpx2.Response]]:
    """An SDK's HTTP client keeping the bodies the SDK built and the answers it got."""
    built: list[bytes] = []
    answers: list[httpx2.Response] = []

    async def request(request: httpx2.Request) -> None:
        built.append(await request.aread())

    async def response(response: httpx2.Response) -> None:
        answers.append(response)

    client = httpx2.AsyncClient(event_hooks={"request": [request], "response": [response]})
    return client, built, answers


def assert_same_bodies(built: list[bytes], received: list[Any]) -> None:
    assert len(built) == len(received)
    for sent, got in zip(built, received, strict=True):
        assert json.loads(got) == json.loads(sent)
        assert json.dumps(json.loads(got)) == json.dumps(json.loads(sent))  # key order too


def assert_edits_after_the_first(turns: list[Arrival]) -> None:
    """Every turn travels as an edit: the first with no base, every later one against a
    recipe the gateway confirmed (issue 30)."""
    assert described(turns[0].body)["b"] is None
    for turn in turns:
        assert turn.headers["content-type"] == "application/vnd.toolref.edit"
        assert "toolref-history" not in turn.headers
    for later in turns[1:]:
        assert described(later.body)["b"] is not None


def assert_as_they_came(turns: list[Arrival], built: list[bytes]) -> None:
    """Every turn travels as the agent sent it: its body, plain JSON, no toolref header but
    the tenant's key."""
    assert [turn.body for turn in turns] == built
    for turn in turns:
        assert turn.headers["content-type"] == "application/json"
        assert "content-encoding" not in turn.headers
        assert [k for k in turn.headers if k.startswith("toolref-")] == ["toolref-key"]


@pytest.mark.parametrize("edits", [True, False], ids=["edits", "as-they-came"])
async def test_the_anthropic_sdk_converses_through_the_relay_exactly(
    redis: Redis, edits: bool
) -> None:
    """As edits (a gateway that takes them), and as they came (`--no-edits`; the relay's
    manager path was retired): the provider gets what the SDK built, every turn."""
    backend = create_backend(None, delay=0.001)
    providers = {"anthropic": backend}
    async with relayed(redis, providers, edits=edits) as stack:
        http, built, answers = recording_client()
        async with anthropic.AsyncAnthropic(
            base_url=stack.relay_url + "/llm/anthropic",
            api_key="sk-ant-provider-credential",
            max_retries=0,
            timeout=TIMEOUT,
            http_client=http,
        ) as client:
            messages = await anthropic_client.aconverse(client, TASKS)
    assert len(messages) == 4 * len(TASKS)  # task, tool call, its result, answer
    assert_same_bodies(built, backend.state.provider.bodies())
    assert backend.state.provider.bodies() == built  # byte for byte
    if edits:
        assert_edits_after_the_first(stack.gateway.arrivals)
    else:
        assert_as_they_came(stack.gateway.arrivals, built)
    for arrival in stack.gateway.arrivals:  # credentials pass through; the key travels apart
        assert arrival.headers["authorization"] == "Bearer sk-ant-provider-credential"
        assert arrival.headers["toolref-key"] == KEY
    # As edits, fewer bytes on the relay's wire than the agent sent, turn by turn, and said
    # so; as they came, the body's bytes.
    later = [SAVINGS.match(a.headers["toolref-savings"]) for a in answers[1:]]
    assert all(m is not None for m in later)
    if edits:
        assert all(int(m[2]) < int(m[1]) for m in later if m is not None)
    assert all(
        not k.startswith("toolref-") or k == "toolref-savings" for a in answers for k in a.headers
    )
    turns = [line for line in stack.lines if " turn " in line]
    assert len(turns) == len(built)
    # The summary, at exit: the SDK's totals (its User-Agent's product) on its upstream.
    assert stack.lines[-1].startswith(
        "toolref relay: AsyncAnthropic -> anthropic, every conversation since the relay started: "
    )
    # Like for like: header lines and body, the agent's requests and the relay's.
    assert stack.relay.tally.wire == sum(wire_bytes(a) for a in stack.gateway.arrivals)
    agent_sent = [
        header_lines(a.request.headers.raw) + len(b) for a, b in zip(answers, built, strict=True)
    ]
    assert stack.relay.tally.raw == sum(agent_sent)


async def test_the_openai_sdk_converses_through_the_relay_exactly(redis: Redis) -> None:
    backend = create_backend(None, delay=0.001)
    providers = {"openai": backend}
    async with relayed(redis, providers) as stack:
        http, built, _ = recording_client()
        async with openai.AsyncOpenAI(
            base_url=stack.relay_url + "/llm/openai/v1",
            api_key="sk-openai-credential",
            max_retries=0,
            timeout=TIMEOUT,
            http_client=http,
        ) as client:
            await openai_client.aconverse(client, openai_client.TASKS[:3])
            # The Responses API too, one turn, not streamed.
            answer = await client.responses.create(model="scripted-1", input="hello")
    assert answer.output_text == "You said: hello"
    assert_same_bodies(built, backend.state.provider.bodies())
    assert_edits_after_the_first(stack.gateway.arrivals[:-1])
    assert described(stack.gateway.arrivals[-1].body)["b"] is None  # another conversation
    assert all(
        a.headers["authorization"] == "Bearer sk-openai-credential" for a in stack.gateway.arrivals
    )


async def test_an_event_stream_arrives_as_the_provider_sends_it(redis: Redis) -> None:
    scripted = Scripted(gate=asyncio.Event())
    providers = {"anthropic": scripted.app()}
    body = {"model": "m", "max_tokens": 5, "stream": True, "messages": [_user("hi")]}
    async with relayed(redis, providers) as stack, httpx.AsyncClient(timeout=TIMEOUT) as agent:
        url = stack.relay_url + "/llm/anthropic/v1/messages"
        async with agent.stream("POST", url, json=body) as answer:
            lines = answer.aiter_lines()
            first = await asyncio.wait_for(anext(lines), TIMEOUT)
            assert first == "event: message_start"  # while the provider is still held
            assert not scripted.ended.is_set()
            scripted.gate.set()  # type: ignore[union-attr]
            rest = [line async for line in lines]
    assert "event: message_stop" in rest
    assert answer.headers["content-type"].startswith("text/event-stream")


@pytest.mark.parametrize("channel", [False, True])
async def test_an_agent_that_hangs_up_cancels_the_request_upstream(
    redis: Redis, channel: bool
) -> None:
    scripted = Scripted(gate=asyncio.Event())  # never set: the stream waits forever
    providers = {"anthropic": scripted.app()}
    body = {"model": "m", "max_tokens": 5, "stream": True, "messages": [_user("hi")]}
    async with (
        relayed(redis, providers, channel=channel) as stack,
        httpx.AsyncClient(timeout=TIMEOUT) as agent,
    ):
        url = stack.relay_url + "/llm/anthropic/v1/messages"
        async with agent.stream("POST", url, json=body) as answer:
            await asyncio.wait_for(anext(answer.aiter_lines()), TIMEOUT)
        await asyncio.wait_for(scripted.ended.wait(), TIMEOUT)  # the provider stopped


@pytest.mark.parametrize("channel", [False, True])
async def test_a_stream_that_breaks_off_upstream_breaks_off_for_the_agent(
    redis: Redis, channel: bool
) -> None:
    scripted = Scripted(die=True)
    providers = {"anthropic": scripted.app()}
    body = {"model": "m", "max_tokens": 5, "stream": True, "messages": [_user("hi")]}
    async with (
        relayed(redis, providers, channel=channel) as stack,
        httpx.AsyncClient(timeout=TIMEOUT) as agent,
    ):
        url = stack.relay_url + "/llm/anthropic/v1/messages"

        async def read_all() -> None:
            async with agent.stream("POST", url, json=body) as answer:
                async for _ in answer.aiter_bytes():
                    pass

        with pytest.raises(httpx.RemoteProtocolError):  # not a clean, shorter answer
            await read_all()


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
async def test_compressed_requests_are_inflated(redis: Redis, encoding: str) -> None:
    scripted = Scripted()
    providers = {"openai": scripted.app()}
    body = json.dumps({"model": "m", "messages": [_user("x" * 5000)]}).encode()
    packed = gzip.compress(body) if encoding == "gzip" else zstandard.compress(body)
    headers = {"content-type": "application/json", "content-encoding": encoding}
    async with relayed(redis, providers) as stack, httpx.AsyncClient(timeout=TIMEOUT) as agent:
        url = stack.relay_url + "/llm/openai/v1/chat/completions"
        answer = await agent.post(url, content=packed, headers=headers)
    assert answer.status_code == 200
    assert_same_bodies([body], scripted.received)
    raw, wire, _ = SAVINGS.match(answer.headers["toolref-savings"]).groups()  # type: ignore[union-attr]
    assert int(raw) == header_lines(answer.request.headers.raw) + len(packed)
    assert int(wire) == wire_bytes(stack.gateway.arrivals[0])
    assert stack.relay.tally.inflated == len(body)


async def test_a_body_that_inflates_past_the_limit_is_refused_in_the_provider_shape(
    redis: Redis,
) -> None:
    providers = {"anthropic": Scripted().app()}
    body = json.dumps({"model": "m", "messages": [_user("x" * 200_000)]}).encode()
    headers = {"content-type": "application/json", "content-encoding": "zstd"}
    async with (
        relayed(redis, providers, max_inflated_bytes=100_000) as stack,
        httpx.AsyncClient(timeout=TIMEOUT) as agent,
    ):
        url = stack.relay_url + "/llm/anthropic/v1/messages"
        answer = await agent.post(url, content=zstandard.compress(body), headers=headers)
    assert answer.status_code == 413
    error = answer.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "request_too_large"
    assert "--max-inflated-bytes" in error["error"]["message"]
    assert stack.gateway.arrivals == []


async def test_a_gateway_that_is_down_sends_the_request_to_the_fallback() -> None:
    provider = Scripted()
    async with serve(provider.app()) as provider_url:
        lines: list[str] = []
        config = RelayConfig(closed_port_url(), key=KEY, fallback=provider_url)
        async with serve(Relay(config, report=lines.append)) as relay_url:
            http, built, answers = recording_client()
            async with anthropic.AsyncAnthropic(
                base_url=relay_url + "/llm/anthropic",
                api_key="sk-ant-provider-credential",
                max_retries=0,
                timeout=TIMEOUT,
                http_client=http,
            ) as client:
                message = await client.messages.create(
                    model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
                )
    assert message.content[0].text == "ok"  # type: ignore[union-attr]
    assert provider.received == built  # the agent's request as it came
    [headers] = provider.headers
    assert headers["authorization"] == "Bearer sk-ant-provider-credential"
    assert not any(k.startswith("toolref-") for k in headers)  # the key stays home
    assert "does not answer" in lines[0]
    assert "fallback" in next(line for line in lines if " turn 1 " in line)
    raw = header_lines(answers[0].request.headers.raw) + len(built[0])
    wire = header_lines(headers.items()) + len(built[0])  # as it came, hop-by-hop left behind
    assert answers[0].headers["toolref-savings"] == f"raw={raw}, wire={wire}, ratio=1.0"


async def test_a_gateway_that_is_down_is_a_502_the_anthropic_sdk_shows() -> None:
    gateway = closed_port_url()
    async with (
        serve(Relay(RelayConfig(gateway), report=lambda _: None)) as relay_url,
        anthropic.AsyncAnthropic(
            base_url=relay_url + "/llm/anthropic", api_key="k", max_retries=0, timeout=TIMEOUT
        ) as client,
    ):
        with pytest.raises(anthropic.APIStatusError) as raised:
            await client.messages.create(
                model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
            )
    assert raised.value.status_code == 502
    assert raised.value.body == {
        "type": "error",
        "error": {"type": "api_error", "message": raised.value.body["error"]["message"]},  # type: ignore[index]
    }
    assert gateway in raised.value.message
    assert "--fallback" in raised.value.message


async def test_a_gateway_that_is_down_is_a_502_the_openai_sdk_shows() -> None:
    gateway = closed_port_url()
    async with (
        serve(Relay(RelayConfig(gateway), report=lambda _: None)) as relay_url,
        openai.AsyncOpenAI(
            base_url=relay_url + "/llm/openai/v1", api_key="k", max_retries=0, timeout=TIMEOUT
        ) as client,
    ):
        with pytest.raises(openai.APIStatusError) as raised:
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
    assert raised.value.status_code == 502
    assert raised.value.code == "toolref_gateway_unreachable"
    assert raised.value.type == "server_error"
    assert gateway in raised.value.message
    assert "--fallback" in raised.value.message


def _tool_conversation(result: str) -> list[Any]:
    return [
        _user("read big.txt"),
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "read_file",
                    "input": {"path": "big.txt"},
                }
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": result}],
        },
    ]


def _noise(size: int) -> str:
    """`size` characters zstd cannot shrink (the relay compresses every body)."""
    return base64.b64encode(random.Random(size).randbytes(size)).decode()[:size]


async def test_the_gateways_413_reaches_the_sdk_in_the_providers_shape(redis: Redis) -> None:
    """An edit over the gateway's body limit (TOOLREF_MAX_BODY_BYTES: a system prompt and a
    tool result zstd cannot shrink) is refused 413; the relay hands the SDK the provider's
    413, naming the limit and the setting, and sends it nowhere else (its oversize path,
    which resent the biggest results as refs, was retired with the manager's)."""
    backend = create_backend(None, delay=0.001)
    providers = {"anthropic": backend}
    settings = {"max_body_bytes": 20_000}
    async with (
        relayed(redis, providers, settings) as stack,
        anthropic.AsyncAnthropic(
            base_url=stack.relay_url + "/llm/anthropic",
            api_key="k",
            max_retries=0,
            timeout=TIMEOUT,
        ) as client,
    ):
        with pytest.raises(anthropic.APIStatusError) as raised:
            await client.messages.create(
                model="m",
                max_tokens=5,
                system=_noise(15_000),
                messages=_tool_conversation(_noise(12_000)),
            )
    assert raised.value.status_code == 413
    assert raised.value.body["error"]["type"] == "request_too_large"  # type: ignore[index]
    assert "20000 bytes" in raised.value.message
    assert "TOOLREF_MAX_BODY_BYTES" in raised.value.message
    [edit] = stack.gateway.arrivals
    assert edit.headers["content-type"] == wire.MEDIA_TYPE
    assert len(edit.body) > 20_000
    assert backend.state.provider.bodies() == []


async def test_a_providers_413_reaches_the_sdk_as_it_came(redis: Redis) -> None:
    """The provider refuses the conversation itself: its 413 reaches the SDK as the provider
    wrote it, once (the relay no longer resends the biggest results as refs)."""
    provider = Scripted(limit=20_000)
    providers = {"anthropic": provider.app()}
    async with (
        relayed(redis, providers) as stack,
        anthropic.AsyncAnthropic(
            base_url=stack.relay_url + "/llm/anthropic", api_key="k", max_retries=0, timeout=TIMEOUT
        ) as client,
    ):
        with pytest.raises(anthropic.APIStatusError) as raised:
            await client.messages.create(
                model="m", max_tokens=5, messages=_tool_conversation(_noise(60_000))
            )
    assert raised.value.status_code == 413
    assert raised.value.body == {
        "type": "error",
        "error": {"type": "request_too_large", "message": "big"},
    }
    assert len(provider.received) == 1
    [edit] = stack.gateway.arrivals
    assert edit.headers["content-type"] == wire.MEDIA_TYPE


async def test_headers_hop_by_hop_stay_behind_and_toolref_headers_stay_home(
    redis: Redis,
) -> None:
    scripted = Scripted()
    providers = {"anthropic": scripted.app()}
    headers = {
        "x-api-key": "sk-ant-credential",
        "authorization": "Bearer provider",
        "connection": "keep-alive, x-hop",
        "x-hop": "1",
        "keep-alive": "timeout=5",
        "proxy-authorization": "Basic proxy",
        "toolref-key": "one-the-agent-made-up",
        "anthropic-version": "2023-06-01",
    }
    body = {"model": "m", "max_tokens": 5, "messages": [_user("read README.md " * 8)]}
    async with relayed(redis, providers) as stack, httpx.AsyncClient(timeout=TIMEOUT) as agent:
        url = stack.relay_url + "/llm/anthropic/v1/messages?beta=true"
        answer = await agent.post(url, json=body, headers=headers)
        models = await agent.get(stack.relay_url + "/llm/anthropic/v1/models", headers=headers)
    assert answer.status_code == models.status_code == 200
    [turn, listing] = stack.gateway.arrivals
    assert turn.path == "/llm/anthropic/v1/messages?beta=true"
    # An LLM request: an edit, the agent's headers in it but its credentials; nothing else.
    assert turn.headers["content-type"] == "application/vnd.toolref.edit"
    assert set(turn.headers) == {
        "host",
        "content-length",
        "content-type",
        "x-api-key",
        "authorization",
        "toolref-key",
    }
    assert "anthropic-version" not in turn.headers
    header, blob = wire.read(turn.body, 1 << 30)
    assert b"anthropic-version: 2023-06-01\r\n" in wire.inline(header, blob, b"", None)[0]
    assert listing.headers["anthropic-version"] == "2023-06-01"  # anything else: passed through
    for seen in scripted.headers:  # the provider: the agent's headers, toolref's none
        assert seen["anthropic-version"] == "2023-06-01"
        assert seen["x-api-key"] == "sk-ant-credential"
        assert seen["authorization"] == "Bearer provider"
        assert not any(k.startswith("toolref-") for k in seen)
    for arrival in (turn, listing):
        assert arrival.headers["x-api-key"] == "sk-ant-credential"
        assert arrival.headers["authorization"] == "Bearer provider"
        assert arrival.headers["toolref-key"] == KEY
        for dropped in ("x-hop", "keep-alive", "proxy-authorization"):
            assert dropped not in arrival.headers
    for got in (answer, models):
        assert got.headers["x-provider"] == "yes"
        assert not any(k.startswith("toolref-") and k != "toolref-savings" for k in got.headers)
    assert "toolref-savings" in answer.headers
    assert "toolref-savings" not in models.headers


async def test_other_requests_stream_through_both_ways(redis: Redis) -> None:
    scripted = Scripted()
    providers = {"anthropic": scripted.app()}

    async def pieces() -> AsyncIterator[bytes]:
        for n in range(5):
            yield bytes([n]) * 10_000

    async with relayed(redis, providers) as stack, httpx.AsyncClient(timeout=TIMEOUT) as agent:
        answer = await agent.put(stack.relay_url + "/llm/anthropic/echo", content=pieces())
    assert answer.content == b"".join(bytes([n]) * 10_000 for n in range(5))
    assert scripted.received == [answer.content]


async def test_counters_and_metrics(redis: Redis) -> None:
    providers = {"anthropic": Scripted().app()}
    before = dict(UPLOAD_BYTES.counts)
    body = json.dumps({"model": "m", "max_tokens": 5, "messages": [_user("hi")]}).encode()
    async with relayed(redis, providers) as stack, httpx.AsyncClient(timeout=TIMEOUT) as agent:
        sent = await agent.post(
            stack.relay_url + "/llm/anthropic/v1/messages",
            content=body,
            headers={"content-type": "application/json"},
        )
        metrics = await agent.get(stack.relay_url + "/metrics", headers=control(stack))
    raw = header_lines(sent.request.headers.raw) + len(body)
    assert UPLOAD_BYTES.counts["raw"] - before.get("raw", 0) == raw
    assert UPLOAD_BYTES.counts["wire"] - before.get("wire", 0) == wire_bytes(
        stack.gateway.arrivals[0]
    )
    # The counters are the process's: past 1e6 the exposition writes 2.17e+06, so compare
    # numbers (this failed once another test had sent a megabyte first).
    [shown] = [
        line.split()[-1]
        for line in metrics.text.splitlines()
        if line.startswith('toolref_upload_bytes_total{kind="raw"}')
    ]
    assert float(shown) == float(UPLOAD_BYTES.counts["raw"])
    assert 'toolref_relay_turns_total{route="gateway"}' in metrics.text


async def test_switching_upstreams_names_the_one_left(redis: Redis) -> None:
    first, second = Scripted(), Scripted()
    providers = {"a": first.app(), "b": second.app()}
    turn = [_user("hi")]
    async with (
        relayed(redis, providers, switch=("a", "b")) as stack,
        httpx.AsyncClient(timeout=TIMEOUT) as agent,
    ):
        url = stack.relay_url + "/llm/a/v1/messages"

        async def say(messages: list[Any]) -> None:
            body = {"model": "m", "max_tokens": 5, "messages": messages}
            assert (await agent.post(url, json=body)).status_code == 200

        await say(turn)
        switched = await agent.post(
            stack.relay_url + "/toolref/switch", json={"upstream": "b"}, headers=control(stack)
        )
        assert switched.json() == {"upstreams": ["a", "b"], "selected": "b"}
        turn += [{"role": "assistant", "content": "ok"}, _user("and now?")]
        await say(turn)
        turn += [{"role": "assistant", "content": "ok"}, _user("and then?")]
        await say(turn)
        unknown = await agent.post(
            stack.relay_url + "/toolref/switch", json={"upstream": "c"}, headers=control(stack)
        )
    assert unknown.status_code == 400
    assert "a, b" in unknown.json()["error"]
    paths = [a.path for a in stack.gateway.arrivals]
    assert paths == ["/llm/a/v1/messages", "/llm/b/v1/messages", "/llm/b/v1/messages"]
    assert [a.headers.get("toolref-switched-from") for a in stack.gateway.arrivals] == [
        None,
        "a; at=2",
        "a; at=2",
    ]
    assert len(second.received) == 2
    # The gateway prepended the handoff to every turn the new upstream saw, the same way:
    # the second starts with the first (its prompt cache keeps hitting).
    one, two = (json.loads(body)["messages"] for body in second.received)
    assert one[0]["content"].startswith("[CONTEXT FROM PREVIOUS SESSION]")
    assert two[: len(one)] == one


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}
