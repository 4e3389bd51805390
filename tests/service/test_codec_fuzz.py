"""Fuzzed request bodies against every POST endpoint: never a 5xx, always a problem.

Each example POSTs one body to the in-process app on the real engine, with a Content-Type
(JSON or msgpack, sometimes another), a Content-Encoding (gzip, zstd, identity, none, or
one the service does not support) and an Accept. The bodies come in families:

- `bytes`: arbitrary bytes;
- `mutated`: a valid JSON or msgpack body of the endpoint, truncated, with bytes flipped,
  deleted, duplicated, or with random bytes or JSON tokens spliced in;
- `substituted`: a valid body with one value (anywhere in the tree) replaced by an awkward
  one: lone surrogates, NaN, 1e999, a 5000-digit number, deep nesting, msgpack bin / ext /
  timestamps / integer keys...;
- `compressed`: gzip or zstd frames of garbage, of mutated bodies and of valid bodies, some
  of those frames then truncated or flipped;
- `framed`: the gzip or zstd magic followed by garbage.

The content type, encoding and body are drawn independently, so msgpack labelled as JSON,
gzip labelled as zstd and compressed bodies sent without a Content-Encoding all occur.

The properties: no 5xx (an unhandled exception fails the example outright: the in-process
transport re-raises it); every 4xx is `application/problem+json` with `type`, `title`,
`status` and `detail`, and leaves the engine's keyspace exactly as it was; a 2xx answers in
the media type Accept asked for, and changes the keyspace only by adding records of the
local tenant on the endpoints that store (register, optimize, hydrate) -- a mutation can
turn a valid body into another valid one, which then rightly stores. Nothing existing is
ever overwritten or removed.

Run with `--hypothesis-show-statistics` to see which status each family got.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable
from typing import Any, Final

import httpx
import msgpack
import pytest
import zstandard
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from toolref.edits.wire import MEDIA_TYPE as EDIT_TYPE
from toolref.sending.editor import Editor
from toolref.wire import encoding
from toolref.wire.canonical import digest_of
from toolref_server.app import create_app
from toolref_server.settings import Settings

from ..conftest import key_names, snapshot

JSON: Final = "application/json"
MSGPACK: Final = "application/msgpack"
PROBLEM: Final = "application/problem+json"

POST_PATHS: Final = (
    "/v1/invocations",
    "/v1/invocations:findMissing",
    "/v1/invocations:resolve",
    "/v1/messages:optimize",
    "/v1/messages:hydrate",
    "/v1/context:handoff",
)
# Endpoints that may store records (a valid body registers what it carries).
STORING: Final = frozenset({"/v1/invocations", "/v1/messages:optimize", "/v1/messages:hydrate"})

# Held before every example: the hydrate and handoff bodies carry a marker for SEED.
SEED: Final = {"name": "bash", "args": '{"cmd": "ls"}', "result": "app.py\nREADME.md\n"}
SEED_REF: Final = str(digest_of(SEED).ref)
UNKNOWN_REF: Final = str(digest_of({"name": "never", "args": {}, "result": "registered"}).ref)


def _marked(ref: str) -> list[dict[str, Any]]:
    """openai-chat: an assistant tool call and its result, both carrying `ref`."""
    return [
        {"role": "user", "content": "list the files"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "toolRef": ref}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "toolRef": ref},
        {"role": "assistant", "content": "Two files."},
    ]


def _full() -> list[dict[str, Any]]:
    """openai-chat with one complete tool call."""
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Read app.py"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "app.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "import os\n" * 3},
        {"role": "assistant", "content": "Done."},
    ]


def _anthropic() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Run the tests"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Running."},
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "pytest"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": "1 failed",
                    "is_error": True,
                }
            ],
        },
    ]


# One valid body per endpoint: what the mutations start from.
VALID: Final[dict[str, Any]] = {
    "/v1/invocations": {
        "invocations": [{"name": "fuzz_tool", "args": {"q": "fuzz", "n": 3}, "result": "ok"}]
    },
    "/v1/invocations:findMissing": {"refs": [SEED_REF, UNKNOWN_REF]},
    "/v1/invocations:resolve": {"refs": [SEED_REF, UNKNOWN_REF]},
    "/v1/messages:optimize": {"format": "openai-chat", "messages": _full()},
    "/v1/messages:hydrate": {"messages": _marked(SEED_REF), "mode": "full"},
    "/v1/context:handoff": {"messages": _anthropic(), "maxToolContextChars": 4000},
}

# Raw JSON texts put in place of one value of a valid body.
JSON_TOKENS: Final = (
    b'"\\ud800"',  # a lone high surrogate
    b'"x\\udfffy"',  # a lone low surrogate inside text
    b'"\\ud83d\\ude00"',  # a valid pair (an emoji): fine
    b'"\\u0000"',
    b"NaN",
    b"-Infinity",
    b"1e999",
    b"-0",
    b"1.5e-400",
    b"123456789012345678901234567890",
    b"1" * 5000,  # past Python's int digit limit
    b"[" * 300 + b"]" * 300,
    b'{"a":' * 200 + b"1" + b"}" * 200,
    b"[]",
    b"{}",
    b"null",
    b"true",
    b'""',
    b'"tr_' + b"a" * 26 + b'"',
    b'"' + UNKNOWN_REF.encode() + b'"',
    b'{"toolRef":"' + UNKNOWN_REF.encode() + b'"}',
    b'"\xff\xfe"',  # not UTF-8
    b'"\\x41"',  # not a JSON escape
    b"01",
    b"'single'",
)


def _nested_list(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


# Python values put in place of one value of a valid msgpack body.
MSGPACK_VALUES: Final[tuple[Any, ...]] = (
    float("nan"),
    float("-inf"),
    2**64,  # ext type 1: exact big integer
    -(2**70),
    msgpack.ExtType(1, b"1" * 5000),
    msgpack.ExtType(1, b"12a"),
    msgpack.ExtType(1, b""),
    msgpack.ExtType(42, b"\x00"),
    msgpack.Timestamp(1, 0),
    b"\x00raw bytes",
    {1: "integer key"},
    {b"bin": "bin key"},
    {None: "nil key"},
    _nested_list(200),
    None,
    True,
    "",
    "x" * 5000,
    UNKNOWN_REF,
    {"toolRef": UNKNOWN_REF},
)

ENCODINGS: Final = ("gzip", "zstd", "identity", None, "br", "deflate", "gzip, zstd", "x-fuzz")
CONTENT_TYPES: Final = (
    JSON,
    MSGPACK,
    JSON,
    MSGPACK,
    "application/x-msgpack",
    "application/problem+json",
    "text/plain",
    None,
)


def _packb(value: Any) -> bytes:
    return encoding.packb(value)


def _encode(value: Any, as_msgpack: bool) -> bytes:
    return _packb(value) if as_msgpack else json.dumps(value).encode()


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every position in a JSON tree, the root included."""
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths(child, (*prefix, index))
    return found


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {k: _replaced(v, rest, new) if k == head else v for k, v in value.items()}
    return [_replaced(v, rest, new) if i == head else v for i, v in enumerate(value)]


_PLACEHOLDER: Final = "@@fuzz-placeholder@@"


@st.composite
def substituted(draw: st.DrawFn, path: str) -> tuple[str, bytes]:
    """A valid body with one value replaced by an awkward one (JSON text or msgpack)."""
    valid = VALID[path]
    where = draw(st.sampled_from(_paths(valid)), label="replaced at")
    if draw(st.booleans(), label="msgpack"):
        new = draw(st.sampled_from(MSGPACK_VALUES), label="msgpack value")
        return "msgpack", _packb(_replaced(valid, where, new))
    token = draw(st.sampled_from(JSON_TOKENS), label="json token")
    text = json.dumps(_replaced(valid, where, _PLACEHOLDER)).encode()
    return "json", text.replace(json.dumps(_PLACEHOLDER).encode(), token)


@st.composite
def mutated(draw: st.DrawFn, body: bytes) -> bytes:
    """`body` with one random change: what a broken encoder or a bad proxy might send."""
    kind = draw(st.sampled_from(["truncate", "flip", "splice", "token", "delete", "twice"]))
    if not body:
        return draw(st.binary(max_size=64))
    at = draw(st.integers(0, len(body) - 1), label="position")
    if kind == "truncate":
        return body[:at] if draw(st.booleans()) else body[at + 1 :]
    if kind == "flip":
        out = bytearray(body)
        for _ in range(draw(st.integers(1, 4), label="flips")):
            i = draw(st.integers(0, len(out) - 1), label="flipped")
            out[i] ^= draw(st.integers(1, 255), label="xor")
        return bytes(out)
    if kind == "splice":
        return body[:at] + draw(st.binary(min_size=1, max_size=16)) + body[at:]
    if kind == "token":
        return body[:at] + draw(st.sampled_from(JSON_TOKENS)) + body[at:]
    if kind == "delete":
        end = draw(st.integers(at + 1, min(len(body), at + 32)))
        return body[:at] + body[end:]
    return body + body  # trailing data


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def _zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(write_checksum=True).compress(data)


COMPRESS: Final[dict[str, Callable[[bytes], bytes]]] = {"gzip": _gzip, "zstd": _zstd}
MAGIC: Final = {"gzip": b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", "zstd": b"\x28\xb5\x2f\xfd"}


@st.composite
def fuzzed_request(draw: st.DrawFn, path: str) -> tuple[str, dict[str, str], bytes]:
    """(family, headers, body) for one POST to `path`."""
    family = draw(
        st.sampled_from(["bytes", "mutated", "substituted", "substituted", "compressed", "framed"]),
        label="family",
    )
    as_msgpack = draw(st.booleans(), label="base is msgpack")
    valid = _encode(VALID[path], as_msgpack)
    compressor: str | None = None
    if family == "bytes":
        body = draw(st.binary(max_size=2048), label="bytes")
    elif family == "mutated":
        body = draw(mutated(valid), label="mutated")
    elif family == "substituted":
        kind, body = draw(substituted(path), label="substituted")
        as_msgpack = kind == "msgpack"
    elif family == "compressed":
        compressor = draw(st.sampled_from(["gzip", "zstd"]), label="compressor")
        inner = draw(
            st.one_of(st.binary(max_size=1024), mutated(valid), st.just(valid)), label="inflates to"
        )
        body = COMPRESS[compressor](inner)
        if draw(st.booleans(), label="then mutated"):
            body = draw(mutated(body), label="mutated frame")
    else:
        compressor = draw(st.sampled_from(["gzip", "zstd"]), label="magic")
        body = MAGIC[compressor] + draw(st.binary(max_size=512), label="after the magic")
    # Mostly (3 in 4) the type and encoding that fit the body; otherwise anything.
    fits = st.sampled_from([True, True, True, False])
    media: str | None = MSGPACK if as_msgpack else JSON
    if not draw(fits, label="type fits"):
        media = draw(st.sampled_from(CONTENT_TYPES), label="type")
    coding: str | None = compressor or draw(st.sampled_from(["identity", None]))
    if not draw(fits, label="encoding fits"):
        coding = draw(st.sampled_from(ENCODINGS), label="encoding")
    headers = {"Accept": draw(st.sampled_from([JSON, MSGPACK]), label="accept")}
    if media is not None:
        headers["Content-Type"] = media
    if coding is not None:
        headers["Content-Encoding"] = coding
    return family, headers, body


def assert_problem(response: httpx.Response) -> dict[str, Any]:
    """A 4xx answer is an RFC 9457 problem with every member the design promises."""
    assert 400 <= response.status_code < 500, response.text
    assert response.headers["content-type"] == PROBLEM, response.headers
    problem = response.json()
    assert isinstance(problem, dict), problem
    for member, kind in (("type", str), ("title", str), ("status", int), ("detail", str)):
        assert isinstance(problem.get(member), kind), (member, problem)
    assert problem["type"].startswith("urn:toolref:problem:"), problem
    assert problem["status"] == response.status_code, problem
    assert problem["title"], problem
    assert problem["detail"], problem
    return problem


async def check_request(
    api: httpx.AsyncClient,
    redis: Redis,
    path: str,
    family: str,
    headers: dict[str, str],
    body: bytes,
) -> None:
    seeded = await api.post("/v1/invocations", json={"invocations": [SEED]})
    assert seeded.status_code == 200, seeded.text
    before = await snapshot(redis)
    response = await api.post(path, content=body, headers=headers)
    assert response.status_code < 500, response.text
    after = await snapshot(redis)
    if response.status_code >= 400:
        problem = assert_problem(response)
        event(f"{family}: {response.status_code} {problem['type'].rsplit(':', 1)[1]}")
        assert after == before, f"a refused request changed the keyspace: {problem}"
        return
    event(f"{family}: {response.status_code}")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == headers["Accept"]
    # Records are immutable: nothing held before was changed or removed ...
    assert {k: after.get(k) for k in before} == before
    added = set(after) - set(before)
    # ... and only an endpoint that stores added anything, all of it the local tenant's.
    if path not in STORING:
        assert not added, added
    assert all(key.startswith(b"tr:local:") for key in added), added


FUZZ = settings(
    max_examples=150,
    deadline=None,
    # One app and one engine serve every example of a run, on purpose.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def test_every_post_endpoint_is_fuzzed() -> None:
    app = create_app(Settings(redis_url="unused"))
    posts = {
        route.path  # type: ignore[attr-defined]
        for route in app.routes
        if "POST" in (getattr(route, "methods", None) or ())
    }
    assert posts == {*POST_PATHS, APPLY}  # an edit is no JSON: fuzzed on its own, below
    assert set(VALID) == set(POST_PATHS)


async def test_the_valid_bodies_are_valid(api: httpx.AsyncClient, redis: Redis) -> None:
    """Control: unmutated, every base body is accepted in both encodings, so the mutations
    start from something the service takes."""
    await api.post("/v1/invocations", json={"invocations": [SEED]})
    for path, value in VALID.items():
        for as_msgpack in (False, True):
            media = MSGPACK if as_msgpack else JSON
            for name, compress in {"identity": None, **COMPRESS}.items():
                raw = _encode(value, as_msgpack)
                response = await api.post(
                    path,
                    content=raw if compress is None else compress(raw),
                    headers={"Content-Type": media, "Content-Encoding": name},
                )
                assert response.status_code == 200, (path, media, name, response.text)
    assert len(await key_names(redis)) >= 3


@pytest.mark.parametrize("path", POST_PATHS)
@FUZZ
@given(data=st.data())
async def test_fuzzed_bodies_get_problems_and_change_nothing(
    api: httpx.AsyncClient, redis: Redis, path: str, data: st.DataObject
) -> None:
    family, headers, body = data.draw(fuzzed_request(path), label="request")
    await check_request(api, redis, path, family, headers, body)


# --- POST /v1/edits:apply: bytes that claim to be an edit ---

APPLY: Final = "/v1/edits:apply"
APPLIED: Final = "application/vnd.toolref.request"


def _edits() -> tuple[bytes, bytes]:
    """A first edit (no base: every segment inline) and the next against the recipe it
    keeps, of a growing conversation, as a client's `Editor` writes them."""
    editor = Editor()
    made = []
    for turns in (2, 3):
        messages = [{"role": "user", "content": f"turn {n} " + "x" * 200} for n in range(turns)]
        body = json.dumps({"model": "m", "messages": messages}).encode()
        edit = editor.prepare([("content-type", JSON)], body, "messages")
        assert edit is not None
        editor.confirm(edit, edit.ref)
        made.append(edit.body)
    return made[0], made[1]


FIRST_EDIT, NEXT_EDIT = _edits()


@st.composite
def fuzzed_edit(draw: st.DrawFn) -> tuple[str, dict[str, str], bytes]:
    """(family, headers, body) for one POST to /v1/edits:apply: arbitrary bytes, a real
    edit as it is (a control), mutated, or compressed, mostly labelled as an edit."""
    families = ["bytes", "valid", "mutated", "mutated", "compressed"]
    family = draw(st.sampled_from(families), label="family")
    valid = draw(st.sampled_from([FIRST_EDIT, NEXT_EDIT]), label="edit")
    coding: str | None = None
    if family == "valid":
        body = valid
    elif family == "bytes":
        body = draw(st.binary(max_size=2048), label="bytes")
    elif family == "mutated":
        body = draw(mutated(valid), label="mutated")
    else:
        coding = draw(st.sampled_from(["gzip", "zstd"]), label="compressor")
        body = COMPRESS[coding](draw(st.one_of(st.just(valid), mutated(valid))))
    media = draw(st.sampled_from([EDIT_TYPE, EDIT_TYPE, EDIT_TYPE, JSON, None]), label="type")
    headers = {}
    if media is not None:
        headers["Content-Type"] = media
    if coding is not None or draw(st.integers(0, 3), label="says an encoding") == 0:
        headers["Content-Encoding"] = coding or draw(st.sampled_from((*ENCODINGS[:3], "br")))
    return family, headers, body


@FUZZ
@given(data=st.data())
async def test_fuzzed_edits_get_problems_and_refusals_change_nothing(
    api: httpx.AsyncClient, redis: Redis, data: st.DataObject
) -> None:
    """No 5xx; a refusal is a problem and leaves the keyspace as it was; an edit applied
    answers the request it stands for and only adds the local tenant's recipe keys (nodes,
    chunks, pieces), never changing one held."""
    kept = await api.post(APPLY, content=FIRST_EDIT, headers={"Content-Type": EDIT_TYPE})
    assert kept.status_code == 200, kept.text  # the base of NEXT_EDIT, held
    family, headers, body = data.draw(fuzzed_edit(), label="request")
    before = await snapshot(redis)
    response = await api.post(APPLY, content=body, headers=headers)
    assert response.status_code < 500, response.text
    after = await snapshot(redis)
    if response.status_code >= 400:
        problem = assert_problem(response)
        event(f"{family}: {response.status_code} {problem['type'].rsplit(':', 1)[1]}")
        assert after == before, f"a refused edit changed the keyspace: {problem}"
        return
    event(f"{family}: {response.status_code}")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == APPLIED
    assert response.headers["toolref-history"].startswith("tb_")
    assert {k: after.get(k) for k in before} == before
    added = set(after) - set(before)
    assert all(key.split(b":")[:3] in RECIPE_KEYS for key in added), added


RECIPE_KEYS: Final = [[b"tr", b"local", kind] for kind in (b"b", b"k", b"p")]


# --- what the fuzzing found, pinned as plain tests ---


@pytest.mark.parametrize("path", ["/v1/messages:optimize", "/v1/messages:hydrate"])
@pytest.mark.parametrize("text", ["\\ud800", "a\\udfffb", "\\udc00\\ud800"])
async def test_a_lone_surrogate_in_messages_is_a_422_problem(
    api: httpx.AsyncClient, redis: Redis, path: str, text: str
) -> None:
    """Found by `substituted`: a `\\ud800` escape decodes to a string no UTF-8 can carry;
    measuring or answering the messages then failed with UnicodeEncodeError (a 500)."""
    messages = json.dumps(_full()).replace("Read app.py", text)
    body = f'{{"messages": {messages}}}'.encode()
    before = await snapshot(redis)
    response = await api.post(path, content=body, headers={"Content-Type": JSON})
    problem = assert_problem(response)
    assert response.status_code == 422
    assert problem["type"] == "urn:toolref:problem:not-canonicalizable"
    assert "surrogate" in problem["detail"]
    assert await snapshot(redis) == before


async def test_a_lone_surrogate_in_a_handoff_is_a_422_problem(
    api: httpx.AsyncClient, redis: Redis
) -> None:
    for where in ("messages", "request"):
        body: dict[str, Any] = {"messages": _anthropic(), "requestFormat": "openai-chat"}
        body["request"] = [{"role": "user", "content": _PLACEHOLDER}]
        if where == "messages":
            body["messages"] = [{"role": "user", "content": _PLACEHOLDER}, *_anthropic()[1:]]
            body["request"] = [{"role": "user", "content": "next"}]
        raw = json.dumps(body).replace(_PLACEHOLDER, "\\ud800").encode()
        before = await snapshot(redis)
        response = await api.post(
            "/v1/context:handoff", content=raw, headers={"Content-Type": JSON}
        )
        problem = assert_problem(response)
        assert problem["type"] == "urn:toolref:problem:not-canonicalizable", where
        assert await snapshot(redis) == before


async def test_valid_surrogate_pairs_are_still_accepted(api: httpx.AsyncClient) -> None:
    """Control: an emoji escaped as a surrogate pair (Python's json.dumps default) is fine,
    and so is a backslash followed by `ud800` as plain text."""
    messages = json.dumps(_full()).replace("Read app.py", "\\ud83d\\ude00 \\\\ud800")
    response = await api.post(
        "/v1/messages:optimize",
        content=f'{{"messages": {messages}}}'.encode(),
        headers={"Content-Type": JSON},
    )
    assert response.status_code == 200, response.text
    assert response.json()["messages"][1]["content"] == "\U0001f600 \\ud800"


@pytest.mark.parametrize("path", POST_PATHS)
async def test_a_number_past_the_digit_limit_is_a_json_problem(
    api: httpx.AsyncClient, redis: Redis, path: str
) -> None:
    """Found by `substituted`: a 5000-digit JSON number was refused as "not valid msgpack"
    in a JSON body. It is valid JSON the service cannot read: a 422 that says so."""
    text = json.dumps(VALID[path]).encode()
    raw = text[:-1] + b', "big": ' + b"9" * 5000 + b"}"
    before = await snapshot(redis)
    response = await api.post(path, content=raw, headers={"Content-Type": JSON})
    problem = assert_problem(response)
    assert response.status_code == 422, problem
    assert problem["type"] == "urn:toolref:problem:unsupported-value"
    assert "msgpack" not in problem["detail"]
    assert "digits" in problem["detail"]
    assert await snapshot(redis) == before


@pytest.mark.parametrize("cut", [1, 4])
async def test_a_gzip_body_cut_short_is_refused_as_truncated(
    api: httpx.AsyncClient, cut: int
) -> None:
    """Control for the zstd test below: gzip's trailer (CRC and length) is required."""
    raw = _gzip(json.dumps(VALID["/v1/invocations:resolve"]).encode())
    response = await api.post(
        "/v1/invocations:resolve",
        content=raw[:-cut],
        headers={"Content-Type": JSON, "Content-Encoding": "gzip"},
    )
    assert assert_problem(response)["type"] == "urn:toolref:problem:malformed-body"
    assert "truncated" in response.json()["detail"]


@pytest.mark.parametrize("cut", [1, 4])
async def test_a_zstd_body_cut_short_is_refused_as_truncated(
    api: httpx.AsyncClient, cut: int
) -> None:
    """A frame missing the end of its checksum: once accepted (a strict xfail here), the
    checksum never checked; tests/adversarial/test_zstd_truncated.py has the rest."""
    raw = _zstd(json.dumps(VALID["/v1/invocations:resolve"]).encode())
    response = await api.post(
        "/v1/invocations:resolve",
        content=raw[:-cut],
        headers={"Content-Type": JSON, "Content-Encoding": "zstd"},
    )
    assert assert_problem(response)["type"] == "urn:toolref:problem:malformed-body"
    assert "truncated" in response.json()["detail"]


async def test_gzip_members_back_to_back_and_a_raw_deflate_stream(api: httpx.AsyncClient) -> None:
    """gzip allows several members in one body (RFC 1952); a bare deflate stream sent as gzip
    is a 400 problem, not an error."""
    text = json.dumps(VALID["/v1/invocations:resolve"]).encode()
    half = len(text) // 2
    two = _gzip(text[:half]) + _gzip(text[half:])
    response = await api.post(
        "/v1/invocations:resolve",
        content=two,
        headers={"Content-Type": JSON, "Content-Encoding": "gzip"},
    )
    assert response.status_code == 200, response.text
    bare = zlib.compress(text)
    response = await api.post(
        "/v1/invocations:resolve",
        content=bare,
        headers={"Content-Type": JSON, "Content-Encoding": "gzip"},
    )
    assert assert_problem(response)["type"] == "urn:toolref:problem:malformed-body"
