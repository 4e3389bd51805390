"""The official SDKs, unchanged, through `toolref.Transport` / `toolref.AsyncTransport`.

Over real sockets: the registry app on the test engine and the LLM-shaped backend of
examples/llm_backend.py (behind `ToolRefMiddleware`, and a plain one without it) are served
by uvicorn; the openai and anthropic clients hold the examples' streamed tool-calling
conversations (examples/openai_client.py, examples/anthropic_client.py). Only the LLM
provider is scripted. Every turn, the backend must receive exactly the body the SDK built,
while fewer bytes travel.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from examples import anthropic_client, openai_client
from examples.llm_backend import create_backend
from redis.asyncio import Redis
from starlette.applications import Starlette

from tests.support.servers import AsyncWire, Wire, history_ref, markers, serve, serve_all, wire_body
from toolref import AsyncRegistryClient, AsyncTransport, ToolReferenceManager, Transport
from toolref_server.app import create_app
from toolref_server.settings import Settings

from ..conftest import key_names

# A net for a hang, not a timing check: a buffered stream never shows its first event.
TIMEOUT = 30
TASKS = openai_client.TASKS[:3]


@dataclass
class Stack:
    url: str  # the backend behind the middleware
    app: Starlette
    plain_url: str  # the same backend without it
    plain_app: Starlette
    redis: Redis


@pytest.fixture
async def stack(redis: Redis) -> AsyncIterator[Stack]:
    service = create_app(Settings(redis_url="unused"), redis=redis)
    async with serve(service) as registry_url:
        registry = AsyncRegistryClient(registry_url, retries=0)
        app, plain = create_backend(registry, delay=0.001), create_backend(None, delay=0.001)
        async with serve_all(app, plain) as [url, plain_url]:
            yield Stack(url, app, plain_url, plain, redis)
        await registry.aclose()


@dataclass
class Run:
    """One conversation: the bodies the SDK built, the requests sent, and the manager."""

    manager: ToolReferenceManager
    sdk: list[bytes] = field(default_factory=list)
    wire: list[httpx2.Request] = field(default_factory=list)
    messages: list[Any] = field(default_factory=list)


def _sync_client(run: Run) -> httpx2.Client:
    wire = Wire()
    run.wire = wire.sent
    return httpx2.Client(
        transport=Transport(wire, manager=run.manager),
        event_hooks={"request": [lambda r: run.sdk.append(r.read())]},
    )


Hook = Callable[[httpx2.Request], Awaitable[None]]


def _async_client(run: Run, before: Hook | None = None) -> httpx2.AsyncClient:
    wire = AsyncWire()
    run.wire = wire.sent

    async def record(request: httpx2.Request) -> None:
        run.sdk.append(await request.aread())
        if before is not None:
            await before(request)

    return httpx2.AsyncClient(
        transport=AsyncTransport(wire, manager=run.manager), event_hooks={"request": [record]}
    )


async def openai_sync(url: str, run: Run, tasks: tuple[str, ...] = TASKS) -> Run:
    def converse() -> None:
        with openai.OpenAI(
            base_url=url + "/v1",
            api_key="k",
            max_retries=0,
            timeout=TIMEOUT,
            http_client=_sync_client(run),
        ) as client:
            run.messages = list(openai_client.converse(client, tasks))

    await asyncio.to_thread(converse)
    return run


async def openai_async(
    url: str, run: Run, tasks: tuple[str, ...] = TASKS, before: Hook | None = None
) -> Run:
    async with openai.AsyncOpenAI(
        base_url=url + "/v1",
        api_key="k",
        max_retries=0,
        timeout=TIMEOUT,
        http_client=_async_client(run, before),
    ) as client:
        run.messages = list(await openai_client.aconverse(client, tasks))
    return run


async def anthropic_sync(url: str, run: Run, tasks: tuple[str, ...] = TASKS) -> Run:
    def converse() -> None:
        with anthropic.Anthropic(
            base_url=url, api_key="k", max_retries=0, timeout=TIMEOUT, http_client=_sync_client(run)
        ) as client:
            run.messages = list(anthropic_client.converse(client, tasks))

    await asyncio.to_thread(converse)
    return run


async def anthropic_async(
    url: str, run: Run, tasks: tuple[str, ...] = TASKS, before: Hook | None = None
) -> Run:
    async with anthropic.AsyncAnthropic(
        base_url=url,
        api_key="k",
        max_retries=0,
        timeout=TIMEOUT,
        http_client=_async_client(run, before),
    ) as client:
        run.messages = list(await anthropic_client.aconverse(client, tasks))
    return run


Client = Callable[..., Any]
CLIENTS = {
    "openai.OpenAI": openai_sync,
    "openai.AsyncOpenAI": openai_async,
    "anthropic.Anthropic": anthropic_sync,
    "anthropic.AsyncAnthropic": anthropic_async,
}


def assert_received_what_the_sdk_sent(run: Run, app: Starlette) -> None:
    received = app.state.provider.bodies()
    assert len(received) == len(run.sdk) == 2 * len(TASKS)  # a tool call and an answer each
    for sent, got in zip(run.sdk, received, strict=True):
        assert json.loads(got) == json.loads(sent)
        assert json.dumps(json.loads(got)) == json.dumps(json.loads(sent))  # key order too


def assert_the_model_read_every_result(run: Run) -> None:
    """The scripted model answers with the length of the tool result it was given: the
    backend had each payload in full, whatever travelled."""
    answers = [m for m in run.messages if m["role"] == "assistant" and _text(m)]
    expected = [
        f"The tool returned {len(_result(m))} characters."
        for m in run.messages
        if m["role"] == "tool" or (m["role"] == "user" and isinstance(m["content"], list))
    ]
    assert [_text(m) for m in answers] == expected
    assert len(expected) == len(TASKS)


def _text(message: Any) -> str:
    content = message["content"]
    if isinstance(content, list):  # anthropic content blocks, as the SDK returned them
        return "".join(getattr(block, "text", "") for block in content)
    return str(content or "")


def _result(message: Any) -> str:
    if message["role"] == "tool":
        return str(message["content"])
    [block] = message["content"]
    return str(block["content"])


@pytest.mark.parametrize("client", CLIENTS.values(), ids=CLIENTS.keys())
async def test_each_sdk_streams_through_the_transport_with_history_refs(
    stack: Stack, client: Client
) -> None:
    run = await client(stack.url, Run(ToolReferenceManager()))
    assert_received_what_the_sdk_sent(run, stack.app)
    assert_the_model_read_every_result(run)
    # The first request travels whole; every later one continues the history the backend
    # confirmed, as its new messages only, zstd against that history: fewer bytes.
    assert history_ref(run.wire[0]) is None
    for sdk, wire in zip(run.sdk[1:], run.wire[1:], strict=True):
        assert history_ref(wire) is not None
        assert wire.headers["content-encoding"] == "zstd"
        assert len(wire.read()) < len(sdk) / 2
    assert run.manager.savings.histories_used == len(run.sdk) - 1
    assert run.manager.savings.fallbacks == 0


@pytest.mark.parametrize(
    "client", [openai_async, anthropic_sync], ids=["openai.AsyncOpenAI", "anthropic.Anthropic"]
)
async def test_tool_refs_alone_travel_as_markers(stack: Stack, client: Client) -> None:
    """Without history refs, payloads the backend confirmed (in the event stream's
    `Toolref-References` header) travel as `toolRef` markers."""
    run = await client(stack.url, Run(ToolReferenceManager(history_refs=False)))
    assert_received_what_the_sdk_sent(run, stack.app)
    assert_the_model_read_every_result(run)
    wire = [wire_body(r) for r in run.wire]
    assert all(history_ref(r) is None for r in run.wire)
    assert all("historyRef" not in body for body in wire)
    # Each task adds one invocation; from the next request on, it travels as two markers.
    assert [markers(b) for b in wire] == [0, 0, 2, 2, 4, 4]
    assert run.manager.savings.refs_sent == 1 + 1 + 2 + 2


@pytest.mark.parametrize(
    "client", [openai_sync, anthropic_async], ids=["openai.OpenAI", "anthropic.AsyncAnthropic"]
)
async def test_a_plain_backend_gets_the_sdks_requests(stack: Stack, client: Client) -> None:
    run = await client(stack.plain_url, Run(ToolReferenceManager()))
    assert_received_what_the_sdk_sent(run, stack.plain_app)
    assert_the_model_read_every_result(run)
    assert not run.manager.refs_accepted
    for request in run.wire:
        assert "content-encoding" not in request.headers
        assert history_ref(request) is None
        body = wire_body(request)
        assert markers(body) == 0
        assert "historyRef" not in body


async def test_evicted_histories_and_refs_are_resent_before_the_sdk_sees_a_409(
    stack: Stack,
) -> None:
    run = Run(ToolReferenceManager())

    async def evict_before_the_fifth_request(request: httpx2.Request) -> None:
        if len(run.sdk) == 5:
            nodes = [n for n in await key_names(stack.redis) if ":h:" in n or ":i:" in n]
            await stack.redis.delete(*nodes)

    await openai_async(stack.url, run, before=evict_before_the_fifth_request)
    assert_received_what_the_sdk_sent(run, stack.app)
    # The fifth request continued a history the registry no longer held (409
    # missing-history); sent whole, its confirmed payloads as refs, those were missing too
    # (409 missing-refs); sent with them in full, it went through. The SDK saw one answer.
    fifth = run.wire[4:7]
    assert history_ref(fifth[0]) is not None
    assert [markers(wire_body(r)) for r in fifth[1:]] == [4, 0]
    assert run.manager.savings.fallbacks == 2
    assert len(run.wire) == len(run.sdk) + 2
    assert history_ref(run.wire[-1]) is not None  # the history confirmed again, continued


async def test_a_token_count_rides_the_path_of_its_messages(stack: Stack) -> None:
    """`/v1/messages/count_tokens` carries the conversation `/v1/messages` would, and is in
    the one endpoint table the gateway hydrates (toolref.wire.endpoints): the transport sends
    it as protocol 2, its confirmed payloads as refs, and the backend (behind the
    middleware) counts exactly the SDK's body. Before, the transport passed counts through
    whole while the gateway hydrated them."""
    run = Run(ToolReferenceManager())
    await anthropic_async(stack.url, run, TASKS[:1])
    stack.app.state.provider.requests.clear()
    messages = [{"role": "user", "content": "read README.md"}]
    async with anthropic.AsyncAnthropic(
        base_url=stack.url,
        api_key="k",
        max_retries=0,
        timeout=TIMEOUT,
        http_client=_async_client(run),
    ) as client:
        count = await client.messages.count_tokens(model="m", messages=messages)  # type: ignore[arg-type]
    assert count.input_tokens > 0
    [received] = stack.app.state.provider.bodies()
    assert json.loads(received) == json.loads(run.sdk[-1])
    assert run.wire[-1].headers["toolref-protocol"] == "2"


async def test_the_responses_api_with_its_input_items(stack: Stack) -> None:
    run = Run(ToolReferenceManager())
    tools: Any = [{"type": "function", "name": "read_file", "parameters": {"type": "object"}}]
    async with openai.AsyncOpenAI(
        base_url=stack.url + "/v1",
        api_key="k",
        max_retries=0,
        timeout=TIMEOUT,
        http_client=_async_client(run),
    ) as client:
        items: list[Any] = [{"role": "user", "content": "read README.md"}]
        for _ in range(2):
            events = await client.responses.create(model="m", input=items, tools=tools, stream=True)
            async for event in events:
                if event.type == "response.output_item.done":
                    items.append(event.item.to_dict())
            call = items[-1]
            assert call["type"] == "function_call"
            output = openai_client.run_tool("read_file", call["arguments"])
            items.append(
                {"type": "function_call_output", "call_id": call["call_id"], "output": output}
            )
            items.append({"role": "user", "content": "read docs/sdk.md"})
        # An `input` string has no items to rewrite: it passes through as the SDK wrote it.
        await client.responses.create(model="m", input="hello")
    received = stack.app.state.provider.bodies()
    for sent, got in zip(run.sdk, received, strict=True):
        assert json.dumps(json.loads(got)) == json.dumps(json.loads(sent))
    assert history_ref(run.wire[1]) is not None
    assert len(run.wire[1].read()) < len(run.sdk[1]) / 2
    assert received[-1] == run.sdk[-1] == run.wire[-1].read()


async def test_openai_on_a_legacy_httpx_client(stack: Stack) -> None:
    """openai 3 also takes an `httpx.Client`: the same transport serves it."""
    manager = ToolReferenceManager()
    sent: list[bytes] = []

    def converse() -> list[Any]:
        http = httpx.Client(
            transport=Transport(manager=manager),
            event_hooks={"request": [lambda r: sent.append(r.read())]},
        )
        with openai.OpenAI(
            base_url=stack.url + "/v1",
            api_key="k",
            max_retries=0,
            timeout=TIMEOUT,
            http_client=http,  # type: ignore[arg-type]  # typed httpx2.Client, takes both
        ) as client:
            return list(openai_client.converse(client, TASKS[:2]))

    await asyncio.to_thread(converse)
    received = stack.app.state.provider.bodies()
    assert [json.loads(r) for r in received] == [json.loads(s) for s in sent]
    assert manager.savings.histories_used == len(sent) - 1


def test_an_inner_transport_of_the_other_httpx_is_refused() -> None:
    with (
        httpx2.Client(transport=Transport(httpx.HTTPTransport())) as client,
        pytest.raises(TypeError, match=r"inner=httpx2\.HTTPTransport\(\)"),
    ):
        client.post("http://127.0.0.1:9/v1/chat/completions", json={"messages": []})


async def test_a_json_answer_teaches_its_tool_references_as_the_sdk_reads_it(
    stack: Stack,
) -> None:
    """Not streamed: the middleware lists the refs in the JSON body (`toolReferences`), which
    the transport reads over the SDK's shoulder, so the next request sends markers."""
    run = Run(ToolReferenceManager(history_refs=False))
    history: Any = [
        {"role": "user", "content": "read README.md"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "README.md"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "x = 1\n" * 300},
    ]
    async with openai.AsyncOpenAI(
        base_url=stack.url + "/v1",
        api_key="k",
        max_retries=0,
        timeout=TIMEOUT,
        http_client=_async_client(run),
    ) as client:
        for _ in range(2):
            completion = await client.chat.completions.create(model="m", messages=history)
            history.append(completion.choices[0].message.to_dict())
            history.append({"role": "user", "content": "and then?"})
    assert len(run.manager.confirmed) == 1
    assert [markers(wire_body(r)) for r in run.wire] == [0, 2]
    received = [json.loads(r) for r in stack.app.state.provider.bodies()]
    assert received == [json.loads(s) for s in run.sdk]
