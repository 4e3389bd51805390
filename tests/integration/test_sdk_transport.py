"""The official SDKs, unchanged, through `toolref.Transport` / `toolref.AsyncTransport`.

Over real sockets: the registry app on the test engine and the LLM-shaped backend of
examples/llm_backend.py (behind `ToolRefMiddleware`, and a plain one without it) are served
by uvicorn; the openai and anthropic clients hold the examples' streamed tool-calling
conversations (examples/openai_client.py, examples/anthropic_client.py). Only the LLM
provider is scripted. Every turn, the backend must receive exactly the body the SDK built,
byte for byte, while fewer bytes travel: the first request to an endpoint as the SDK built
it (offering edits), every later one as an edit the middleware restores through the
registry.
"""

from __future__ import annotations

import asyncio
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

from tests.support.servers import AsyncWire, Wire, edit_header, serve, serve_all
from toolref import AsyncRegistryClient, AsyncTransport, ToolReferenceManager, Transport
from toolref.edits.wire import VERSION as EDITS_VERSION
from toolref.wire.headers import EDITS_HEADER
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
    # No edit cache: the store decides what is held, so evicting keys is felt.
    service = create_app(Settings(redis_url="unused", edit_cache_bytes=0), redis=redis)
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


def _async_client(
    run: Run, before: Hook | None = None, channel: bool = False
) -> httpx2.AsyncClient:
    """An async client whose transport sends over `run.wire` (every request it sends over
    HTTP, recorded); `channel`: edits ride a channel where the receiver tells of one
    (tests/integration/test_sdk_channel.py), else all go over HTTP, to be looked at."""
    wire = AsyncWire()
    run.wire = wire.sent

    async def record(request: httpx2.Request) -> None:
        run.sdk.append(await request.aread())
        if before is not None:
            await before(request)

    return httpx2.AsyncClient(
        transport=AsyncTransport(wire, manager=run.manager, channel=channel),
        event_hooks={"request": [record]},
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
    url: str,
    run: Run,
    tasks: tuple[str, ...] = TASKS,
    before: Hook | None = None,
    channel: bool = False,
) -> Run:
    async with openai.AsyncOpenAI(
        base_url=url + "/v1",
        api_key="k",
        max_retries=0,
        timeout=TIMEOUT,
        http_client=_async_client(run, before, channel),
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
    url: str,
    run: Run,
    tasks: tuple[str, ...] = TASKS,
    before: Hook | None = None,
    channel: bool = False,
) -> Run:
    async with anthropic.AsyncAnthropic(
        base_url=url,
        api_key="k",
        max_retries=0,
        timeout=TIMEOUT,
        http_client=_async_client(run, before, channel),
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
    assert received == run.sdk  # byte for byte


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


def assert_later_requests_were_edits(run: Run) -> None:
    """The first request went as the SDK built it, offering edits (nothing is kept of it);
    the second as an edit with no base (its segments inline, each compressed alone), every
    later one as an edit of the recipe the backend confirmed, in fewer than half the SDK's
    bytes."""
    first = run.wire[0]
    assert edit_header(first) is None
    assert first.headers[EDITS_HEADER] == str(EDITS_VERSION)
    assert first.read() == run.sdk[0]
    headers = [edit_header(wire) for wire in run.wire[1:]]
    assert all(header is not None for header in headers)
    assert [header["b"] is not None for header in headers if header] == [False] + [True] * (
        len(run.sdk) - 2
    )
    for sdk, wire in zip(run.sdk[2:], run.wire[2:], strict=True):
        assert len(wire.read()) < len(sdk) / 2
    assert run.manager.savings.edits == len(run.sdk) - 1
    assert run.manager.savings.resends == 0


@pytest.mark.parametrize("client", CLIENTS.values(), ids=CLIENTS.keys())
async def test_each_sdk_streams_through_the_transport_as_edits(
    stack: Stack, client: Client
) -> None:
    run = await client(stack.url, Run(ToolReferenceManager()))
    assert_received_what_the_sdk_sent(run, stack.app)
    assert_the_model_read_every_result(run)
    assert_later_requests_were_edits(run)


@pytest.mark.parametrize(
    "client", [openai_async, anthropic_sync], ids=["openai.AsyncOpenAI", "anthropic.Anthropic"]
)
async def test_edits_compressed_across_the_conversation_arrive_the_same(
    stack: Stack, client: Client
) -> None:
    """`size_guard=False` (a link whose sizes no one else sees): new segments compressed
    together against the base (edits of version 1), restored as exactly."""
    run = await client(stack.url, Run(ToolReferenceManager(size_guard=False)))
    assert_received_what_the_sdk_sent(run, stack.app)
    assert_the_model_read_every_result(run)
    assert_later_requests_were_edits(run)
    headers = [edit_header(wire) for wire in run.wire[1:]]
    assert {header["v"] for header in headers if header is not None} == {1}


@pytest.mark.parametrize(
    "client", [openai_sync, anthropic_async], ids=["openai.OpenAI", "anthropic.AsyncAnthropic"]
)
async def test_a_plain_backend_gets_the_sdks_requests(stack: Stack, client: Client) -> None:
    """A backend without the middleware never answers `Toolref-Edits`: every request goes
    as the SDK built it (the offer aside, a header it ignores)."""
    run = await client(stack.plain_url, Run(ToolReferenceManager()))
    assert_received_what_the_sdk_sent(run, stack.plain_app)
    assert_the_model_read_every_result(run)
    assert run.manager.savings.edits == 0
    assert [request.read() for request in run.wire] == run.sdk
    assert all(request.headers[EDITS_HEADER] == str(EDITS_VERSION) for request in run.wire)
    assert all("content-encoding" not in request.headers for request in run.wire)


async def test_evicted_recipes_are_resent_before_the_sdk_sees_a_409(stack: Stack) -> None:
    run = Run(ToolReferenceManager())

    async def evict_before_the_fifth_request(request: httpx2.Request) -> None:
        if len(run.sdk) == 5:
            recipes = [n for n in await key_names(stack.redis) if n.split(":")[2] in "bkp"]
            assert recipes
            await stack.redis.delete(*recipes)

    await openai_async(stack.url, run, before=evict_before_the_fifth_request)
    assert_received_what_the_sdk_sent(run, stack.app)
    # The fifth request was an edit of a recipe the registry no longer held (409
    # missing-history); sent again with no base, it went through. The SDK saw one answer.
    fifth = [edit_header(request) for request in run.wire[4:6]]
    assert fifth[0] is not None
    assert fifth[0]["b"] is not None
    assert fifth[1] is not None
    assert fifth[1]["b"] is None
    assert run.manager.savings.resends == 1
    assert len(run.wire) == len(run.sdk) + 1
    last = edit_header(run.wire[-1])
    assert last is not None
    assert last["b"] is not None  # a recipe confirmed again, edited against


async def test_a_token_count_rides_the_path_of_its_messages(stack: Stack) -> None:
    """`/v1/messages/count_tokens` carries the conversation `/v1/messages` would, and is in
    the one endpoint table (toolref.wire.endpoints): the transport offers edits on it (an
    endpoint of its own), then sends edits, and the backend (behind the middleware) counts
    exactly the SDK's body."""
    run = Run(ToolReferenceManager())
    await anthropic_async(stack.url, run, TASKS[:1])
    stack.app.state.provider.requests.clear()
    messages = [{"role": "user", "content": "read README.md " + "please " * 200}]
    async with anthropic.AsyncAnthropic(
        base_url=stack.url,
        api_key="k",
        max_retries=0,
        timeout=TIMEOUT,
        http_client=_async_client(run),
    ) as client:
        for _ in range(2):
            count = await client.messages.count_tokens(model="m", messages=messages)  # type: ignore[arg-type]
            assert count.input_tokens > 0
    received = stack.app.state.provider.bodies()
    assert received == run.sdk[-2:]
    first, second = run.wire  # the new client's
    assert edit_header(first) is None
    assert first.headers[EDITS_HEADER] == str(EDITS_VERSION)
    assert edit_header(second) is not None


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
    assert received == run.sdk
    assert edit_header(run.wire[0]) is None
    assert edit_header(run.wire[1]) is not None
    assert len(run.wire[1].read()) < len(run.sdk[1]) / 2
    assert edit_header(run.wire[-1]) is not None  # a string `input` is an edit as well


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
    assert stack.app.state.provider.bodies() == sent
    assert manager.savings.edits == len(sent) - 1
    assert manager.savings.resends == 0


def test_an_inner_transport_of_the_other_httpx_is_refused() -> None:
    with (
        httpx2.Client(transport=Transport(httpx.HTTPTransport())) as client,
        pytest.raises(TypeError, match=r"inner=httpx2\.HTTPTransport\(\)"),
    ):
        client.post("http://127.0.0.1:9/v1/chat/completions", json={"messages": []})


async def test_a_json_answer_reaches_the_sdk_as_the_app_wrote_it(stack: Stack) -> None:
    """Not streamed: the answer to an edit is the app's, its body untouched (no
    `toolReferences` added to it), the edit's marks in headers the SDK ignores."""
    run = Run(ToolReferenceManager())
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
            raw = await client.chat.completions.with_raw_response.create(
                model="m", messages=history
            )
            assert b"toolReferences" not in raw.http_response.content
            completion = raw.parse()
            history.append(completion.choices[0].message.to_dict())
            history.append({"role": "user", "content": "and then?"})
    assert raw.headers["toolref-history"].startswith("tb_")
    assert [edit_header(r) is not None for r in run.wire] == [False, True]
    assert stack.app.state.provider.bodies() == run.sdk
