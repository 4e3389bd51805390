"""Register, findMissing, resolve and GET, in-process against a real engine."""

from __future__ import annotations

import json
from typing import Any

import httpx
import msgpack
import pytest
from redis.asyncio import Redis

from tests.support.records import encode_values
from toolref.wire.canonical import Ref, digest_of, invocation_digest
from toolref_server.storage import record
from toolref_server.storage.store import Store

READ = {"name": "read_file", "args": {"path": "src/app.py"}, "result": "print('hi')\n"}
SHELL = {"name": "bash", "args": '{"command": "ls"}', "result": "a\nb\n", "isError": True}


async def register(api: httpx.AsyncClient, *invocations: dict[str, Any]) -> list[dict[str, Any]]:
    response = await api.post("/v1/invocations", json={"invocations": list(invocations)})
    assert response.status_code == 200, response.text
    refs: list[dict[str, Any]] = response.json()["refs"]
    return refs


async def test_register_returns_refs_sizes_and_newness_in_order(api: httpx.AsyncClient) -> None:
    first = await register(api, READ, SHELL)
    assert [r["ref"] for r in first] == [digest_of(READ).ref, digest_of(SHELL).ref]
    assert [r["size"] for r in first] == [digest_of(READ).size, digest_of(SHELL).size]
    assert [r["new"] for r in first] == [True, True]
    again = await register(api, SHELL, READ, READ)
    assert [r["new"] for r in again] == [False, False, False]
    assert [r["ref"] for r in again] == [first[1]["ref"], first[0]["ref"], first[0]["ref"]]


async def test_duplicate_in_one_batch_is_new_once(api: httpx.AsyncClient) -> None:
    refs = await register(api, READ, READ)
    assert [r["new"] for r in refs] == [True, False]


async def test_is_error_defaults_to_false_and_is_part_of_identity(api: httpx.AsyncClient) -> None:
    without = await register(api, READ)
    explicit = await register(api, {**READ, "isError": False})
    failed = await register(api, {**READ, "isError": True})
    assert without[0]["ref"] == explicit[0]["ref"] != failed[0]["ref"]


async def test_key_order_does_not_change_the_ref(api: httpx.AsyncClient) -> None:
    reordered = {"result": READ["result"], "args": READ["args"], "name": READ["name"]}
    assert (await register(api, READ))[0]["ref"] == (await register(api, reordered))[0]["ref"]


async def test_resolve_returns_invocations_and_missing(api: httpx.AsyncClient) -> None:
    [read] = await register(api, READ)
    unknown = str(invocation_digest("never", {}, "registered").ref)
    response = await api.post(
        "/v1/invocations:resolve", json={"refs": [read["ref"], unknown, read["ref"]]}
    )
    assert response.status_code == 200
    assert response.json() == {
        "invocations": {read["ref"]: {**READ, "isError": False}},
        "missing": [unknown],
    }


async def test_find_missing(api: httpx.AsyncClient) -> None:
    [read] = await register(api, READ)
    unknown = str(invocation_digest("never", {}, "registered").ref)
    response = await api.post(
        "/v1/invocations:findMissing", json={"refs": [unknown, read["ref"], unknown]}
    )
    assert response.json() == {"missing": [unknown]}
    empty = await api.post("/v1/invocations:findMissing", json={"refs": []})
    assert empty.json() == {"missing": []}


async def test_get_one_invocation_with_etag_and_304(api: httpx.AsyncClient) -> None:
    [shell] = await register(api, SHELL)
    response = await api.get(f"/v1/invocations/{shell['ref']}")
    assert response.status_code == 200
    assert response.json() == SHELL
    etag = response.headers["etag"]
    assert etag == f'"{digest_of(SHELL).hex}"'
    assert "immutable" in response.headers["cache-control"]
    cached = await api.get(f"/v1/invocations/{shell['ref']}", headers={"If-None-Match": etag})
    assert cached.status_code == 304
    assert cached.content == b""


async def test_payloads_are_stored_as_written_and_refs_hash_the_canonical_form(
    api: httpx.AsyncClient,
) -> None:
    """Found in review: docs/api.md says registration stores payloads as written, but
    `POST /v1/invocations` stored them re-encoded (`1e5` came back as `100000.0`, escapes
    and key order rewritten). Each payload is kept as the JSON text the client wrote now
    (what a parser keeps of it: a repeated key's last value), and its ref still hashes the
    canonical JSON, so the same invocation written another way is the same ref."""
    args = '{"x": 1e5, "b": [1.0, -0.0], "a": "caf\\u00e9"}'
    result = '{"ok":true,"n":2.50}'
    text = (
        '{"invocations": [{"name": "calc", "args": '
        + args
        + ', "result": 1, "result": '
        + result
        + "}]}"
    )
    response = await api.post(
        "/v1/invocations", content=text.encode(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 200, response.text
    [registered] = response.json()["refs"]
    same = {"name": "calc", "args": json.loads(args), "result": json.loads(result)}
    assert registered["ref"] == digest_of(same).ref
    written = '{"name":"calc","args":' + args + ',"result":' + result + ',"isError":false}'
    got = await api.get(f"/v1/invocations/{registered['ref']}")
    assert got.text == written
    resolved = await api.post("/v1/invocations:resolve", json={"refs": [registered["ref"]]})
    assert (
        resolved.text
        == '{"invocations":{"' + registered["ref"] + '":' + written + '},"missing":[]}'
    )
    # Written another way (compact, `100000`): the same ref, and the first spelling kept.
    again = await register(api, same)
    assert again == [{**registered, "new": False}]
    assert (await api.get(f"/v1/invocations/{registered['ref']}")).text == written


async def test_a_msgpack_body_is_stored_as_compact_json(api: httpx.AsyncClient) -> None:
    """msgpack carries values, not JSON text: its payloads are kept as compact JSON."""
    value = {"name": "calc", "args": {"x": 1e5}, "result": "r"}
    response = await api.post(
        "/v1/invocations",
        content=msgpack.packb({"invocations": [value]}),
        headers={"Content-Type": "application/msgpack"},
    )
    [registered] = response.json()["refs"]
    got = await api.get(f"/v1/invocations/{registered['ref']}")
    assert got.text == '{"name":"calc","args":{"x":100000.0},"result":"r","isError":false}'


async def test_get_unknown_is_404_problem(api: httpx.AsyncClient) -> None:
    unknown = invocation_digest("never", {}, "registered").ref
    response = await api.get(f"/v1/invocations/{unknown}")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == "urn:toolref:problem:not-found"


async def test_one_mib_over_json_resolves_equal_over_msgpack(api: httpx.AsyncClient) -> None:
    lines = [
        f'{i:06d}: {"é" if i % 7 else "😀"} line of a large file\tx="{i}"' for i in range(24_000)
    ]
    big = {
        "name": "read_file",
        "args": {"path": "big.txt", "limit": None, "ratio": 0.25, "id": 2**63 + 5},
        "result": {"content": "\n".join(lines), "lines": len(lines), "ok": True},
    }
    body = json.dumps({"invocations": [big]}).encode()
    assert len(body) > 2**20
    [registered] = await register(api, big)
    assert registered["size"] == digest_of(big).size > 2**20
    response = await api.post(
        "/v1/invocations:resolve",
        content=msgpack.packb({"refs": [registered["ref"]]}),
        headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"},
    )
    assert response.headers["content-type"] == "application/msgpack"
    decoded = msgpack.unpackb(response.content, raw=False)
    back = decoded["invocations"][registered["ref"]]
    assert back == {**big, "isError": False}
    assert digest_of(back) == digest_of(big)


async def test_msgpack_request_and_json_response(api: httpx.AsyncClient) -> None:
    response = await api.post(
        "/v1/invocations",
        content=msgpack.packb({"invocations": [READ]}),
        headers={"Content-Type": "application/msgpack"},
    )
    assert response.headers["content-type"] == "application/json"
    assert response.json()["refs"][0]["ref"] == digest_of(READ).ref


async def test_accept_quality_decides_the_encoding(api: httpx.AsyncClient) -> None:
    prefer_json = await api.get(
        "/v1/capabilities", headers={"Accept": "application/msgpack;q=0.5, application/json"}
    )
    assert prefer_json.headers["content-type"] == "application/json"
    prefer_msgpack = await api.get(
        "/v1/capabilities", headers={"Accept": "application/json;q=0.2, application/msgpack"}
    )
    assert prefer_msgpack.headers["content-type"] == "application/msgpack"
    assert msgpack.unpackb(prefer_msgpack.content)["protocol"] == {"low": 1, "high": 2}


async def test_stored_bytes_use_the_documented_record_layout(
    api: httpx.AsyncClient, redis: Redis
) -> None:
    text = "repetitive tool output line\n" * 400
    [small, large] = await register(api, READ, {**READ, "result": text})
    raw_small: bytes = await redis.get(Store.key("local", Ref(small["ref"])))  # type: ignore[assignment]
    raw_large: bytes = await redis.get(Store.key("local", Ref(large["ref"])))  # type: ignore[assignment]
    assert raw_small[record.DIGEST_START : record.DIGEST_END] == digest_of(READ).sha256
    assert record.decode(raw_large).invocation()["result"] == text
    assert len(raw_large) < len(text) / 4  # compressed
    assert record.decode(raw_small).size == small["size"]


async def test_big_integers_survive_storage(api: httpx.AsyncClient) -> None:
    huge = {"name": "t", "args": {"id": 2**80, "neg": -(2**70)}, "result": [2**64, 2**63 - 1]}
    [registered] = await register(api, huge)
    back = await api.get(f"/v1/invocations/{registered['ref']}")
    assert back.json() == {**huge, "isError": False}
    as_msgpack = await api.get(
        f"/v1/invocations/{registered['ref']}", headers={"Accept": "application/msgpack"}
    )
    ext = msgpack.unpackb(as_msgpack.content, raw=False)["args"]["id"]
    assert ext == msgpack.ExtType(1, str(2**80).encode())


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
async def test_compressed_request_bodies(api: httpx.AsyncClient, encoding: str) -> None:
    import gzip

    import zstandard

    raw = json.dumps({"invocations": [READ, SHELL]}).encode()
    packed = gzip.compress(raw) if encoding == "gzip" else zstandard.compress(raw)
    response = await api.post(
        "/v1/invocations",
        content=packed,
        headers={"Content-Type": "application/json", "Content-Encoding": encoding},
    )
    assert response.status_code == 200, response.text
    assert [r["ref"] for r in response.json()["refs"]] == [
        digest_of(READ).ref,
        digest_of(SHELL).ref,
    ]


async def test_gzip_with_several_members(api: httpx.AsyncClient) -> None:
    import gzip

    raw = json.dumps({"invocations": [READ]}).encode()
    packed = gzip.compress(raw[:10]) + gzip.compress(raw[10:])
    response = await api.post(
        "/v1/invocations",
        content=packed,
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert response.status_code == 200, response.text


async def test_ref_collision_is_409_and_never_served(api: httpx.AsyncClient, redis: Redis) -> None:
    ref = digest_of(READ).ref
    # Plant a record from a different invocation under READ's key, as a 128-bit collision would.
    other = digest_of(SHELL)
    planted = encode_values(SHELL, other.sha256, other.size, 512)
    await redis.set(Store.key("local", ref), planted)
    response = await api.post("/v1/invocations", json={"invocations": [READ]})
    assert response.status_code == 409
    problem = response.json()
    assert problem["type"] == "urn:toolref:problem:ref-collision"
    assert problem["collidingRefs"] == [ref]
    assert await redis.get(Store.key("local", ref)) == planted  # never overwritten
    resolved = await api.post("/v1/invocations:resolve", json={"refs": [ref]})
    assert resolved.json() == {"invocations": {}, "missing": [ref]}
    assert (await api.get(f"/v1/invocations/{ref}")).status_code == 404
