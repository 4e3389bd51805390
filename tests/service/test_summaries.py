"""GET /v1/invocations/{ref}/summary and the summary cache, in-process on a real engine.

The openai-compatible summarizer talks to a stub behind `httpx.MockTransport` (injected with
`create_app(llm_transport=...)`) that records every request, so each test can count model calls
and read the prompt the model was given.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from toolref.kit import extractive
from toolref.kit.kinds import KindTable
from toolref.kit.placeholder import parse
from toolref.wire.canonical import digest_of
from toolref_server.app import create_app
from toolref_server.registry.summarizers import PROMPTS
from toolref_server.settings import Settings

from ..conftest import Api, key_names

LLM_URL = "http://llm.test/v1"
MODEL = "stub-model"
ANSWER = "read_file src/app.py: 300 numbered lines; nothing failed."
LLM = "openai-compatible"
EXTRACTIVE = "extractive"

# 300 lines of 10 characters: 3000 characters, so a 1000-character model input keeps the
# first and last 500 and omits the 2000 between.
LINES = "".join(f"line {i:04d}\n" for i in range(300))
READ = {"name": "read_file", "args": {"path": "src/app.py"}, "result": LINES}
FAILED_BUILD = {
    "name": "bash",
    "args": {"cmd": "make build"},
    "result": "make: *** No rule to make target 'build'.  Stop.\n" * 20,
    "isError": True,
}
KINDS = KindTable.parse("")


def llm_id(max_chars: int) -> str:
    return f"{LLM}:{MODEL}:v1:{max_chars}"


def summary_key(ref: str, summarizer_id: str, tenant: str = "local") -> str:
    return f"tr:{tenant}:s:{ref.removeprefix('tr_')}:{summarizer_id}"


def completion(content: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }


@dataclass
class Stub:
    """An OpenAI-compatible endpoint: answers `answer`, or fails as configured; records requests."""

    answer: str = ANSWER
    status: int = 200
    body: bytes | None = None  # sent as is instead of a chat completion
    error: Exception | None = None  # raised instead of answering (a transport failure)
    delay: float = 0.0
    requests: list[httpx.Request] = field(default_factory=list)

    @property
    def calls(self) -> int:
        return len(self.requests)

    def payload(self, index: int = -1) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(self.requests[index].content)
        return body

    def heal(self) -> None:
        self.status, self.body, self.error, self.answer = 200, None, None, ANSWER

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        if self.body is not None:
            return httpx.Response(
                self.status, content=self.body, headers={"Content-Type": "application/json"}
            )
        return httpx.Response(self.status, json=completion(self.answer))


Build = Callable[..., Awaitable[httpx.AsyncClient]]


@pytest.fixture
async def build(redis: Redis) -> AsyncIterator[Build]:
    """The app on the test engine with the openai-compatible summarizer offered: requests to
    the model go to `stub` (or, without one, over the network to `llm_base_url`)."""
    async with AsyncExitStack() as stack:

        async def make(
            stub: Stub | None = None, headers: dict[str, str] | None = None, **settings: Any
        ) -> httpx.AsyncClient:
            config = Settings(
                **{
                    "redis_url": "unused",
                    "llm_base_url": LLM_URL,
                    "llm_model": MODEL,
                    "llm_api_key": "sk-stub",
                    "llm_input_chars": 1000,
                    **settings,
                }
            )
            transport = httpx.MockTransport(stub.handle) if stub is not None else None
            app = create_app(config, redis=redis, llm_transport=transport)
            await stack.enter_async_context(app.router.lifespan_context(app))
            client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://localhost:8750",
                headers={"Toolref-Protocol": "2", **(headers or {})},
                timeout=30,
            )
            await stack.enter_async_context(client)
            return client

        yield make


@pytest.fixture
def stub() -> Stub:
    return Stub()


@pytest.fixture
async def llm_api(build: Build, stub: Stub) -> httpx.AsyncClient:
    return await build(stub)


async def register(api: httpx.AsyncClient, invocation: dict[str, Any]) -> str:
    response = await api.post("/v1/invocations", json={"invocations": [invocation]})
    assert response.status_code == 200, response.text
    ref: str = response.json()["refs"][0]["ref"]
    return ref


async def get_summary(api: httpx.AsyncClient, ref: str, **params: Any) -> dict[str, Any]:
    response = await api.get(f"/v1/invocations/{ref}/summary", params=params)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    assert set(answer) == {"summarizer", "summary", "cached", "fallback"}
    return answer


async def summary_keys(redis: Redis, ref: str) -> list[str]:
    return [k for k in await key_names(redis) if k.startswith(summary_key(ref, ""))]


# --- extractive -------------------------------------------------------------------------------


async def test_extractive_summary_is_computed_once_then_served_from_the_cache(
    api: httpx.AsyncClient, redis: Redis
) -> None:
    ref = await register(api, READ)
    first = await get_summary(api, ref, summarizer=EXTRACTIVE, maxChars=100)
    assert first["summarizer"] == "extractive:v1:100"
    assert 0 < len(first["summary"]) <= 100
    assert "src/app.py" in first["summary"]
    assert first["summary"] == extractive.summarize(READ, 100, KINDS)
    assert (first["cached"], first["fallback"]) == (False, False)
    assert await redis.get(summary_key(ref, "extractive:v1:100")) == first["summary"].encode()

    second = await get_summary(api, ref, summarizer=EXTRACTIVE, maxChars=100)
    assert second == {**first, "cached": True}

    # Another budget is another summarizer id, computed on its own.
    other = await get_summary(api, ref, summarizer=EXTRACTIVE, maxChars=60)
    assert other["summarizer"] == "extractive:v1:60"
    assert len(other["summary"]) <= 60
    assert other["cached"] is False


async def test_defaults_come_from_the_settings(make_api: Api) -> None:
    default = await make_api()
    ref = await register(default, READ)
    answer = await get_summary(default, ref)
    assert answer["summarizer"] == "extractive:v1:400"
    assert len(answer["summary"]) <= 400

    narrow = await make_api(summary_max_chars=120)
    answer = await get_summary(narrow, ref)
    assert answer["summarizer"] == "extractive:v1:120"
    assert len(answer["summary"]) <= 120


@pytest.mark.parametrize("max_chars", [40, 20_000])
async def test_max_chars_bounds_are_accepted(api: httpx.AsyncClient, max_chars: int) -> None:
    ref = await register(api, READ)
    answer = await get_summary(api, ref, maxChars=max_chars)
    assert answer["summarizer"] == f"extractive:v1:{max_chars}"
    assert len(answer["summary"]) <= max_chars


# --- what is not found, and bad parameters ---------------------------------------------------


async def test_unknown_refs_and_another_tenants_refs_get_the_same_404(
    build: Build, stub: Stub, redis: Redis
) -> None:
    keys = ",".join(
        f"{tenant}={hashlib.sha256(key.encode()).hexdigest()}"
        for tenant, key in (("acme", "acme-key"), ("globex", "globex-key"))
    )
    acme = await build(stub, api_keys=keys, headers={"Authorization": "Bearer acme-key"})
    globex = await build(stub, api_keys=keys, headers={"Authorization": "Bearer globex-key"})
    ref = await register(acme, READ)
    unknown = str(digest_of({**READ, "result": "never registered"}).ref)

    for summarizer in (EXTRACTIVE, LLM):
        params: dict[str, str | int] = {"summarizer": summarizer, "maxChars": 200}
        theirs = await globex.get(f"/v1/invocations/{ref}/summary", params=params)
        never = await globex.get(f"/v1/invocations/{unknown}/summary", params=params)
        assert theirs.status_code == never.status_code == 404
        assert theirs.headers["content-type"] == "application/problem+json"
        assert theirs.json()["type"] == "urn:toolref:problem:not-found"
        assert theirs.json()["detail"].replace(ref, "R") == never.json()["detail"].replace(
            unknown, "R"
        )
    assert stub.calls == 0
    assert await summary_keys(redis, ref) == []  # nothing computed for acme's ref either

    mine = await get_summary(acme, ref, summarizer=EXTRACTIVE, maxChars=200)
    assert mine["summary"] == extractive.summarize(READ, 200, KINDS)


@pytest.mark.parametrize(
    "max_chars", ["39", "20001", "0", "-100", "abc", "", "1e3", "100.0", "٣٠٠"]
)
async def test_bad_max_chars_is_422(api: httpx.AsyncClient, redis: Redis, max_chars: str) -> None:
    ref = await register(api, READ)
    response = await api.get(f"/v1/invocations/{ref}/summary", params={"maxChars": max_chars})
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["type"] == "urn:toolref:problem:validation-failed"
    assert "maxChars" in problem["detail"]
    assert await summary_keys(redis, ref) == []


async def test_unknown_summarizer_is_422(make_api: Api, llm_api: httpx.AsyncClient) -> None:
    ref = await register(llm_api, READ)
    response = await llm_api.get(f"/v1/invocations/{ref}/summary", params={"summarizer": "gpt-9"})
    assert response.status_code == 422
    assert response.json()["type"] == "urn:toolref:problem:validation-failed"
    assert "gpt-9" in response.json()["detail"]

    # Without TOOLREF_LLM_BASE_URL the LLM summarizer is not offered at all.
    plain = await make_api()
    response = await plain.get(f"/v1/invocations/{ref}/summary", params={"summarizer": LLM})
    assert response.status_code == 422
    assert LLM in response.json()["detail"]
    assert "extractive" in response.json()["detail"]  # says what is offered


async def test_unknown_summarizer_is_422_even_for_an_unknown_ref(api: httpx.AsyncClient) -> None:
    unknown = "tr_" + "a" * 26
    response = await api.get(f"/v1/invocations/{unknown}/summary", params={"summarizer": "nope"})
    assert response.status_code == 422


# --- openai-compatible ------------------------------------------------------------------------


async def test_the_model_gets_the_versioned_prompt_and_its_answer_is_cached(
    llm_api: httpx.AsyncClient, stub: Stub, redis: Redis
) -> None:
    ref = await register(llm_api, READ)
    first = await get_summary(llm_api, ref, summarizer=LLM, maxChars=200)
    assert first == {
        "summarizer": llm_id(200),
        "summary": ANSWER,
        "cached": False,
        "fallback": False,
    }

    assert stub.calls == 1
    request = stub.requests[0]
    assert request.method == "POST"
    assert str(request.url) == f"{LLM_URL}/chat/completions"
    assert request.headers["Authorization"] == "Bearer sk-stub"
    body = stub.payload()
    assert body["model"] == MODEL
    assert body["temperature"] == 0
    system, user = body["messages"]
    assert system == {"role": "system", "content": PROMPTS["v1"].format(max_chars=200)}
    assert "200 characters" in system["content"]
    assert user["role"] == "user"
    content = user["content"]
    assert content.startswith("Tool: read_file\n")
    assert f"Arguments: {json.dumps(READ['args'])}\n" in content
    # The result is cut to llm_input_chars (1000): its head and its tail, the middle omitted.
    result = content.split("Result:\n", 1)[1]
    assert result.startswith(LINES[:500])
    assert result.endswith(LINES[-500:])
    assert "2000 characters omitted" in result
    assert "line 0150" not in result
    assert len(result) < 1100

    # Cached under the id that names model, prompt version and budget.
    key = summary_key(ref, llm_id(200))
    assert await redis.get(key) == ANSWER.encode()
    assert await summary_keys(redis, ref) == [key]  # and no lock left behind
    assert 0 < await redis.ttl(key) <= 86_400

    second = await get_summary(llm_api, ref, summarizer=LLM, maxChars=200)
    assert second == {**first, "cached": True}
    assert stub.calls == 1  # served from the cache, the model not asked again

    # Another budget is another id: the model is asked again, with that budget in the prompt.
    other = await get_summary(llm_api, ref, summarizer=LLM, maxChars=300)
    assert other["summarizer"] == llm_id(300)
    assert stub.calls == 2
    assert stub.payload()["messages"][0]["content"] == PROMPTS["v1"].format(max_chars=300)


async def test_a_short_result_is_sent_whole(llm_api: httpx.AsyncClient, stub: Stub) -> None:
    invocation = {"name": "grep", "args": "TODO src/", "result": "src/a.py:3: # TODO\n"}
    ref = await register(llm_api, invocation)
    await get_summary(llm_api, ref, summarizer=LLM, maxChars=200)
    content = stub.payload()["messages"][1]["content"]
    assert content == "Tool: grep\nArguments: TODO src/\nResult:\nsrc/a.py:3: # TODO\n"


async def test_a_cached_llm_summary_is_served_without_calling_the_model(
    build: Build, redis: Redis
) -> None:
    # Written by another replica (or an import): this process never asks the model.
    stub = Stub(status=500)
    api = await build(stub)
    ref = await register(api, READ)
    await redis.set(summary_key(ref, llm_id(200)), b"made elsewhere")
    answer = await get_summary(api, ref, summarizer=LLM, maxChars=200)
    assert answer == {
        "summarizer": llm_id(200),
        "summary": "made elsewhere",
        "cached": True,
        "fallback": False,
    }
    assert stub.calls == 0


async def test_a_long_answer_is_cut_to_the_budget(build: Build, redis: Redis) -> None:
    stub = Stub(answer="word " * 200)
    api = await build(stub)
    ref = await register(api, READ)
    answer = await get_summary(api, ref, summarizer=LLM, maxChars=100)
    assert len(answer["summary"]) <= 100
    assert answer["summary"].startswith("word word")
    assert answer["summary"].endswith("…")
    assert answer["fallback"] is False
    assert await redis.get(summary_key(ref, llm_id(100))) == answer["summary"].encode()
    again = await get_summary(api, ref, summarizer=LLM, maxChars=100)
    assert again["summary"] == answer["summary"]
    assert stub.calls == 1


FAILURES: dict[str, Callable[[], Stub]] = {
    "http-500": lambda: Stub(status=500),
    "http-429": lambda: Stub(status=429),
    "read-timeout": lambda: Stub(error=httpx.ReadTimeout("timed out")),
    "connect-error": lambda: Stub(error=httpx.ConnectError("refused")),
    "malformed-json": lambda: Stub(body=b'{"choices": [{"message": '),
    "not-a-completion": lambda: Stub(body=b'{"error": "overloaded"}'),
    "no-choices": lambda: Stub(body=b'{"choices": []}'),
    "json-string": lambda: Stub(body=b'"hello"'),
    "empty-content": lambda: Stub(answer=""),
    "blank-content": lambda: Stub(answer="  \n "),
    "null-content": lambda: Stub(body=json.dumps(completion(None)).encode()),
    "number-content": lambda: Stub(body=json.dumps(completion(42)).encode()),
}


@pytest.mark.parametrize("failure", list(FAILURES))
async def test_a_failing_model_falls_back_to_extractive_and_nothing_is_cached(
    build: Build, redis: Redis, failure: str
) -> None:
    # Long enough that "meanwhile" below always falls within it, however loaded the machine;
    # its expiry is then simulated by removing the mark, as Redis would.
    stub = FAILURES[failure]()
    api = await build(stub, llm_failure_seconds=60)
    ref = await register(api, READ)

    first = await get_summary(api, ref, summarizer=LLM, maxChars=200)
    assert stub.calls == 1
    assert first == {
        "summarizer": "extractive:v1:200",
        "summary": extractive.summarize(READ, 200, KINDS),
        "cached": False,
        "fallback": True,
    }
    key = summary_key(ref, llm_id(200))
    # Nothing under the LLM summarizer's id: only the brief "failed" mark on its lock.
    assert await summary_keys(redis, ref) == [key + ":lock"]
    assert await redis.get(key + ":lock") == b"failed"
    assert 0 < await redis.pttl(key + ":lock") <= 60_000

    # While the mark lasts, requests fall back at once without asking the model again.
    meanwhile = await get_summary(api, ref, summarizer=LLM, maxChars=200)
    assert meanwhile == first
    assert stub.calls == 1

    # Once it expires, the next request asks the model again (and caches a good answer).
    await redis.delete(key + ":lock")
    stub.heal()
    later = await get_summary(api, ref, summarizer=LLM, maxChars=200)
    assert stub.calls == 2
    assert later == {
        "summarizer": llm_id(200),
        "summary": ANSWER,
        "cached": False,
        "fallback": False,
    }
    assert await summary_keys(redis, ref) == [key]


async def test_a_failing_model_is_asked_again_on_every_later_request(
    build: Build, redis: Redis
) -> None:
    stub = Stub(status=503)
    api = await build(stub, llm_failure_seconds=0.1)
    ref = await register(api, READ)
    key = summary_key(ref, llm_id(200))
    for attempt in range(1, 4):
        answer = await get_summary(api, ref, summarizer=LLM, maxChars=200)
        assert answer["fallback"] is True
        assert stub.calls == attempt
        assert await redis.get(key) is None
        await until_gone(redis, key + ":lock")


async def until_gone(redis: Redis, key: str, within: float = 3.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while await redis.exists(key):
        assert loop.time() < deadline, f"{key} did not expire"
        await asyncio.sleep(0.02)


async def test_a_model_that_never_answers_times_out_to_extractive(
    build: Build, redis: Redis
) -> None:
    """A real socket that accepts and never answers: TOOLREF_LLM_TIMEOUT bounds the wait."""
    connections = 0

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await reader.read()  # until the client gives up and closes
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        api = await build(None, llm_base_url=f"http://127.0.0.1:{port}/v1", llm_timeout=0.3)
        ref = await register(api, READ)
        loop = asyncio.get_running_loop()
        started = loop.time()
        answer = await get_summary(api, ref, summarizer=LLM, maxChars=200)
        elapsed = loop.time() - started
    finally:
        server.close()
        await server.wait_closed()
    assert connections == 1
    assert 0.3 <= elapsed < 2.0
    assert answer == {
        "summarizer": "extractive:v1:200",
        "summary": extractive.summarize(READ, 200, KINDS),
        "cached": False,
        "fallback": True,
    }
    assert await redis.get(summary_key(ref, llm_id(200))) is None


async def test_error_results_are_never_sent_to_the_model(
    llm_api: httpx.AsyncClient, stub: Stub, redis: Redis
) -> None:
    ref = await register(llm_api, FAILED_BUILD)
    for _ in range(2):
        answer = await get_summary(llm_api, ref, summarizer=LLM, maxChars=200)
        assert answer["summarizer"] == "extractive:v1:200"
        assert answer["summary"] == extractive.summarize(FAILED_BUILD, 200, KINDS)
        assert answer["fallback"] is False  # the LLM did not fail: it was not asked
    assert stub.calls == 0
    assert not [k for k in await summary_keys(redis, ref) if LLM in k]


async def test_concurrent_requests_in_one_process_make_one_model_call(
    build: Build, redis: Redis
) -> None:
    stub = Stub(delay=0.2)
    api = await build(stub)
    ref = await register(api, READ)
    answers = await asyncio.gather(
        *(get_summary(api, ref, summarizer=LLM, maxChars=200) for _ in range(20))
    )
    assert stub.calls == 1
    assert {a["summary"] for a in answers} == {ANSWER}
    assert {a["summarizer"] for a in answers} == {llm_id(200)}
    assert not any(a["fallback"] for a in answers)
    assert await redis.get(summary_key(ref, llm_id(200))) == ANSWER.encode()


async def test_concurrent_failures_in_one_process_make_one_model_call(build: Build) -> None:
    stub = Stub(status=500, delay=0.2)
    api = await build(stub)
    ref = await register(api, READ)
    answers = await asyncio.gather(
        *(get_summary(api, ref, summarizer=LLM, maxChars=200) for _ in range(20))
    )
    assert stub.calls == 1
    assert all(a["fallback"] for a in answers)
    assert {a["summary"] for a in answers} == {extractive.summarize(READ, 200, KINDS)}


async def test_only_the_request_that_computed_a_summary_reports_it_uncached(
    build: Build,
) -> None:
    stub = Stub(delay=0.2)
    api = await build(stub)
    ref = await register(api, READ)
    answers = await asyncio.gather(
        *(get_summary(api, ref, summarizer=LLM, maxChars=200) for _ in range(20))
    )
    assert stub.calls == 1
    assert sorted(a["cached"] for a in answers) == [False] + [True] * 19


# --- summary-mode hydrate ---------------------------------------------------------------------


def conversation() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Read app.py"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "src/app.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": LINES},
        {"role": "assistant", "content": "It has 300 lines."},
    ]


async def test_summary_mode_hydrate_uses_the_llm_summarizer(
    llm_api: httpx.AsyncClient, stub: Stub
) -> None:
    body = {
        "messages": conversation(),
        "mode": "summary",
        "keepRecent": 0,
        "summarizer": LLM,
        "maxChars": 200,
    }
    response = await llm_api.post("/v1/messages:hydrate", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    ref = answer["toolReferences"]["call_1"]
    assert parse(answer["messages"][2]["content"]) == ("read_file", ref, ANSWER)
    assert answer["messages"][:2] == conversation()[:2]
    assert answer["optimizationStats"]["summarized"] == 1
    assert answer["optimizationStats"]["summaryCacheHits"] == 0
    assert stub.calls == 1
    assert LINES[:500] in stub.payload()["messages"][1]["content"]

    again = (await llm_api.post("/v1/messages:hydrate", json=body)).json()
    assert again["messages"] == answer["messages"]
    assert again["optimizationStats"]["summaryCacheHits"] == 1
    assert stub.calls == 1
    # The summary endpoint shares the cache.
    shared = await get_summary(llm_api, ref, summarizer=LLM, maxChars=200)
    assert (shared["summary"], shared["cached"]) == (ANSWER, True)
    assert stub.calls == 1


async def test_summary_mode_hydrate_never_sends_error_results_to_the_model(
    llm_api: httpx.AsyncClient, stub: Stub
) -> None:
    messages = [
        {"role": "user", "content": "Build it, then read app.py"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"cmd": "make"}},
                {"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {"path": "app.py"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": FAILED_BUILD["result"],
                    "is_error": True,
                },
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": LINES},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "The build failed."}]},
    ]
    body = {"messages": messages, "mode": "summary", "keepRecent": 0, "summarizer": LLM}
    response = await llm_api.post("/v1/messages:hydrate", json=body)
    assert response.status_code == 200, response.text
    results = response.json()["messages"][2]["content"]
    error_summary = parse(results[0]["content"])
    read_summary = parse(results[1]["content"])
    assert error_summary is not None
    assert read_summary is not None
    error = {"name": "Bash", "args": {"cmd": "make"}, "result": FAILED_BUILD["result"]}
    assert error_summary[2] == extractive.summarize({**error, "isError": True}, 400, KINDS)
    assert read_summary[2] == ANSWER
    assert stub.calls == 1  # for the read only
    assert "No rule to make target" not in stub.payload()["messages"][1]["content"]
