"""The registry's steps and the REST routes, as the review of their bounds found them: records
read for an answer bounded by the inflated limit before any is inflated, CPU work on a large
body off the event loop, the JSON item limit held whatever the brackets, and an export file's
items held to their shape before they are built."""

from __future__ import annotations

import io
import json
import threading
import tracemalloc
from typing import Any

import httpx
import msgpack
import pytest
import zstandard

from toolref import AsyncRegistryClient
from toolref.asgi.workers import packed_weight, parse_weight, weight
from toolref.wire.canonical import digest_of
from toolref.wire.errors import DecompressedTooLargeError, ValidationError
from toolref_server import export
from toolref_server.registry import conversation as conversation_module
from toolref_server.registry import hydrate as hydrate_step
from toolref_server.routes import hydration, request_context
from toolref_server.routes import invocations as invocation_routes
from toolref_server.routes import messages as message_routes
from toolref_server.storage import store

from ..conftest import Api
from ..support.threads import threads_of
from .test_hydrate_review import call, marked
from .test_messages import hydrate

LIMIT = 64 * 1024


async def registered(api: httpx.AsyncClient, count: int, size: int) -> list[str]:
    """The refs of `count` invocations whose results are `size` bytes that compress well:
    each a few hundred bytes in the store, `size` once inflated."""
    invocations = [{"name": "read", "args": {"n": n}, "result": "x" * size} for n in range(count)]
    answer = await api.post("/v1/invocations", json={"invocations": invocations})
    assert answer.status_code == 200, answer.text[:300]
    return [row["ref"] for row in answer.json()["refs"]]


def inflations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many records each read of the store inflated and checked (`_verified_all`)."""
    counts: list[int] = []
    inner = store._verified_all

    def counted(verifier: Any, refs: Any, values: Any) -> Any:
        counts.append(sum(value is not None for value in values))
        return inner(verifier, refs, values)

    monkeypatch.setattr(store, "_verified_all", counted)
    return counts


async def test_resolve_refuses_records_past_the_inflated_limit_before_inflating_them(
    make_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in review: resolve inflated every record it named into its answer, whatever
    they came to: records of 3 MB each, a few hundred bytes in the store, answered 96 MB
    (384 MB at its peak) for 32 refs under a 4 MB limit, and 1,000 refs of the limit's
    records 64 GB. Their sizes, as their zstd frames declare them, are summed first: past
    TOOLREF_MAX_DECOMPRESSED_BYTES together, 413 before any is inflated."""
    api = await make_api(max_decompressed_bytes=LIMIT)
    refs = await registered(api, 3, 30_000)
    counts = inflations(monkeypatch)
    refused = await api.post("/v1/invocations:resolve", json={"refs": refs})
    assert refused.status_code == 413, refused.text[:300]
    problem = refused.json()
    assert problem["type"] == "urn:toolref:problem:decompressed-too-large"
    assert problem["limit"] == LIMIT
    assert "TOOLREF_MAX_DECOMPRESSED_BYTES" in problem["detail"]
    assert "fewer refs" in problem["detail"]
    assert counts == []  # nothing inflated
    answered = await api.post("/v1/invocations:resolve", json={"refs": refs[:2]})
    assert answered.status_code == 200, answered.text[:300]
    assert sorted(answered.json()["invocations"]) == sorted(refs[:2])
    assert counts == [2]


async def test_the_sdk_asks_again_in_halves_for_a_batch_past_the_inflated_limit(
    make_api: Api,
) -> None:
    """The SDK side of the bound above: a resolve batch whose records inflate past the
    limit together is asked again in halves (each record alone within it), so the caller
    gets every invocation, not the 413; a ref alone past the limit still raises it."""
    api = await make_api(max_decompressed_bytes=LIMIT)
    refs = await registered(api, 5, 30_000)
    asked: list[int] = []
    app = api._transport  # the app, as the SDK would reach it

    class Recorded(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            if request.url.path.endswith(":resolve"):
                body = await request.aread()
                as_json = request.headers["content-type"].startswith("application/json")
                sent = json.loads(body) if as_json else msgpack.unpackb(body)
                asked.append(len(sent["refs"]))
            return await app.handle_async_request(request)

    async with AsyncRegistryClient("http://localhost:8750", transport=Recorded()) as client:
        resolved = await client.resolve(refs)
        assert sorted(resolved.invocations) == sorted(refs)
        assert resolved.missing == []
        # 5 refused (150 KB), then 2 answered and 3 refused, then 1 and 2 answered
        assert asked == [5, 2, 3, 1, 2]
        alone = await registered(api, 1, LIMIT + 1024)
        with pytest.raises(DecompressedTooLargeError):
            await client.resolve(alone)


async def test_a_hydrate_of_markers_past_the_limit_inflates_none_of_their_records(
    make_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in review: a hydrate (and a handoff) read and inflated the record of every
    marker before its fill was bounded: 5,000 markers to records of the limit held 5,000
    times it, then 413. The records are held to the limit together before any is
    inflated."""
    api = await make_api(max_decompressed_bytes=LIMIT)
    refs = await registered(api, 3, 30_000)
    counts = inflations(monkeypatch)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for n, ref in enumerate(refs):
        messages += marked(n, ref, name="read")
    response = await hydrate(api, messages)
    assert response.status_code == 413, response.text[:300]
    assert response.json()["type"] == "urn:toolref:problem:decompressed-too-large"
    assert counts == []
    handoff = await api.post("/v1/context:handoff", json={"messages": messages})
    assert handoff.status_code == 413, handoff.text[:300]
    assert counts == []


@pytest.mark.parametrize("large", [False, True], ids=["small-inline", "large-offloaded"])
async def test_a_protocol_1_hydrate_reads_its_conversation_off_the_event_loop_when_large(
    make_api: Api, monkeypatch: pytest.MonkeyPatch, large: bool
) -> None:
    """Found in review: a protocol-1 hydrate (the messages answered as sent) read, detected
    and paired its conversation on the event loop: 3.7 s for a 33 MB body of tool calls,
    every other request of the worker waiting. It runs where protocol 2's does: in a worker
    thread for a body of TOOLREF_OFFLOAD_BYTES or more."""
    api = await make_api(offload_bytes=200_000)
    threads = threads_of(monkeypatch, hydration, "conversation_of_decoded")
    # and its answer, the conversation spliced into its JSON (found by the adversarial
    # suite's unread answers: megabytes joined on the loop)
    rendered = threads_of(monkeypatch, message_routes, "as_json")
    size = 40_000 if large else 2_000
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for n in range(5):
        messages += call(n, f"line {n}\n" * (size // 7))
    assert (weight(json.dumps({"messages": messages})) >= 200_000) is large  # its containers too
    response = await api.post(
        "/v1/messages:hydrate", json={"messages": messages}, headers={"Toolref-Protocol": "1"}
    )
    assert response.status_code == 200, response.text[:300]
    assert response.json()["messages"] == messages
    assert len(threads) == len(rendered) == 1
    if large:
        assert threads[0].startswith("toolref-work"), threads
        assert rendered[0].startswith("toolref-work"), rendered
    else:
        assert threads == rendered == [threading.main_thread().name]


@pytest.mark.parametrize("accept", ["application/msgpack", "application/json"])
@pytest.mark.parametrize("large", [False, True], ids=["small-inline", "large-offloaded"])
async def test_a_resolve_answer_is_assembled_off_the_event_loop_when_large(
    make_api: Api, monkeypatch: pytest.MonkeyPatch, large: bool, accept: str
) -> None:
    """Found in review: a msgpack client's resolve had every record parsed and packed on
    the event loop: about 1 s for records of 64 MB. That runs in a worker thread for
    records of TOOLREF_OFFLOAD_BYTES or more. Found by the adversarial suite: a JSON
    answer was built on the loop in five copies of its size (20 unread 4 MB answers made a
    small request 25 times slower); it is assembled in a worker thread as well."""
    api = await make_api(offload_bytes=50_000)
    refs = await registered(api, 3, 20_000 if large else 2_000)
    step = "as_msgpack" if accept == "application/msgpack" else "as_json"
    threads = threads_of(monkeypatch, invocation_routes, step)
    missing = str(digest_of({"name": "read", "args": {"n": -1}, "result": ""}).ref)
    response = await api.post(
        "/v1/invocations:resolve", json={"refs": [*refs, missing]}, headers={"Accept": accept}
    )
    assert response.status_code == 200, response.text[:300]
    answer = (
        msgpack.unpackb(response.content) if accept == "application/msgpack" else response.json()
    )
    assert sorted(answer["invocations"]) == sorted(refs)
    assert answer["missing"] == [missing]
    assert len(threads) == 1
    if large:
        assert threads[0].startswith("toolref-work"), threads
    else:
        assert threads == [threading.main_thread().name]


async def test_a_json_array_past_the_item_limit_is_refused_whatever_its_brackets(
    make_api: Api,
) -> None:
    """Found in review: TOOLREF_MAX_ITEMS was checked on a JSON body only when it held
    more brackets than TOOLREF_MAX_DEPTH, so one flat array took any number of items (a
    16 MB body of `0,` built a list of 8 million, 83 MB, under the default of 100,000); a
    msgpack body was refused. A body with as many commas as the limit is checked too."""
    api = await make_api(max_items=10)
    refs = [str(digest_of({"name": "read", "args": {"n": n}, "result": ""}).ref) for n in range(20)]
    response = await api.post("/v1/invocations:findMissing", json={"refs": refs})
    assert response.status_code == 413, response.text[:300]
    assert response.json()["type"] == "urn:toolref:problem:too-many-items"
    assert "20 items, over the limit of 10" in response.json()["detail"]
    answered = await api.post("/v1/invocations:findMissing", json={"refs": refs[:10]})
    assert answered.status_code == 200, answered.text[:300]


def tree(depth: int) -> bytes:
    """msgpack of arrays of 8 arrays, `depth` levels of them, empty ones at the bottom."""
    return b"\x98" + tree(depth - 1) * 8 if depth else b"\x90"


def export_file(item: bytes) -> io.BytesIO:
    header = msgpack.packb({"toolrefExport": 1, "tenant": None, "created": 0})
    return io.BytesIO(zstandard.ZstdCompressor().compress(header + item))


@pytest.mark.parametrize("shape", ["wide", "nested"])
def test_an_export_item_of_many_small_values_is_refused_before_it_is_built(shape: str) -> None:
    """Found in review: `cache import` built each item whole before checking its shape: an
    array of 8 MB of nils (a file of 317 bytes) took 80 MB, ten times the item bound its
    reader keeps; empty arrays take 56 bytes each. An array or map of more than the 3
    members an item has, or one inside an item, is refused as it is read."""
    if shape == "wide":
        n = 8 * 2**20
        item = b"\xdd" + n.to_bytes(4, "big") + b"\xc0" * n  # an array of n nils
    else:
        item = b"\x93\xa1k\xc4\x01v" + tree(7)  # [k, v, 2 million empty arrays, 8 a level]
    source = export_file(item)
    assert len(source.getvalue()) < 2_000
    tracemalloc.start()
    try:
        with pytest.raises(ValidationError) as refused:
            export.verify(source, limits=export.Limits(3600, 16 * 2**20))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * len(item)  # the inflated item at most, never the lists of its values
    assert "no export holds" in refused.value.detail
    assert "nothing was imported" in refused.value.detail
    good = export_file(msgpack.packb(["k", b"v", -1]))
    assert len(list(export._items(good, export.Limits()))) == 2


async def hydrated(api: httpx.AsyncClient, data: bytes, *, packed: bool) -> Any:
    """The messages `messages:hydrate` answers for `data`, JSON or msgpack both ways."""
    kind = "application/msgpack" if packed else "application/json"
    response = await api.post(
        "/v1/messages:hydrate", content=data, headers={"content-type": kind, "accept": kind}
    )
    assert response.status_code == 200, response.text[:300]
    return (msgpack.unpackb(response.content) if packed else response.json())["messages"]


@pytest.mark.parametrize("packed", [False, True], ids=["json", "msgpack"])
async def test_a_small_body_of_many_tool_calls_is_worked_on_in_a_worker_thread(
    make_api: Api, monkeypatch: pytest.MonkeyPatch, packed: bool
) -> None:
    """Found in review: work went to a thread by a body's bytes alone, and a hydrate makes
    each tool call's record in Python (about 300 us each): 2,500 calls, 405 KB, under the
    512 KiB threshold, held the event loop for 0.8 s. A body weighs its objects and arrays
    too (`workers.weight`): 300 small calls (about 70 KB) are worked on in a thread at the
    default threshold, sent as JSON or packed (a msgpack body weighs its maps and arrays
    once it is parsed)."""
    api = await make_api()
    threads = threads_of(monkeypatch, conversation_module, "_records")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for n in range(300):
        use = {"type": "tool_use", "id": f"toolu_{n}", "name": "read", "input": {"n": f"{n}"}}
        done = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"line {n}"}
        messages += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [done]}]
    body = {"messages": messages}
    data = msgpack.packb(body) if packed else json.dumps(body).encode()
    assert len(data) < 128 << 10 < 512 << 10 <= weight(json.dumps(body))  # as parsed
    assert not packed or weight(data) < 512 << 10  # packed: no braces to count
    assert await hydrated(api, data, packed=packed) == messages
    assert [t.split("_")[0] for t in threads] == ["toolref-work"]


@pytest.mark.parametrize("packed", [False, True], ids=["json", "msgpack"])
async def test_a_body_is_parsed_in_place_and_walked_in_a_thread_by_what_each_step_costs(
    make_api: Api, monkeypatch: pytest.MonkeyPatch, packed: bool
) -> None:
    """Found in review: every object and array weighed what a step through messages costs
    one (4 KiB), at the parse too, so a small conversation of many content blocks went to a
    worker thread at the parse and again at each step after it (hydrate and optimize lost
    13% of their throughput in the load smoke to the hops). The parse weighs what parsing
    costs (`workers.parse_weight`, `packed_weight`), the walk through the messages what that
    costs: this body is parsed in place and walked in a thread."""
    api = await make_api()
    decoded = threads_of(monkeypatch, request_context, "_decoded")
    walked = threads_of(monkeypatch, hydrate_step, "conversation_of_decoded")
    roles = ("user", "assistant") * 150
    messages = [
        {"role": role, "content": [{"type": "text", "text": f"hi {n}"}]}
        for n, role in enumerate(roles)
    ]
    body = {"messages": messages}
    data = msgpack.packb(body) if packed else json.dumps(body).encode()
    parsed = packed_weight if packed else parse_weight
    assert parsed(data) < 512 << 10 <= weight(json.dumps(body))
    assert await hydrated(api, data, packed=packed) == messages
    assert decoded == [threading.main_thread().name]
    assert [t.split("_")[0] for t in walked] == ["toolref-work"]


async def test_a_packed_body_of_many_tiny_maps_is_parsed_in_a_thread(
    make_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in review: a msgpack body has no braces, so 4,000 messages of a text block
    packed (12,000 maps and arrays, 152 KB) weighed their bytes alone and were parsed on the
    event loop, a Python hook called for each; a packed body weighs the bytes that may open
    its maps and arrays (`workers.packed_weight`)."""
    api = await make_api()
    decoded = threads_of(monkeypatch, request_context, "_decoded")
    messages = [{"role": "user", "content": [{"type": "text", "text": "x"}]}] * 4_000
    data = msgpack.packb({"messages": messages})
    assert weight(data) < 512 << 10 <= packed_weight(data)
    assert await hydrated(api, data, packed=True) == messages
    assert [t.split("_")[0] for t in decoded] == ["toolref-work"]
