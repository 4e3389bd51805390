"""Every kind of bad input: a 4xx problem+json that says what to fix, and nothing stored."""

from __future__ import annotations

import gzip
import json
from typing import Any

import httpx
import msgpack
import pytest
import zstandard
from redis.asyncio import Redis

from ..conftest import Api, snapshot

GOOD = {"name": "read_file", "args": {"path": "a.py"}, "result": "x = 1\n"}
JSON = {"Content-Type": "application/json"}


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


def bomb(encoding: str, size: int) -> bytes:
    """A small body that inflates to `size` bytes of valid-looking JSON."""
    prefix = b'{"invocations":[{"name":"t","args":{},"result":"'
    raw = prefix + b"a" * size + b'"}]}'
    return gzip.compress(raw) if encoding == "gzip" else zstandard.compress(raw)


CASES: list[tuple[str, dict[str, Any], int, str, str]] = [
    # (name, request kwargs, status, problem slug, a phrase the detail must contain)
    (
        "malformed json",
        {"content": b'{"invocations": [', "headers": JSON},
        400,
        "malformed-body",
        "not valid JSON",
    ),
    (
        "not utf-8",
        {"content": b'{"invocations": ["\xff"]}', "headers": JSON},
        400,
        "malformed-body",
        "UTF-8",
    ),
    ("empty body", {"content": b"", "headers": JSON}, 400, "malformed-body", "empty"),
    (
        "malformed msgpack",
        {"content": b"\xc1\x00\x01", "headers": {"Content-Type": "application/msgpack"}},
        400,
        "malformed-body",
        "msgpack",
    ),
    (
        "truncated msgpack",
        {
            "content": msgpack.packb({"invocations": [GOOD]})[:-3],
            "headers": {"Content-Type": "application/msgpack"},
        },
        400,
        "malformed-body",
        "msgpack",
    ),
    (
        "msgpack binary value",
        {
            "content": msgpack.packb(
                {"invocations": [{**GOOD, "result": b"\x00raw"}]}, use_bin_type=True
            ),
            "headers": {"Content-Type": "application/msgpack"},
        },
        422,
        "unsupported-value",
        "bytes",
    ),
    (
        "msgpack integer key",
        {
            "content": msgpack.packb({"invocations": [{**GOOD, "args": {1: "x"}}]}),
            "headers": {"Content-Type": "application/msgpack"},
        },
        422,
        "unsupported-value",
        "keys are strings",
    ),
    (
        "unsupported content type",
        {"content": b"invocations=1", "headers": {"Content-Type": "text/plain"}},
        415,
        "unsupported-media-type",
        "application/json",
    ),
    (
        "no content type",
        {"content": json.dumps({"invocations": [GOOD]}).encode()},
        415,
        "unsupported-media-type",
        "Content-Type",
    ),
    (
        "unsupported content encoding",
        {"content": b"xx", "headers": {**JSON, "Content-Encoding": "br"}},
        415,
        "unsupported-media-type",
        "gzip, zstd",
    ),
    (
        "corrupt gzip",
        {"content": b"\x1f\x8b\x08\x00garbage", "headers": {**JSON, "Content-Encoding": "gzip"}},
        400,
        "malformed-body",
        "gzip",
    ),
    (
        "truncated gzip",
        {
            "content": gzip.compress(json.dumps({"invocations": [GOOD]}).encode())[:-12],
            "headers": {**JSON, "Content-Encoding": "gzip"},
        },
        400,
        "malformed-body",
        "truncated",
    ),
    (
        "corrupt zstd",
        {"content": b"\x28\xb5\x2f\xfdgarbage", "headers": {**JSON, "Content-Encoding": "zstd"}},
        400,
        "malformed-body",
        "zstd",
    ),
    (
        "body over the limit",
        {
            "content": json.dumps({"invocations": [{**GOOD, "result": "a" * 70_000}]}).encode(),
            "headers": JSON,
        },
        413,
        "body-too-large",
        "limit of 65536",
    ),
    (
        "gzip bomb",
        {"content": bomb("gzip", 10_000_000), "headers": {**JSON, "Content-Encoding": "gzip"}},
        413,
        "decompressed-too-large",
        "inflates past",
    ),
    (
        "zstd bomb",
        {"content": bomb("zstd", 10_000_000), "headers": {**JSON, "Content-Encoding": "zstd"}},
        413,
        "decompressed-too-large",
        "inflates past",
    ),
    (
        "nesting too deep",
        {"json": {"invocations": [{**GOOD, "args": nested(40)}]}},
        422,
        "nesting-too-deep",
        "deeper than 32",
    ),
    (
        "absurd nesting",
        {"content": b"[" * 30_000 + b"]" * 30_000, "headers": JSON},
        422,
        "nesting-too-deep",
        "deeper than 32",
    ),
    (
        "NaN",
        {"content": b'{"invocations":[{"name":"t","args":NaN,"result":1}]}', "headers": JSON},
        422,
        "non-finite-number",
        "NaN",
    ),
    (
        "Infinity",
        {
            "content": b'{"invocations":[{"name":"t","args":{"x":-Infinity},"result":1}]}',
            "headers": JSON,
        },
        422,
        "non-finite-number",
        "Infinity",
    ),
    (
        "overflowing float",
        {"content": b'{"invocations":[{"name":"t","args":1e999,"result":1}]}', "headers": JSON},
        422,
        "non-finite-number",
        "inf",
    ),
    (
        "msgpack NaN",
        {
            "content": msgpack.packb({"invocations": [{**GOOD, "result": float("nan")}]}),
            "headers": {"Content-Type": "application/msgpack"},
        },
        422,
        "non-finite-number",
        "nan",
    ),
    (
        "lone surrogate",
        {"content": b'{"invocations":[{"name":"t","args":"\\udc00","result":1}]}', "headers": JSON},
        422,
        "not-canonicalizable",
        "surrogate",
    ),
    (
        "batch over the maximum",
        {"json": {"invocations": [GOOD] * 11}},
        413,
        "batch-too-large",
        "limit of 10",
    ),
    (
        "missing member",
        {"json": {"invocations": [{"name": "t", "args": {}}]}},
        422,
        "validation-failed",
        "/invocations/0/result",
    ),
    (
        "wrong type",
        {"json": {"invocations": [{**GOOD, "name": 7}]}},
        422,
        "validation-failed",
        "/invocations/0/name",
    ),
    (
        "string isError",
        {"json": {"invocations": [{**GOOD, "isError": "true"}]}},
        422,
        "validation-failed",
        "isError",
    ),
    (
        "unknown member",
        {"json": {"invocations": [{**GOOD, "toolCallId": "c1"}]}},
        422,
        "validation-failed",
        "toolCallId",
    ),
    ("not an object", {"json": [GOOD]}, 422, "validation-failed", "RegisterRequest"),
    (
        "bad protocol header",
        {"json": {"invocations": [GOOD]}, "headers": {"Toolref-Protocol": "two"}},
        400,
        "invalid-protocol",
        "integer",
    ),
    (
        "protocol zero",
        {"json": {"invocations": [GOOD]}, "headers": {"Toolref-Protocol": "0"}},
        400,
        "invalid-protocol",
        "integer",
    ),
]


@pytest.fixture
async def strict_api(make_api: Api) -> httpx.AsyncClient:
    return await make_api(
        max_body_bytes=65_536, max_decompressed_bytes=1_000_000, max_depth=32, max_batch=10
    )


@pytest.mark.parametrize(
    ("request_kwargs", "status", "slug", "phrase"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
async def test_bad_register_is_refused_and_stores_nothing(
    strict_api: httpx.AsyncClient,
    redis: Redis,
    request_kwargs: dict[str, Any],
    status: int,
    slug: str,
    phrase: str,
) -> None:
    await strict_api.post("/v1/invocations", json={"invocations": [{**GOOD, "result": "seed"}]})
    before = await snapshot(redis)
    response = await strict_api.post("/v1/invocations", **request_kwargs)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == f"urn:toolref:problem:{slug}"
    assert problem["status"] == status
    assert problem["title"]
    assert phrase in problem["detail"], problem["detail"]
    assert await snapshot(redis) == before


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/invocations:findMissing", {"refs": ["tr_short"]}),
        (
            "/v1/invocations:resolve",
            {"refs": ["tr_wnzvojnptnbbakachpkv654p2m", "TR_WNZVOJNPTNBBAKACHPKV654P2M"]},
        ),
    ],
)
async def test_malformed_ref_is_422_naming_its_position(
    api: httpx.AsyncClient, path: str, body: dict[str, Any]
) -> None:
    response = await api.post(path, json=body)
    assert response.status_code == 422
    problem = response.json()
    assert problem["type"] == "urn:toolref:problem:invalid-ref"
    assert f"/refs/{len(body['refs']) - 1}" in problem["detail"]
    assert "use the ref exactly as the registry returned it" in problem["detail"]


async def test_malformed_ref_in_path_is_422(api: httpx.AsyncClient) -> None:
    response = await api.get("/v1/invocations/tr_notaref")
    assert response.status_code == 422
    assert response.json()["type"] == "urn:toolref:problem:invalid-ref"


async def test_refs_batch_over_the_maximum(strict_api: httpx.AsyncClient) -> None:
    refs = ["tr_" + "a" * 26] * 11
    for path in ("/v1/invocations:findMissing", "/v1/invocations:resolve"):
        response = await strict_api.post(path, json={"refs": refs})
        assert response.status_code == 413
        assert response.json()["type"] == "urn:toolref:problem:batch-too-large"


async def test_declared_length_over_the_limit_is_refused_before_reading(
    strict_api: httpx.AsyncClient,
) -> None:
    async def never_sent() -> Any:
        raise AssertionError("the service read a body it should have refused")
        yield b""  # pragma: no cover

    response = await strict_api.post(
        "/v1/invocations",
        content=never_sent(),
        headers={**JSON, "Content-Length": "70000"},
    )
    assert response.status_code == 413


async def test_unknown_route_and_method_are_problems(api: httpx.AsyncClient) -> None:
    missing = await api.get("/v1/nothing")
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/problem+json"
    wrong = await api.delete("/v1/invocations")
    assert wrong.status_code == 405
    assert wrong.json()["type"] == "urn:toolref:problem:method-not-allowed"
    # RFC 9110: a 405 lists the methods the path takes, and so does its detail.
    assert wrong.headers["allow"] == "POST"
    assert "use POST" in wrong.json()["detail"]
    page = await api.post("/v1/capabilities")
    assert page.status_code == 405
    assert page.headers["allow"] == "GET, HEAD"


@pytest.mark.parametrize("header", [b"\xb2", b"\xb9", "\u0663".encode()])
async def test_non_ascii_digits_are_not_protocol_versions(
    api: httpx.AsyncClient, header: bytes
) -> None:
    # Latin-1 0xB2 is SUPERSCRIPT TWO, which str.isdigit() accepts but int() does not.
    response = await api.get("/v1/capabilities", headers={b"Toolref-Protocol": header})
    assert response.status_code == 400
    assert response.json()["type"] == "urn:toolref:problem:invalid-protocol"


async def test_lone_surrogate_in_a_ref_is_a_422_problem(api: httpx.AsyncClient) -> None:
    response = await api.post(
        "/v1/invocations:findMissing",
        content=b'{"refs":["\\ud800"]}',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422
    assert response.json()["type"] == "urn:toolref:problem:invalid-ref"


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/invocations/"), ("GET", "/healthz/"), ("POST", "/v1/invocations:resolve/")],
)
async def test_trailing_slash_is_a_404_problem_not_a_redirect(
    api: httpx.AsyncClient, method: str, path: str
) -> None:
    response = await api.request(method, path, json={"refs": []})
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize(
    ("path", "member", "value"),
    [
        ("/v1/messages:hydrate", "keepRecent", "3"),  # a string of digits
        ("/v1/messages:hydrate", "keepRecent", True),  # a boolean is no integer
        ("/v1/messages:hydrate", "maxChars", "400"),
        ("/v1/context:handoff", "maxToolContextChars", "40000"),
        ("/v1/context:handoff", "perResultChars", False),
        ("/v1/context:handoff", "summarizeText", 0),  # a number is no boolean
        ("/v1/context:handoff", "summarizeText", "true"),
    ],
)
async def test_members_take_only_the_json_type_the_document_declares(
    api: httpx.AsyncClient, path: str, member: str, value: Any
) -> None:
    """Before, pydantic's lax mode took `"3"` for an integer and `0` for a boolean, which
    the published schema refuses (schemathesis: schema-violating requests accepted)."""
    response = await api.post(path, json={"messages": [], member: value})
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["type"] == "urn:toolref:problem:validation-failed"
    assert problem["errors"][0]["pointer"] == f"/{member}"
    # The same member as the document's type is taken; an integer as 5.0 too (JSON Schema's).
    fine = {"keepRecent": 3.0, "maxChars": 400, "maxToolContextChars": 40000}
    right = fine.get(member, 4000 if member == "perResultChars" else True)
    assert (await api.post(path, json={"messages": [], member: right})).status_code == 200


async def test_a_summarizer_not_offered_is_refused_in_protocol_1_too(
    api: httpx.AsyncClient,
) -> None:
    """Protocol 1 sends the messages back as they came, but a summarizer this server does
    not offer is still a mistake, refused as in protocol 2 (before: taken unread)."""
    body = {"messages": [], "summarizer": "nope"}
    for protocol in ("1", "2"):
        response = await api.post(
            "/v1/messages:hydrate", json=body, headers={"Toolref-Protocol": protocol}
        )
        assert response.status_code == 422, (protocol, response.text)
        assert "summarizer 'nope' is not offered here" in response.json()["detail"]
