"""What the LLM answers cannot hurt the service: an answer too large is not read past
TOOLREF_LLM_MAX_ANSWER_BYTES, and an answer of any shape (nested 30,000 deep, not UTF-8,
compressed, cut short, a number Python cannot read) is a fallback to the extractive
summary, never a 500.

Found: a 300 MB answer was read whole, and a deeply nested one raised RecursionError out of
the shared computation, so every request waiting for it answered 500.
"""

from __future__ import annotations

import asyncio
import gzip
import json

import pytest
from redis.asyncio import Redis

from tests.support.fake_provider.raw import Connection, RawProvider, completion, raw_provider
from toolref.kit import extractive
from toolref.kit.kinds import KindTable

from .summarizer_app import READ, apps, llm_id

KINDS = KindTable.parse("")
LIMIT = 64 * 1024  # the default TOOLREF_LLM_MAX_ANSWER_BYTES
HUGE = 300 * 2**20
CHUNK = b"a" * 65536
OPEN = b'{"choices":[{"message":{"role":"assistant","content":"'


async def flood(connection: Connection) -> None:
    """An answer that never ends (until the client hangs up)."""
    if await connection.send(OPEN):
        while await connection.send(CHUNK):
            pass


async def huge_declared(server: RawProvider, connection: Connection) -> None:
    if await connection.head(Content_Length=str(HUGE)):
        await flood(connection)


async def huge_chunked(server: RawProvider, connection: Connection) -> None:
    if not await connection.head(Transfer_Encoding="chunked"):
        return
    if await connection.send(b"%x\r\n%s\r\n" % (len(OPEN), OPEN)):
        while await connection.send(b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK)):
            pass


async def huge_until_close(server: RawProvider, connection: Connection) -> None:
    if await connection.head():  # no length: the body ends when the connection does
        await flood(connection)


@pytest.mark.parametrize("behaviour", [huge_declared, huge_chunked, huge_until_close])
async def test_a_huge_answer_is_not_read_past_the_limit(redis: Redis, behaviour: object) -> None:
    async with raw_provider(behaviour) as llm, apps(redis) as build:  # type: ignore[arg-type]
        app = await build(llm, llm_timeout=5.0)
        ref = await app.register(READ)
        answer = await app.summary(ref)
        [connection] = llm.connections
        await asyncio.wait_for(connection.hung_up.wait(), 5)
        sent = connection.sent
    assert answer["fallback"] is True
    assert answer["summary"] == extractive.summarize(READ, 200, KINDS)
    # The service hung up once past the limit: what the server got out before that is the
    # limit plus the kernel's socket buffers, a sliver of the 300 MB it meant to send.
    assert sent < HUGE / 10, sent
    print(f"\n{behaviour.__name__}: {sent / 2**20:.1f} MiB sent before the hang-up")  # type: ignore[attr-defined]


async def test_an_answer_under_the_limit_is_used(redis: Redis) -> None:
    """The control: a valid answer just under the limit is read and cut to the budget."""
    text = "word " * ((LIMIT - 400) // 5)
    body = completion(text)
    assert len(body) < LIMIT

    async def large(server: RawProvider, connection: Connection) -> None:
        await connection.answer(body)

    async with raw_provider(large) as llm, apps(redis) as build:
        app = await build(llm)
        answer = await app.summary(await app.register(READ))
    assert answer["summarizer"] == llm_id(200)
    assert answer["fallback"] is False
    assert answer["summary"].startswith("word word")
    assert len(answer["summary"]) <= 200


DEPTH = 30_000  # 60 KB of brackets: within the byte limit, far past what Python parses


def sends(body: bytes, status: int = 200, **headers: str) -> object:
    async def behaviour(server: RawProvider, connection: Connection) -> None:
        if await connection.head(status, Content_Length=str(len(body)), **headers):
            await connection.send(body)

    return behaviour


def cut_short(body: bytes) -> object:
    async def behaviour(server: RawProvider, connection: Connection) -> None:
        if await connection.head(Content_Length=str(len(body) * 2)):
            await connection.send(body)  # then the connection closes, half sent

    return behaviour


JUNK: dict[str, object] = {
    "nested-content": sends(OPEN[:-1] + b"[" * DEPTH + b"]" * DEPTH + b"}}]}"),
    "nested-whole": sends(b"[" * DEPTH + b"]" * DEPTH),
    "nested-objects": sends(b'{"a":' * (DEPTH // 2) + b"1" + b"}" * (DEPTH // 2)),
    "not-utf8": sends(OPEN + b"\xff\xfe summary" + b'"}}]}'),
    "long-integer": sends(b'{"choices":[{"message":{"content":"x"}}],"n":' + b"9" * 5000 + b"}"),
    "nan": sends(b'{"choices":[{"message":{"content":NaN}}]}'),
    "gzip": sends(gzip.compress(completion("compressed")), Content_Encoding="gzip"),
    "html-200": sends(b"<html><body>Service Unavailable</body></html>"),
    "content-parts": sends(completion([{"type": "text", "text": "in parts"}])),
    "choices-object": sends(json.dumps({"choices": {"0": {"message": {"content": "x"}}}}).encode()),
    "empty-body": sends(b""),
    "cut-short": cut_short(completion("half")),
    "http-500": sends(b'{"error": "boom"}', status=500),
    "redirect": sends(b"", status=307, Location="http://127.0.0.1:9/v1/chat/completions"),
}


@pytest.mark.parametrize("junk", list(JUNK))
async def test_a_malformed_answer_is_a_fallback_for_every_waiting_request(
    redis: Redis, junk: str
) -> None:
    async with raw_provider(JUNK[junk]) as llm, apps(redis) as build:  # type: ignore[arg-type]
        app = await build(llm)
        ref = await app.register(READ)
        responses = await asyncio.gather(
            *(
                app.http.get(
                    f"/v1/invocations/{ref}/summary",
                    params={"summarizer": "openai-compatible", "maxChars": 200},
                )
                for _ in range(10)
            )
        )
        # Summary-mode hydrate of a conversation holding the same result, another budget.
        hydrate = await app.http.post(
            "/v1/messages:hydrate",
            json={
                "messages": conversation(),
                "mode": "summary",
                "keepRecent": 0,
                "summarizer": "openai-compatible",
                "maxChars": 300,
            },
        )
    assert [r.status_code for r in responses] == [200] * 10, responses[0].text
    assert all(r.json()["fallback"] for r in responses)
    assert {r.json()["summary"] for r in responses} == {extractive.summarize(READ, 200, KINDS)}
    assert llm.calls == 2  # one per summarizer id; the ten requests shared one call
    assert hydrate.status_code == 200, hydrate.text
    assert hydrate.json()["optimizationStats"]["summarized"] == 1


def conversation() -> list[dict[str, object]]:
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
        {"role": "tool", "tool_call_id": "call_1", "content": READ["result"]},
        {"role": "assistant", "content": "It has 300 lines."},
    ]


async def test_an_answer_with_a_lone_surrogate_is_kept_and_answered(redis: Redis) -> None:
    """Found in review: a model answer holding a lone surrogate (`"\\ud83d"`: an emoji's
    escape cut in two) is JSON, but no UTF-8 carries it: keeping it raised before the lock
    was released, so the request answered 500, the next ones waited the whole bound for a
    lock nobody held, and once it expired the model was asked again, for the same 500,
    every time. Now the surrogate is U+FFFD: answered, kept, asked once."""

    async def odd(server: RawProvider, connection: Connection) -> None:
        await connection.answer(completion("read_file src/app.py \ud83d: 300 lines"))

    async with raw_provider(odd) as llm, apps(redis) as build:
        app = await build(llm)
        ref = await app.register(READ)
        first = await app.summary(ref)
        again = await app.summary(ref)
    assert first["summarizer"] == llm_id(200)
    assert (first["fallback"], first["cached"]) == (False, False)
    assert first["summary"] == "read_file src/app.py \ufffd: 300 lines"
    assert (again["summary"], again["cached"]) == (first["summary"], True)
    assert llm.calls == 1
