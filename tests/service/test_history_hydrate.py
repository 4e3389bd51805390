"""messages:hydrate with history refs, against a real engine: keeping a history, continuing
it (plain, and zstd against its dictionary), and every way a continuation is refused."""

from __future__ import annotations

import copy
import hashlib
import time
from typing import Any

import httpx
import pytest
import zstandard
from redis.asyncio import Redis

from toolref import formats
from toolref.history import DICTIONARY_LEVEL, chain_form, dictionary, heads, history_ref
from toolref.wire import compression
from toolref.wire.canonical import canonical_json
from toolref.wire.encoding import dumps_json
from toolref.wire.headers import HISTORY_HEADER
from toolref_server.registry import continuation

from ..conftest import Api, key_names, snapshot
from ..unit.test_history import conversation

OPENAI = formats.get("openai-chat")
KEEP = {HISTORY_HEADER: "?1"}
NEVER = history_ref(hashlib.sha256(b"never confirmed").digest())


def head_of(messages: list[Any]) -> str:
    """What a client computes: the ref of the last head over the chain form."""
    return history_ref(heads(chain_form(messages, OPENAI))[-1])


async def keep(api: httpx.AsyncClient, messages: list[Any]) -> str:
    response = await api.post("/v1/messages:hydrate", json={"messages": messages}, headers=KEEP)
    assert response.status_code == 200, response.text
    ref: str = response.json()["historyRef"]
    assert response.headers[HISTORY_HEADER] == ref
    return ref


async def continue_(
    api: httpx.AsyncClient, ref: str, new: list[Any], **extra: Any
) -> httpx.Response:
    return await api.post(
        "/v1/messages:hydrate", json={"historyRef": ref, "messages": new, **extra}
    )


async def test_a_kept_history_is_confirmed_with_the_ref_the_client_computes(
    api: httpx.AsyncClient,
) -> None:
    messages = conversation(3)
    assert await keep(api, messages) == head_of(messages)
    # Without the header nothing is kept and no ref is given.
    plain = await api.post("/v1/messages:hydrate", json={"messages": messages})
    assert "historyRef" not in plain.json()
    assert HISTORY_HEADER not in plain.headers


async def test_a_continuation_answers_the_whole_conversation_and_its_new_head(
    api: httpx.AsyncClient,
) -> None:
    messages = conversation(6)
    ref = await keep(api, messages[:9])
    response = await continue_(api, ref, messages[9:])
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["messages"] == messages
    assert body["historyRef"] == head_of(messages) == response.headers[HISTORY_HEADER]
    assert body["toolReferences"].keys() == {f"call_{n}" for n in range(6)}
    # The new head continues in turn, and the old one still does (histories are immutable).
    later = conversation(7)
    again = await continue_(api, body["historyRef"], later[len(messages) :])
    assert again.json()["messages"] == later
    assert (await continue_(api, ref, messages[9:])).json()["messages"] == messages


async def test_a_continuation_may_send_refs_for_payloads_the_registry_holds(
    api: httpx.AsyncClient,
) -> None:
    messages = conversation(4)
    ref = await keep(api, messages[:9])
    optimized = (await api.post("/v1/messages:optimize", json={"messages": messages})).json()
    new = optimized["messages"][9:]
    assert any("toolRef" in str(m) for m in new)
    response = await continue_(api, ref, new)
    assert response.json()["messages"] == messages
    assert response.json()["historyRef"] == head_of(messages)


async def test_a_call_in_the_history_answered_in_the_new_messages(
    api: httpx.AsyncClient,
) -> None:
    messages = conversation(2)
    # The history ends with a call whose result comes only now.
    ref = await keep(api, messages[:7])
    response = await continue_(api, ref, messages[7:])
    assert response.json()["messages"] == messages
    assert response.json()["historyRef"] == head_of(messages)


async def test_a_zstd_body_against_the_history_dictionary(api: httpx.AsyncClient) -> None:
    messages = conversation(8)
    ref = await keep(api, messages[:21])
    body = dumps_json({"messages": messages[21:]})  # written as the dictionary is
    packed = compression.compress(body, dictionary(messages[:21]), DICTIONARY_LEVEL)
    alone = zstandard.ZstdCompressor(level=DICTIONARY_LEVEL).compress(body)
    assert len(packed) < len(alone) / 2  # the point of it
    response = await api.post(
        "/v1/messages:hydrate",
        content=packed,
        headers={
            "Content-Type": "application/json",
            "Content-Encoding": "zstd",
            HISTORY_HEADER: ref,
        },
    )
    assert response.status_code == 200, response.text
    assert response.json()["messages"] == messages
    assert response.json()["historyRef"] == head_of(messages)


async def test_a_body_against_another_dictionary_is_refused_and_changes_nothing(
    api: httpx.AsyncClient, redis: Redis
) -> None:
    messages = conversation(4)
    ref = await keep(api, messages[:9])
    body = canonical_json({"messages": messages[9:]})
    wrong = dictionary(messages[:8])
    headers = {"Content-Type": "application/json", "Content-Encoding": "zstd", HISTORY_HEADER: ref}
    before = await snapshot(redis)
    cases = {
        "another dictionary": compression.compress(body, wrong, 3),
        "no checksum": zstandard.ZstdCompressor(
            dict_data=zstandard.ZstdCompressionDict(
                dictionary(messages[:9]), dict_type=zstandard.DICT_TYPE_RAWCONTENT
            )
        ).compress(body),
        "cut short": compression.compress(body, dictionary(messages[:9]), 3)[:-2],
    }
    for case, packed in cases.items():
        response = await api.post("/v1/messages:hydrate", content=packed, headers=headers)
        assert response.status_code == 400, case
        problem = response.json()
        assert problem["type"].endswith(":dictionary-mismatch"), case
        assert ref in problem["detail"], case
    assert await snapshot(redis) == before


async def test_unknown_history_is_409_and_changes_nothing(
    api: httpx.AsyncClient, redis: Redis
) -> None:
    before = await snapshot(redis)
    response = await continue_(api, NEVER, conversation(1))
    assert response.status_code == 409
    problem = response.json()
    assert problem["type"] == "urn:toolref:problem:missing-history"
    assert problem["missingHistory"] == NEVER
    assert "send the whole conversation" in problem["detail"]
    # The same through the header, with a zstd body: refused before inflating.
    packed = compression.compress(b'{"messages":[]}', b"x" * 100, 3)
    response = await api.post(
        "/v1/messages:hydrate",
        content=packed,
        headers={
            "Content-Type": "application/json",
            "Content-Encoding": "zstd",
            HISTORY_HEADER: NEVER,
        },
    )
    assert response.status_code == 409
    assert await snapshot(redis) == before


async def test_a_history_whose_tool_ref_was_evicted_is_missing(
    api: httpx.AsyncClient, make_api: Api, redis: Redis
) -> None:
    messages = conversation(3)
    ref = await keep(api, messages)
    records = [n for n in await key_names(redis) if ":i:" in n]
    assert records
    await redis.delete(records[0])
    # Another replica (nothing of it in memory) reads the history whole and finds it broken.
    other = await make_api()
    response = await continue_(other, ref, [{"role": "user", "content": "go on"}])
    assert response.status_code == 409
    assert response.json()["missingHistory"] == ref
    assert "no longer held" in response.json()["detail"]
    # The whole conversation in full still works, and keeps a usable history again.
    again = await keep(other, messages)
    assert (await continue_(other, again, [])).json()["messages"] == messages


async def test_a_history_first_kept_in_a_guessed_format_misses_as_a_history(
    api: httpx.AsyncClient, redis: Redis
) -> None:
    """A first turn of plain text fits every format, so its node's format is a guess; the
    tail that shows the conversation is Anthropic's must not leave that guess in the node.
    Before the fix the node kept it: a later whole read scanned the history as another
    format, saw none of its markers, and a record evicted meanwhile came back as 409
    `missing-refs` (refs the client never sent, so its resends could not help) instead of
    `missing-history`. Found by the exactness property test."""
    first = {"role": "user", "content": [{"type": "text", "text": ""}]}
    calls = {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": f"toolu_{n}", "name": "read_file", "input": {}}
            for n in (1, 2, 3)
        ],
    }
    results = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "x"} for n in (1, 2)
        ],
    }
    ref = await keep(api, [first])
    response = await api.post(
        "/v1/messages:hydrate",
        json={"historyRef": ref, "messages": [calls, results]},
        headers=KEEP,
    )
    assert response.status_code == 200, response.text
    head = response.json()["historyRef"]
    for name in await key_names(redis):
        if ":i:" in name:
            await redis.delete(name)
    # toolu_3 waits for its result: the continuation reads the history whole.
    again = await continue_(api, head, [])
    assert again.status_code == 409, again.text
    assert again.json()["missingHistory"] == head


async def test_a_continuation_reads_only_the_node_until_a_refresh_is_due(
    api: httpx.AsyncClient, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process that kept a history answers its next turn from memory and the node
    (a message evicted meanwhile goes unnoticed, and nothing is lost: the answer is whole);
    once `history_refresh_seconds` have passed the history is read whole again, every
    lifetime in it extended, and the eviction answered as a missing history."""
    messages = conversation(3)
    ref = await keep(api, messages)
    stored = [n for n in await key_names(redis) if ":m:" in n]
    await redis.delete(stored[0])
    new = [{"role": "user", "content": "go on"}]
    response = await continue_(api, ref, new)
    assert response.status_code == 200, response.text
    assert response.json()["messages"] == [*messages, *new]
    later = time.time() + 3601
    monkeypatch.setattr(continuation, "clock", lambda: later)
    refused = await continue_(api, response.json()["historyRef"], [])
    assert refused.status_code == 409
    assert refused.json()["type"].endswith("missing-history")


async def test_returning_new_messages_only(api: httpx.AsyncClient, make_api: Api) -> None:
    """`returnMessages: new` answers the request's messages hydrated and confirms the
    head of the whole conversation, from memory and, on another replica, read whole."""
    messages = conversation(6)
    ref = await keep(api, messages[:9])
    for client in (api, await make_api()):
        response = await continue_(client, ref, messages[9:], returnMessages="new")
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["messages"] == messages[9:]
        assert body["historyRef"] == head_of(messages)
        calls = {m["tool_call_id"] for m in messages[9:] if m.get("role") == "tool"}
        assert set(body["toolReferences"]) == calls
    capabilities = (await api.get("/v1/capabilities")).json()
    assert capabilities["returnMessages"] == ["all", "new"]


async def test_another_tenant_cannot_continue_a_history(make_api: Api) -> None:
    keys = ",".join(
        f"{t}={hashlib.sha256(k.encode()).hexdigest()}" for t, k in (("a", "ka"), ("b", "kb"))
    )
    acme = await make_api({"Authorization": "Bearer ka"}, api_keys=keys, host="0.0.0.0")
    globex = await make_api({"Authorization": "Bearer kb"}, api_keys=keys, host="0.0.0.0")
    messages = conversation(2)
    ref = await keep(acme, messages)
    theirs = await continue_(globex, ref, [])
    never = await continue_(globex, NEVER, [])
    assert theirs.status_code == never.status_code == 409
    assert theirs.json()["detail"].replace(ref, "X") == never.json()["detail"].replace(NEVER, "X")


async def test_refused_continuations(api: httpx.AsyncClient, make_api: Api) -> None:
    messages = conversation(2)
    ref = await keep(api, messages)
    cases: list[tuple[httpx.Response, int, str]] = [
        (
            await api.post(
                "/v1/messages:hydrate",
                json={"historyRef": ref, "messages": []},
                headers={HISTORY_HEADER: head_of(messages[:3])},
            ),
            422,
            "one history ref",
        ),
        (await continue_(api, ref, [], format="anthropic"), 422, "format"),
        (await continue_(api, "th_short", []), 422, "historyRef"),
        (
            await api.post(
                "/v1/messages:hydrate", json={"messages": []}, headers={HISTORY_HEADER: "yes"}
            ),
            400,
            "neither",
        ),
        (
            await api.post(
                "/v1/messages:hydrate",
                json={"historyRef": ref, "messages": []},
                headers={"Toolref-Protocol": "1"},
            ),
            400,
            "protocol",
        ),
    ]
    small = await make_api(max_messages=len(messages) + 1)
    cases.append((await continue_(small, ref, conversation(1)[:2]), 413, f"has {len(messages)}"))
    for response, status, says in cases:
        assert response.status_code == status, response.text
        assert says in response.json()["detail"], response.text


async def test_protocol_1_ignores_the_keep_header(api: httpx.AsyncClient) -> None:
    messages = conversation(1)
    response = await api.post(
        "/v1/messages:hydrate",
        json={"messages": messages},
        headers={**KEEP, "Toolref-Protocol": "1"},
    )
    assert response.status_code == 200
    assert "historyRef" not in response.json()


async def test_an_edited_message_makes_a_new_history_sharing_the_rest(
    api: httpx.AsyncClient, redis: Redis
) -> None:
    messages = conversation(5)
    first = await keep(api, messages)
    edited = copy.deepcopy(messages)
    edited[5]["content"] = "edited"
    second = await keep(api, edited)
    assert second != first == head_of(messages)
    assert second == head_of(edited)
    stored = [n for n in await key_names(redis) if ":m:" in n]
    assert len(stored) == len({dumps_json(m) for m in chain_form(messages, OPENAI)}) + 1


async def test_a_body_over_the_limit_is_refused_before_the_history_is_rebuilt(
    make_api: Api,
) -> None:
    small = await make_api(max_decompressed_bytes=4096)
    body = canonical_json({"messages": [{"role": "user", "content": "x" * 10_000}]})
    packed = compression.compress(body, b"any dictionary", 3)
    response = await small.post(
        "/v1/messages:hydrate",
        content=packed,
        headers={
            "Content-Type": "application/json",
            "Content-Encoding": "zstd",
            HISTORY_HEADER: NEVER,  # not held: a 409 would mean it was looked up first
        },
    )
    assert response.status_code == 413, response.text
    assert response.json()["type"].endswith(":decompressed-too-large")


def prefix_ref(messages: list[Any], length: int) -> str:
    return history_ref(heads(chain_form(messages, OPENAI))[length - 1])


async def test_a_checkpoint_is_kept_before_the_last_message_with_no_call_waiting(
    api: httpx.AsyncClient,
) -> None:
    """`checkpoint`: the longest prefix before the last message that leaves no call
    waiting, kept and confirmed with the ref the client computes; continued next turn,
    from the whole conversation or from a history's tail alike."""
    caps = (await api.get("/v1/capabilities")).json()
    assert caps["checkpoints"] is True
    messages = conversation(2)  # ..., call_1, its result, a text answer
    ask = {"messages": messages, "checkpoint": True}
    whole = await api.post("/v1/messages:hydrate", json=ask, headers=KEEP)
    body = whole.json()
    assert body["checkpointLength"] == len(messages) - 1
    assert body["checkpointRef"] == prefix_ref(messages, len(messages) - 1)
    # From the tail: the new messages end with a call and its result, so the call waits
    # in every prefix that ends between them: the checkpoint ends before the call.
    later = conversation(3)[:12]  # ..., "read file 2", call_2, its result
    assert later[-2]["tool_calls"][0]["id"] == later[-1]["tool_call_id"] == "call_2"
    tail = await continue_(
        api,
        body["checkpointRef"],
        later[len(messages) - 1 :],
        checkpoint=True,
        returnMessages="new",
    )
    assert tail.status_code == 200, tail.text
    answered = tail.json()
    assert answered["historyRef"] == head_of(later)
    assert answered["checkpointLength"] == len(later) - 2
    assert answered["checkpointRef"] == prefix_ref(later, len(later) - 2)
    # The next turn continues that checkpoint.
    final = conversation(3)
    again = await continue_(api, answered["checkpointRef"], final[len(later) - 2 :])
    assert again.status_code == 200, again.text
    assert again.json()["historyRef"] == head_of(final)


async def test_no_checkpoint_without_a_kept_history_or_a_prefix(api: httpx.AsyncClient) -> None:
    single = [{"role": "user", "content": "hi"}]
    kept = await api.post(
        "/v1/messages:hydrate", json={"messages": single, "checkpoint": True}, headers=KEEP
    )
    assert "checkpointRef" not in kept.json()
    plain = await api.post(
        "/v1/messages:hydrate", json={"messages": conversation(2), "checkpoint": True}
    )
    assert "checkpointRef" not in plain.json()
    assert "historyRef" not in plain.json()
