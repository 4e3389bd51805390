"""Misuses that failed late (an AttributeError inside httpx or
a server, a coroutine never awaited), silently (an option read as true, a path never
matched, an object put in a message), and now fails where it is made, naming the fix."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from toolref import (
    AcpError,
    AsyncRegistryClient,
    AsyncTransport,
    RegistryClient,
    ToolBuffer,
    ToolCallTracker,
    ToolReferenceManager,
    ToolRefMiddleware,
    Transport,
    ValidationError,
    formats,
    handoff,
    rewrite,
)
from toolref.asgi.budget import Budget

URL = "http://backend.test/chat"
BODY: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}


def _refused(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"a misuse cost a request: {request.url}")


def test_a_transport_wrapping_a_transport_is_refused() -> None:
    with pytest.raises(TypeError, match=r"inner is a toolref Transport already.*Transport\(\)"):
        Transport(Transport())  # a Transport is an httpx transport: only the check sees it
    with pytest.raises(TypeError, match="inner is a toolref AsyncTransport already"):
        AsyncTransport(AsyncTransport())


def test_a_transport_of_the_wrong_kind_for_its_client_says_which_to_use() -> None:
    client = httpx.Client(transport=AsyncTransport())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"give that client a toolref\.Transport\(\)"):
        client.post(URL, json=BODY)
    with (
        pytest.raises(TypeError, match=r"toolref\.Transport"),
        httpx.Client(transport=AsyncTransport()),  # type: ignore[arg-type]
    ):
        pass

    async def sync_in_async() -> None:
        client = httpx.AsyncClient(transport=Transport())  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"give that client a toolref.AsyncTransport\(\)"):
            await client.post(URL, json=BODY)
        with pytest.raises(TypeError, match=r"toolref\.AsyncTransport"):
            async with httpx.AsyncClient(transport=Transport()):  # type: ignore[arg-type]
                pass

    asyncio.run(sync_in_async())


def test_post_and_apost_refuse_the_other_kind_of_client() -> None:
    manager = ToolReferenceManager()

    async def both() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(_refused)) as client:
            with pytest.raises(TypeError, match=r"async client \(AsyncClient\).*manager.apost"):
                manager.post(client, URL, json=BODY)  # type: ignore[arg-type]
        sync = httpx.Client(transport=httpx.MockTransport(_refused))
        with pytest.raises(TypeError, match=r"sync client \(Client\).*manager.post"), sync:
            await manager.apost(sync, URL, json=BODY)  # type: ignore[arg-type]

    asyncio.run(both())
    with pytest.raises(TypeError, match=r"client is the httpx\.Client to send through"):
        manager.post("http://backend.test", URL, json=BODY)  # type: ignore[arg-type]


def test_a_body_without_a_json_form_is_a_validation_error_naming_the_fix() -> None:
    body = {"messages": [{"role": "user", "content": "hi", "at": datetime.date(2025, 1, 1)}]}
    client = httpx.Client(transport=httpx.MockTransport(_refused))
    with pytest.raises(ValidationError, match=r"json is not JSON-serializable.*date"), client:
        ToolReferenceManager().post(client, URL, json=body)


async def _app(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("not called")


def _wsgi(environ: Any, start_response: Any) -> list[bytes]:
    return []


@pytest.mark.parametrize(
    ("app", "options", "error", "says"),
    [
        (None, {}, TypeError, "app must be an ASGI app"),
        (Starlette, {}, TypeError, r"app is the class Starlette.*Starlette\(\.\.\.\)"),
        (_wsgi, {}, TypeError, "as a WSGI app .* does, but ToolRefMiddleware is ASGI"),
        (_app, {"max_inflated_bytes": 0}, ValueError, "max_inflated_bytes must be >= 1"),
        (_app, {"alter_answers": "no"}, TypeError, "alter_answers must be True or False"),
        (_app, {"offload_bytes": -1}, ValueError, "offload_bytes must be >= 0"),
        (_app, {"budget": 1000}, TypeError, r"not 1000: .*budget=Budget\(<bytes>\)"),
        (_app, {"paths": ["chat"]}, ValueError, "paths holds 'chat'.*paths={'/chat'}"),
        (_app, {"held_bytes": -1}, ValueError, "held_bytes must be >= 0"),
    ],
)
def test_the_middleware_refuses_an_app_or_option_that_cannot_work(
    app: Any, options: dict[str, Any], error: type[Exception], says: str
) -> None:
    registry = AsyncRegistryClient("http://registry.test", transport=httpx.MockTransport(_refused))
    with pytest.raises(error, match=says):
        ToolRefMiddleware(app, registry, **options)
    ToolRefMiddleware(_app, registry, paths={"/chat"}, budget=Budget(2**30), offload_bytes=0)


def test_prepend_takes_the_block_text_not_the_handoff() -> None:
    messages = [{"role": "user", "content": "go on"}]
    built = handoff.build([], "openai-chat")
    with pytest.raises(TypeError, match=r"not a Handoff: prepend\(messages, handoff.block, fmt\)"):
        handoff.prepend(messages, built, "openai-chat")  # type: ignore[arg-type]
    assert handoff.prepend(messages, built.block, "openai-chat")[0]["content"].endswith("go on")


def test_rewrite_takes_a_format_and_a_collection_of_refs() -> None:
    with pytest.raises(TypeError, match=r"toolref.formats.get\('openai-chat'\)"):
        rewrite([], "openai-chat", set())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="usable is a collection of refs, not the str"):
        rewrite([], formats.get("openai-chat"), "tr_x")


def test_a_registry_client_given_a_client_as_transport_says_what_it_is() -> None:
    with httpx.Client() as client, pytest.raises(TypeError, match="not a Client"):
        RegistryClient("http://registry.test", transport=client)  # type: ignore[arg-type]


def test_a_tool_buffer_fed_a_raw_event_names_the_adapter() -> None:
    for event in ({"index": 0}, 'data: {"choices": []}'):
        with pytest.raises(TypeError, match=r"ToolChunk, not a .*adapter_for\('openai_chat'\)"):
            ToolBuffer().feed(event)  # type: ignore[arg-type]


def test_a_tracker_refuses_one_item_for_a_list_and_options_that_cannot_work() -> None:
    tracker = ToolCallTracker("s")
    with pytest.raises(AcpError, match=r"content is a list of items, not one str.*text_content"):
        tracker.start("c1", "read", content="hello")  # type: ignore[arg-type]
    one: Any = {"path": "/a.py"}
    with pytest.raises(AcpError, match="locations is a list of items, not one dict"):
        tracker.start("c1", "read", locations=one)
    assert tracker.start("c1", "read")  # the id stayed free
    with pytest.raises(AcpError, match="not a number of seconds"):
        ToolCallTracker("s", window="1")  # type: ignore[arg-type]
    with pytest.raises(AcpError, match=r"sink .* is not callable"):
        ToolCallTracker("s", sink=[])  # type: ignore[arg-type]
