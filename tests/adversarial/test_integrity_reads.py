"""Reads verify what they serve: a stored record whose content does not hash to its ref is
never served. It answers as a missing ref (GET 404, resolve `missing`, hydrate 409), and it
is deleted, so the client's resend (what the SDK does on a 409) stores it again: the
registry heals itself, no operator needed.

Found: a record whose payload bytes had changed in Redis (its 32-byte digest header intact)
was served as the invocation its ref names; undecodable bytes under a record key were a 500.

Also measured here: what the check costs per record, against the read itself and against
the digest registration computes (`pytest -s` prints it; docs/reliability.md quotes it).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from redis.asyncio import Redis

from tests.support.records import encode_values
from toolref.edits.wire import MEDIA_TYPE as EDIT
from toolref.sending.editor import Editor
from toolref.wire.canonical import Ref, digest_of
from toolref.wire.encoding import loads_fast
from toolref_server.storage import compressors, record
from toolref_server.storage.store import NewRecord, Store
from toolref_server.storage.verifier import Verifier

from ..conftest import Api

SMALL = {"name": "read_file", "args": {"path": "a.py"}, "result": "x = 1\ny = 2\n"}
LARGE = {
    "name": "read_file",
    "args": {"path": "store.py"},
    "result": (Path(__file__).parents[2] / "service/toolref_server/storage/store.py").read_text(),
}
OTHER = {"name": "bash", "args": {"cmd": "ls"}, "result": "a.py\nb.py\n"}


def altered_payload(data: bytes) -> bytes:
    """The same record with its result changed and its digest header kept: it decodes,
    and only its content tells it is not what the ref names."""
    rec = record.decode(data)
    return record.encode(
        rec.name,
        is_error=rec.is_error,
        payload=type(rec.payload)(rec.payload.args, rec.payload.result.replace("1", "7")),
        digest=rec.digest,
        size=rec.size,
        compress_threshold=1 << 30,
    )


def flipped(at: int) -> Callable[[bytes], bytes]:
    """One bit flipped at `at`, or (negative) at the first spot from the middle on where the
    flip changes what the bytes decode to (some bits of a zstd frame change nothing)."""

    def flip_at(data: bytes, spot: int) -> bytes:
        return data[:spot] + bytes([data[spot] ^ 0x01]) + data[spot + 1 :]

    def flip(data: bytes) -> bytes:
        if at >= 0:
            return flip_at(data, at)
        original = record.decode(data).payload
        for spot in range(len(data) // 2, len(data)):
            try:
                if record.decode(flip_at(data, spot)).payload == original:
                    continue
            except Exception:
                pass
            return flip_at(data, spot)
        raise AssertionError("no bit flip changes the record")

    return flip


def planted(data: bytes) -> bytes:
    """A valid record, of another invocation."""
    digest = digest_of(OTHER)
    return encode_values(OTHER, digest.sha256, digest.size, 512)


CORRUPTIONS: dict[str, tuple[dict[str, Any], Callable[[bytes], bytes]]] = {
    "payload-altered": (SMALL, altered_payload),
    "digest-tail-altered": (SMALL, flipped(record.DIGEST_START + 20)),
    "compressed-bit-flip": (LARGE, flipped(-1)),
    "garbage-body": (SMALL, lambda data: data[:34] + b"\xc1\xff\x00garbage"),
    "truncated": (LARGE, lambda data: data[: len(data) // 3]),
    "wrong-version": (SMALL, lambda data: b"\x09" + data[1:]),
    "planted": (SMALL, planted),
}


async def register(api: httpx.AsyncClient, invocation: dict[str, Any]) -> str:
    response = await api.post("/v1/invocations", json={"invocations": [invocation]})
    assert response.status_code == 200, response.text
    ref: str = response.json()["refs"][0]["ref"]
    return ref


def conversation(invocation: dict[str, Any], ref: str | None) -> list[dict[str, Any]]:
    """An openai-chat exchange holding `invocation` (its args a JSON string): with a marker
    when `ref` is given."""
    function: dict[str, Any] = {"name": invocation["name"]}
    tool: dict[str, Any] = {"role": "tool", "tool_call_id": "call_1"}
    if ref is None:
        function["arguments"] = invocation["args"]  # a string, as openai-chat carries it
        tool["content"] = invocation["result"]
    else:
        function["toolRef"] = tool["toolRef"] = ref
    return [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": function}],
        },
        tool,
    ]


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
async def test_a_corrupt_record_is_never_served_and_heals_on_resend(
    make_api: Api, redis: Redis, corruption: str
) -> None:
    api = await make_api()
    invocation, corrupt = CORRUPTIONS[corruption]
    # Registered the way a conversation registers it (arguments as a string), so the
    # resend below is a hydrate of the same invocation.
    invocation = {**invocation, "args": json.dumps(invocation["args"])}
    ref = await register(api, invocation)
    key = f"tr:local:i:{ref[3:]}"
    good = await redis.get(key)
    assert isinstance(good, bytes)

    async def spoil() -> None:
        await redis.set(key, corrupt(good), keepttl=True)

    await spoil()
    got = await api.get(f"/v1/invocations/{ref}")
    assert got.status_code == 404, got.text
    assert got.json()["type"] == "urn:toolref:problem:not-found"
    assert await redis.get(key) is None  # deleted on sight

    await spoil()
    resolved = await api.post("/v1/invocations:resolve", json={"refs": [ref]})
    assert resolved.status_code == 200
    assert resolved.json() == {"invocations": {}, "missing": [ref]}

    await spoil()
    summary = await api.get(f"/v1/invocations/{ref}/summary")
    assert summary.status_code == 404

    await spoil()
    marked = await api.post(
        "/v1/messages:hydrate", json={"messages": conversation(invocation, ref)}
    )
    assert marked.status_code == 409, marked.text
    assert marked.json()["missingRefs"] == [ref]

    # The client resends the payload in full (as the SDK does on that 409): stored again.
    resent = await api.post(
        "/v1/messages:hydrate", json={"messages": conversation(invocation, None)}
    )
    assert resent.status_code == 200, resent.text
    assert resent.json()["toolReferences"] == {"call_1": ref}
    stored = await redis.get(key)
    assert isinstance(stored, bytes)
    assert record.verified(stored, Ref(ref)) is not None  # a sound record again
    healed = await api.post(
        "/v1/messages:hydrate", json={"messages": conversation(invocation, ref)}
    )
    assert healed.status_code == 200, healed.text
    assert healed.json()["messages"][2]["content"] == invocation["result"]

    metrics = (await api.get("/metrics")).text
    assert "toolref_records_corrupt_total 4.0" in metrics


@pytest.mark.parametrize("kind", ["b", "k", "p"], ids=["node", "chunk", "piece"])
async def test_a_corrupt_recipe_is_a_missing_history_not_a_500(
    make_api: Api, redis: Redis, kind: str
) -> None:
    """A recipe's node, chunk or piece (`storage.keys`) whose bytes changed in the engine:
    an edit against it, read from the store (here by a replica that does not hold it),
    is a 409 missing-history, which the client answers by resending with no base; that
    resend keeps the recipe whole again."""
    editor = Editor(long_window=False)  # the file one segment: a piece
    result = (Path(__file__).parents[2] / "service/toolref_server/app.py").read_text()
    messages = conversation({**SMALL, "args": json.dumps(SMALL["args"])}, None)
    messages[-1] = {**messages[-1], "content": (result * 2)[:20_000]}  # a piece: 16 KiB or more
    one = await make_api(edit_cache_bytes=0)
    first = editor.prepare(HEADERS, json.dumps({"messages": messages}).encode(), "messages")
    assert first is not None
    kept = await one.post(APPLY, content=first.body, headers={"Content-Type": EDIT})
    assert kept.status_code == 200, kept.text
    assert editor.confirm(first, kept.headers["Toolref-History"])
    corrupted = await redis.keys(f"tr:local:{kind}:*")
    assert corrupted
    for key in corrupted:
        await redis.set(key, b"\x28\xb5\x2f\xfd garbage", keepttl=True)
    messages.append({"role": "assistant", "content": "done"})
    body = json.dumps({"messages": messages}).encode()
    edit = editor.prepare(HEADERS, body, "messages")
    assert edit is not None
    assert edit.base == first.ref
    other = await make_api(edit_cache_bytes=0)
    answer = await other.post(APPLY, content=edit.body, headers={"Content-Type": EDIT})
    assert answer.status_code == 409, answer.text
    assert answer.json()["type"] == "urn:toolref:problem:missing-history"
    resend = editor.on_miss(edit, 409, answer.json())
    assert resend is not None
    assert resend.base is None
    healed = await other.post(APPLY, content=resend.body, headers={"Content-Type": EDIT})
    assert healed.status_code == 200, healed.text
    assert healed.content.endswith(body)


HEADERS: Final = [("content-type", "application/json")]
APPLY: Final = "/v1/edits:apply"


def corpus(size: int, count: int) -> list[dict[str, Any]]:
    """`count` invocations whose results are `size` characters of this repository's code."""
    root = Path(__file__).parents[2]
    text = "".join(p.read_text() for p in sorted((root / "service").rglob("*.py")))
    return [
        {
            "name": "read_file",
            "args": {"path": f"src/m{n}.py"},
            "result": (text[n * 97 :] + text)[:size],
            "isError": False,
        }
        for n in range(count)
    ]


def checks(records: list[record.Record]) -> list[bytes]:
    """The check as `record.verified` makes it: the payloads parsed by orjson first."""
    return [record.content_digest(r, loads_fast) for r in records]


def registration_digests(invocations: list[dict[str, Any]]) -> list[Any]:
    return [digest_of(i) for i in invocations]


def cpu_us(work: Callable[[], Any], per: int, runs: int = 7) -> float:
    """Microseconds of this thread's CPU per item (`per` of them) `work` takes: the least of
    `runs` (the least disturbed by other processes on a shared machine: wall-clock medians
    read the check 4x its baseline while a benchmark ran beside the suite)."""
    times = []
    for _ in range(runs):
        started = time.thread_time()
        work()
        times.append(time.thread_time() - started)
    return min(times) * 1e6 / per


async def test_what_the_check_costs(redis: Redis) -> None:
    """Per record: a read (one round trip, decode, check), the check alone (the content's
    SHA-256 recomputed from its payload texts), and the digest registration computes for
    the same invocation (the baseline: the check repeats that work, plus parsing the
    stored text). The bound asserted is the ratio to that baseline, measured here."""
    store = Store(redis, 3600)
    print()
    for size, count in ((2_000, 60), (20_000, 30), (200_000, 6)):
        invocations = corpus(size, count)
        digests = [digest_of(i) for i in invocations]
        await store.register(
            "cost",
            [
                NewRecord(d.ref, d.sha256, encode_values(i, d.sha256, d.size, 512))
                for i, d in zip(invocations, digests, strict=True)
            ],
        )
        refs = [d.ref for d in digests]
        reads = []
        for _ in range(7):
            started = time.perf_counter()
            records = await store.fetch("cost", refs)
            reads.append(time.perf_counter() - started)
        assert all(r is not None for r in records)
        held = [r for r in records if r is not None]
        read = statistics.median(reads) * 1e6 / count
        check = cpu_us(partial(checks, held), count)
        baseline = cpu_us(partial(registration_digests, invocations), count)
        print(
            f"{size:>7}-char results: read {read:7.1f} us/record, of which the check "
            f"{check:6.1f} us ({check / (read - check):.2f}x the read without it); "
            f"registration's digest {baseline:6.1f} us (check / digest {check / baseline:.2f})"
        )
        assert check / baseline < 3, (check, baseline)


def test_verified_refuses_what_its_ref_does_not_name() -> None:
    for name, (invocation, corrupt) in CORRUPTIONS.items():
        digest = digest_of(invocation)
        data = encode_values(invocation, digest.sha256, digest.size, 512)
        if invocation is LARGE:
            assert compressors.decompress(data[34:])  # the body is one zstd frame
        assert record.verified(data, digest.ref) is not None
        assert record.verified(data, digest_of(OTHER).ref) is None
        assert record.verified(corrupt(data), Ref(str(digest.ref))) is None, name


def test_bytes_once_sound_are_known_by_their_hash_and_any_change_is_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`Verifier`: the full check runs once per distinct bytes; a record read sound and
    then changed by one byte (or planted under another ref) is checked again, and refused."""
    calls: list[bytes] = []
    check = record.verified

    def counted(data: bytes, ref: Ref) -> record.Record | None:
        calls.append(data)
        return check(data, ref)

    monkeypatch.setattr(record, "verified", counted)
    verifier = Verifier(limit=2)
    invocation = {**SMALL, "args": json.dumps(SMALL["args"])}
    digest = digest_of(invocation)
    data = encode_values(invocation, digest.sha256, digest.size, 512)
    for _ in range(3):
        assert verifier(data, digest.ref) is not None
    assert len(calls) == 1
    flipped = data.replace(b"x = 1", b"x = 2")
    assert flipped != data
    assert verifier(flipped, digest.ref) is None
    assert len(calls) == 2
    other = digest_of({**invocation, "name": "other"})
    assert verifier(data, other.ref) is None  # sound bytes, but not what this ref names
    for n in range(3):  # the memory stays within its bound
        more = {**invocation, "result": f"r{n}"}
        d = digest_of(more)
        assert verifier(encode_values(more, d.sha256, d.size, 512), d.ref) is not None
    assert len(verifier) == 2


def test_the_verifier_keeps_at_most_its_characters_of_payloads() -> None:
    invocation = {**SMALL, "args": json.dumps(SMALL["args"])}
    digest = digest_of(invocation)
    data = encode_values(invocation, digest.sha256, digest.size, 512)
    small = Verifier(limit=10, chars=5)  # smaller than this record's payloads
    assert small(data, digest.ref) is not None
    assert len(small) == 0  # checked, not kept: the next read is checked again
    roomy = Verifier(limit=10)
    first = roomy(data, digest.ref)
    assert first is not None
    assert roomy(data, digest.ref) is first  # kept decoded: neither checked nor decoded


def test_a_record_is_sized_for_the_work_by_its_content_not_its_compressed_bytes() -> None:
    """A result of 2 MB that compresses to a few KB is still 2 MB of checking: the store
    sends its check to the worker threads by this size."""
    invocation = {"name": "read_file", "args": "{}", "result": "line\n" * 400_000, "isError": False}
    digest = digest_of(invocation)
    data = encode_values(invocation, digest.sha256, digest.size, 512)
    assert len(data) < 50_000
    assert record.work_size(data) > 2_000_000
    assert compressors.inflated_size(b"not a frame") == len(b"not a frame")
