"""The client reads every answer through its wire model: an answer off the model is an
`UnexpectedResponseError` naming the model and the first problem, never a `KeyError`, a
pydantic error, or a value taken as something it is not.

Before answers were read through the models, each of these went wrong its own way: a
register answer without `size` raised a pydantic `ValidationError`, a resolve answer without
`missing` a `KeyError`, a findMissing answer whose `missing` is one string was taken as a
list of its characters, and a hydrate answer without its stats came back with empty stats.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from toolref.registry.answers import HydratedText, MessagesResult
from toolref.registry.client import AsyncRegistryClient, RegistryClient
from toolref.wire import encoding
from toolref.wire.errors import UnexpectedResponseError
from toolref.wire.models import MessagesResponse

from .test_client import (
    BASE,
    FIND_MISSING,
    MESSAGES,
    REGISTER,
    RESOLVE,
    Api,
    FakeRegistry,
    MakeApi,
    async_transport,
    invocation,
    make_api,  # noqa: F401 - the fixture
    ref_number,
    sleeps,  # noqa: F401 - the fixture
    sync_transport,
)

STATS = {"originalBytes": 10, "optimizedBytes": 5, "refsUsed": 1, "newRefs": 0, "cacheHits": 1}
HYDRATE = "/v1/messages:hydrate"


def answer(body: Any) -> httpx.Response:
    return httpx.Response(
        200, content=encoding.dumps_json(body), headers={"content-type": encoding.JSON_TYPE}
    )


def messages(**members: Any) -> dict[str, Any]:
    return {"format": "openai-chat", "messages": MESSAGES, "optimizationStats": STATS, **members}


Call = Callable[[Api], Awaitable[Any]]
# (path, answer, the call, the model it is read as, where the first problem is)
OFF_THE_MODEL: dict[str, tuple[str, Any, Call, str, str]] = {
    "register without size": (
        REGISTER,
        {"refs": [{"ref": ref_number(1), "new": True}]},
        lambda api: api.register([invocation(1)]),
        "RegisterResponse",
        "/refs/0/size",
    ),
    "findMissing as one string": (
        FIND_MISSING,
        {"missing": ref_number(1)},
        lambda api: api.find_missing([ref_number(1)]),
        "FindMissingResponse",
        "/missing",
    ),
    "resolve without missing": (
        RESOLVE,
        {"invocations": {}},
        lambda api: api.resolve([ref_number(1)]),
        "ResolveResponse",
        "/missing",
    ),
    "get, not an invocation": (
        f"/v1/invocations/{ref_number(1)}",
        {"name": "t", "args": {}},
        lambda api: api.get(ref_number(1)),
        "Invocation",
        "/result",
    ),
    "hydrate without stats": (
        HYDRATE,
        {"format": "openai-chat", "messages": MESSAGES},
        lambda api: api.hydrate(MESSAGES),
        "MessagesResponse",
        "/optimizationStats",
    ),
    "hydrate with malformed tool references": (
        HYDRATE,
        messages(toolReferences={"c1": 5}),
        lambda api: api.hydrate(MESSAGES),
        "MessagesResponse",
        "/toolReferences/c1",
    ),
}


@pytest.mark.parametrize("case", list(OFF_THE_MODEL))
async def test_an_answer_off_its_model_is_an_unexpected_response(
    make_api: MakeApi,  # noqa: F811
    case: str,
) -> None:
    path, body, call, model, where = OFF_THE_MODEL[case]
    server = FakeRegistry()
    server.script(path, answer(body))
    api = make_api(server)
    with pytest.raises(UnexpectedResponseError) as info:
        await call(api)
    assert info.value.extra["httpStatus"] == 200
    assert f"not a toolref {model} " in info.value.detail
    assert f"first: {where}:" in info.value.detail
    assert BASE in info.value.detail


async def test_messages_results_are_what_the_model_reads(make_api: MakeApi) -> None:  # noqa: F811
    server = FakeRegistry()
    members = {"toolReferences": {"c1": ref_number(1)}, "later": 1}
    server.script(HYDRATE, answer(messages(**members)))
    result = await make_api(server).hydrate(MESSAGES)
    assert result == MessagesResult("openai-chat", MESSAGES, {"c1": ref_number(1)}, STATS)
    assert result == MessagesResult.of(MessagesResponse.model_validate(messages(**members)))


def hydrated_text(**members: Any) -> str:
    """A hydrate answer as the registry writes it, its messages first as text."""
    rest = encoding.dumps_json(messages(**members))[1:].decode()
    return '{"messages":[{"role":"user","content":"hi"}],' + rest


def test_hydrated_text_reads_every_member_but_the_messages_through_the_model() -> None:
    text = hydrated_text(toolReferences={"c1": ref_number(1)})
    read = HydratedText.of(text)
    assert read.messages_text == '[{"role":"user","content":"hi"}]'
    assert (read.format, read.tool_references) == ("openai-chat", {"c1": ref_number(1)})
    for members in (
        {"toolReferences": {"c1": 5}},
        {"format": "not-a-format"},
        {"optimizationStats": None},
    ):
        with pytest.raises(ValueError, match="not a hydrate answer"):
            HydratedText.of(hydrated_text(**members))
    with pytest.raises(ValueError, match="not an array"):
        HydratedText.of(text.replace('[{"role":"user","content":"hi"}]', '"hi"'))


def test_hydrate_text_answers_off_the_model_are_unexpected_responses() -> None:
    server = FakeRegistry()
    server.script(HYDRATE, answer(messages(toolReferences={"c1": 5})))
    with (
        RegistryClient(BASE, transport=sync_transport(server)) as client,
        pytest.raises(UnexpectedResponseError, match="toolReferences"),
    ):
        client.hydrate_text('[{"role":"user","content":"hi"}]')


async def test_async_hydrate_text_answers_off_the_model_are_unexpected_responses() -> None:
    server = FakeRegistry()
    server.script(HYDRATE, answer(messages(format="not-a-format")))
    async with AsyncRegistryClient(BASE, transport=async_transport(server)) as client:
        with pytest.raises(UnexpectedResponseError, match="format"):
            await client.hydrate_text('[{"role":"user","content":"hi"}]')
