"""GET /openapi.json is accurate.

It lists exactly the app's routes (test_openapi_routes.py, the gateway's too), it is valid
OpenAPI 3.1, and every response the service gives is one it describes: status code, content
type, headers and body, for requests that schemathesis generates from the document itself
(valid and invalid alike) and for a register / resolve / GET round trip in JSON and in
msgpack.

schemathesis drives an in-process app on the real engine: its strategies make the requests,
httpx sends them through the same ASGI transport the other service tests use (the Redis
client lives on the test's event loop, which schemathesis's own ASGI transport would not
share), and `Case.validate_response` judges each answer.
"""

from __future__ import annotations

import datetime
import json
import pathlib
from dataclasses import dataclass
from typing import Any

import httpx
import jsonschema_rs
import msgpack
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import APIOperation, Case, CheckFunction, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.errors import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.specs.openapi.schemas import OpenApiSchema
from starlette.applications import Starlette
from starlette.routing import Route

from toolref.edits.wire import MEDIA_TYPE
from toolref.sending.editor import Editor
from toolref.wire import encoding
from toolref.wire.canonical import Ref, digest_of, invocation_digest
from toolref_server.app import create_app, open_redis
from toolref_server.http.auth import hash_key
from toolref_server.settings import Settings

from ..conftest import Api

JSON, MSGPACK, PROBLEM = "application/json", "application/msgpack", "application/problem+json"
EDIT = MEDIA_TYPE  # application/vnd.toolref.edit
APPLIED = "application/vnd.toolref.request"  # what POST /v1/edits:apply answers
BASE = "http://localhost:8750"
KEY = "openapi-test-key"
KEYS = f"acme={hash_key(KEY)}"
READ = {"name": "read_file", "args": {"path": "src/app.py"}, "result": "print('hi')\n"}
BIG = {"name": "lookup", "args": {"id": 2**70}, "result": [1.5, None, "ü"], "isError": True}
UNKNOWN = str(invocation_digest("never", {}, "registered").ref)
PAGES = ("/savings", "/docs")  # HTML for a person, whatever Accept says
# Integers beyond 64 bits travel in msgpack as ext type 1 holding their decimal digits.
BIGINT_EXT = 1

# What "the response is documented" means, check by check.
DOCUMENTED: list[CheckFunction] = [
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
# ... and not a 5xx either.
CONFORMANCE: list[CheckFunction] = [not_a_server_error, *DOCUMENTED]


def _ext_hook(code: int, data: bytes) -> Any:
    if code == BIGINT_EXT:
        return int(data)
    raise ValueError(f"unexpected msgpack ext type {code}")


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, ext_hook=_ext_hook)


def _pack_body(ctx: schemathesis.SerializationContext, value: Any) -> bytes:
    # Negative cases may already be raw bytes: send those as they are.
    return value if isinstance(value, bytes) else encoding.packb(value)


def _unpack_response(
    ctx: schemathesis.DeserializationContext, response: schemathesis.Response
) -> Any:
    return unpack(response.content)


def _edit_body(ctx: schemathesis.SerializationContext, value: Any) -> bytes:
    # An edit is bytes (`format: binary`): sent as generated.
    return value if isinstance(value, bytes) else str(value).encode()


# Without these, schemathesis would never send a msgpack body and would skip (not fail) the
# validation of every msgpack response; nor send an edit (POST /v1/edits:apply) at all.
schemathesis.serializer(MSGPACK)(_pack_body)
schemathesis.deserializer(MSGPACK)(_unpack_response)
schemathesis.serializer(EDIT)(_edit_body)


def route_operations(app: Starlette) -> set[tuple[str, str]]:
    """(METHOD, path) of every route; Starlette adds HEAD to GET routes by itself."""
    return {
        (method, route.path)
        for route in app.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
    }


def documented_operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, item in document["paths"].items() for method in item}


OPERATIONS = sorted(route_operations(create_app(Settings(redis_url="unused"))))
ANSWER = "/v1/answers/{recipe}"
APPLY = "/v1/edits:apply"
# Operations with something to make invalid besides headers: a body or a path parameter.
# (An edit is any bytes to its schema, `format: binary`: nothing to make invalid; what it
# does with bytes that are no edit is fuzzed in tests/service/test_codec_fuzz.py. An
# answer is any bytes too, and schemathesis makes its recipe valid when it cannot negate
# the body: tests/integration/test_backend_answers.py sends it refs that are none.)
NEGATABLE = [
    (method, path)
    for method, path in OPERATIONS
    if ((method == "POST" and path != APPLY) or "{" in path) and path != ANSWER
]


@dataclass
class Served:
    client: httpx.AsyncClient
    document: dict[str, Any]
    schema: OpenApiSchema

    def operation(self, method: str, path: str) -> APIOperation[Any, Any, Any, Any]:
        return self.schema[path][method]


async def serve(make_api: Api, **settings: Any) -> Served:
    """The app on the real engine, and the schema loaded from what it serves."""
    client = await make_api(**settings)
    response = await client.get("/openapi.json")
    assert response.status_code == 200, response.text
    document = response.json()
    # from_dict copies nothing: keep `document` pristine for the tests that read it.
    schema = schemathesis.openapi.from_dict(json.loads(response.text))
    return Served(client, document, schema)


@pytest.fixture
async def open_api(make_api: Api) -> Served:
    """No API keys: the single local tenant, and the document without security."""
    return await serve(make_api)


@pytest.fixture
async def keyed_api(make_api: Api) -> Served:
    """API keys configured; the client sends none (cases add their own)."""
    return await serve(make_api, api_keys=KEYS)


async def send(client: httpx.AsyncClient, case: Case[Any], **headers: str) -> httpx.Response:
    """Send a schemathesis case over httpx, with the bytes `requests` would have sent."""
    kwargs = case.as_transport_kwargs(base_url=BASE)
    assert not kwargs.get("cookies"), "the document declares no cookies"
    content: bytes | str | None = kwargs.get("data")
    if "json" in kwargs:
        content = json.dumps(kwargs["json"], allow_nan=False).encode()
    return await client.request(
        kwargs["method"],
        kwargs["url"],
        params=kwargs.get("params") or None,
        headers={**kwargs["headers"], **headers},
        content=content,
    )


def make_case(
    operation: APIOperation[Any, Any, Any, Any],
    *,
    body: Any = None,
    media: str = JSON,
    ref: str | None = None,
    headers: dict[str, str] | None = None,
) -> Case[Any]:
    """A hand-made case: what `validate_response` judges a hand-made request's answer by."""
    path_parameters: dict[str, str] | None = {"ref": ref} if ref is not None else None
    if "{recipe}" in operation.path:  # PUT /v1/answers/{recipe}: a recipe no request made
        path_parameters = {"recipe": "tb_" + "a" * 26}
    if body is None:
        return operation.Case(path_parameters=path_parameters, headers=headers)
    return operation.Case(
        path_parameters=path_parameters, headers=headers, body=body, media_type=media
    )


def decode(response: httpx.Response) -> Any:
    media = response.headers["content-type"].split(";")[0]
    return unpack(response.content) if media == MSGPACK else response.json()


def assert_conforms(case: Case[Any], response: httpx.Response) -> None:
    """The response is documented for the case's operation; 4xx are problem+json."""
    case.validate_response(response, checks=CONFORMANCE)
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert response.headers["content-type"] == PROBLEM
        assert response.json()["status"] == response.status_code


# --- 1. the document lists exactly the app's routes: test_openapi_routes.py ---


# --- 2. the document is valid OpenAPI 3.1 ---


async def test_served_documents_are_valid_openapi_3_1(open_api: Served, keyed_api: Served) -> None:
    for served in (open_api, keyed_api):
        assert served.document["openapi"].startswith("3.1.")
        served.schema.validate()  # raises jsonschema_rs.ValidationError when invalid
    assert "security" not in open_api.document
    assert keyed_api.document["security"] == [{"bearer": []}]
    assert keyed_api.document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


async def test_the_validator_rejects_an_invalid_document(open_api: Served) -> None:
    """Control for the test above: the same validator fails a broken document."""
    broken = json.loads(json.dumps(open_api.document))
    broken["paths"]["/healthz"]["get"]["responses"]["200"] = {"content": "not a map"}
    with pytest.raises(jsonschema_rs.ValidationError):
        schemathesis.openapi.from_dict(broken).validate()


# --- 3. property run: every generated request gets a documented answer ---

PROPERTY_SETTINGS = settings(
    max_examples=25,
    deadline=None,
    # As schemathesis itself does. And one app and one store serve every example of a run,
    # on purpose (function_scoped_fixture).
    suppress_health_check=list(HealthCheck),
)
ACCEPTS = st.sampled_from([JSON, MSGPACK, "*/*", f"{MSGPACK}, {JSON};q=0.5"])


async def check_generated(
    served: Served,
    method: str,
    path: str,
    mode: GenerationMode,
    data: st.DataObject,
    headers: dict[str, str],
) -> None:
    operation = served.operation(method, path)
    fixed: dict[str, Any] = {}
    if "{ref}" in path and mode.is_positive and data.draw(st.booleans(), label="held ref"):
        # A random ref is never held: half the time, ask for one that is.
        registered = await served.client.post(
            "/v1/invocations", json={"invocations": [READ]}, headers=headers
        )
        fixed["path_parameters"] = {"ref": registered.json()["refs"][0]["ref"]}
    strategy = operation.as_strategy(mode, headers={"Toolref-Protocol": "2", **headers}, **fixed)
    case = data.draw(strategy, label="case")
    accept = data.draw(ACCEPTS, label="Accept")
    response = await send(served.client, case, Accept=accept)
    checks: list[CheckFunction] = [
        positive_data_acceptance if mode.is_positive else negative_data_rejection
    ]
    if path.startswith(("/v1/messages:", "/v1/context:", APPLY)) and mode.is_positive:
        checks = []  # judged below: a valid shape is not always a valid conversation, or edit
    case.validate_response(response, checks=CONFORMANCE, additional_checks=checks)
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        problem = response.json()
        assert response.headers["content-type"] == PROBLEM
        assert problem["status"] == response.status_code
        assert problem["type"].startswith("urn:toolref:problem:")
    elif response.status_code == 200 and path == APPLY:
        assert response.headers["content-type"] == APPLIED
    elif response.status_code == 200 and path not in ("/openapi.json", "/metrics", *PAGES):
        # Responses follow Accept.
        expected = MSGPACK if accept.startswith(MSGPACK) else JSON
        assert response.headers["content-type"] == expected
    assert response.headers["Toolref-Protocol"] == "2"
    if path in PAGES and response.status_code == 200:
        assert response.headers["content-type"] == "text/html; charset=utf-8"
    meta = case.meta
    assert meta is not None
    if meta.generation.mode.is_positive and method == "POST":
        if path.startswith(("/v1/messages:", "/v1/context:")) and response.status_code == 422:
            # A JSON Schema cannot say what makes a conversation valid in a format; random
            # message objects may not fit the one named, and that is all that may fail.
            assert "format" in response.json()["detail"], response.text
        elif path == APPLY and response.status_code != 200:
            # Nor what makes bytes an edit: random ones are not one (test_an_applied_edit_
            # matches_the_document sends real ones).
            assert response.status_code == 400, response.text
            assert response.json()["type"].endswith(":malformed-body"), response.text
        else:
            assert response.status_code == 200, response.text  # valid data, so accepted
    if meta.generation.mode.is_negative:
        assert 400 <= response.status_code < 500, response.text


@pytest.mark.parametrize(("method", "path"), OPERATIONS)
@PROPERTY_SETTINGS
@given(data=st.data())
async def test_valid_requests_get_documented_responses(
    open_api: Served, method: str, path: str, data: st.DataObject
) -> None:
    await check_generated(open_api, method, path, GenerationMode.POSITIVE, data, {})


@pytest.mark.parametrize(("method", "path"), NEGATABLE)
@PROPERTY_SETTINGS
@given(data=st.data())
async def test_invalid_requests_get_documented_4xx_problems(
    open_api: Served, method: str, path: str, data: st.DataObject
) -> None:
    await check_generated(open_api, method, path, GenerationMode.NEGATIVE, data, {})


@pytest.mark.parametrize(("method", "path"), OPERATIONS)
@PROPERTY_SETTINGS
@given(data=st.data())
async def test_keyed_requests_get_documented_responses(
    keyed_api: Served, method: str, path: str, data: st.DataObject
) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    await check_generated(keyed_api, method, path, GenerationMode.POSITIVE, data, auth)


@pytest.mark.parametrize(("method", "path"), OPERATIONS)
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_security_requirements_are_documented(
    keyed_api: Served, method: str, path: str, data: st.DataObject
) -> None:
    """Generated (never valid) credentials: 401 exactly where the document demands a key."""
    operation = keyed_api.operation(method, path)
    case = data.draw(operation.as_strategy(headers={"Toolref-Protocol": "2"}), label="case")
    response = await send(keyed_api.client, case)
    assert_conforms(case, response)
    raw = operation.definition.raw
    secured = raw.get("security", keyed_api.document["security"]) != []
    assert (response.status_code == 401) is secured, response.text
    if secured:
        assert response.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("value", ["abc", "0", "-1", "1,2", "2.0", ""])
async def test_a_bad_protocol_header_is_a_documented_400_everywhere(
    open_api: Served, value: str
) -> None:
    for method, path in OPERATIONS:
        body: dict[str, list[Any]] | None = None
        if method == "POST":
            body = {"invocations": []} if path == "/v1/invocations" else {"refs": []}
        case = make_case(
            open_api.operation(method, path),
            body=body,
            ref=UNKNOWN if "{ref}" in path else None,
            headers={"Toolref-Protocol": value},
        )
        response = await send(open_api.client, case)
        assert response.status_code == 400, (path, response.text)
        assert response.json()["type"] == "urn:toolref:problem:invalid-protocol"
        assert response.headers["Toolref-Protocol"] == "1"
        assert_conforms(case, response)


# --- 4. hand-picked round trip, JSON and msgpack ---


def encode(media: str, value: Any) -> bytes:
    return encoding.packb(value) if media == MSGPACK else json.dumps(value).encode()


@pytest.mark.parametrize("media", [JSON, MSGPACK])
async def test_a_real_round_trip_matches_the_document(open_api: Served, media: str) -> None:
    client = open_api.client
    headers = {"Content-Type": media, "Accept": media}

    async def call(method: str, path: str, body: Any = None) -> Any:
        operation = open_api.schema.find_operation_by_path(method, path)
        assert operation is not None, f"{method} {path} is not documented"
        response = await client.request(
            method,
            path,
            content=None if body is None else encode(media, body),
            headers=headers,
        )
        case = make_case(operation, body=body, media=media)
        assert_conforms(case, response)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == media
        return decode(response)

    registered = await call("POST", "/v1/invocations", {"invocations": [READ, BIG]})
    refs = [item["ref"] for item in registered["refs"]]
    assert refs == [str(digest_of(invocation).ref) for invocation in (READ, BIG)]
    resolved = await call("POST", "/v1/invocations:resolve", {"refs": [*refs, UNKNOWN]})
    assert resolved == {
        "invocations": {refs[0]: {**READ, "isError": False}, refs[1]: BIG},
        "missing": [UNKNOWN],
    }
    found = await call("POST", "/v1/invocations:findMissing", {"refs": [UNKNOWN, refs[1]]})
    assert found == {"missing": [UNKNOWN]}

    got = await client.get(f"/v1/invocations/{refs[1]}", headers=headers)
    case = make_case(open_api.operation("GET", "/v1/invocations/{ref}"), ref=refs[1])
    assert_conforms(case, got)
    assert got.status_code == 200
    assert decode(got) == BIG
    again = await client.get(
        f"/v1/invocations/{refs[1]}", headers={**headers, "If-None-Match": got.headers["ETag"]}
    )
    assert again.status_code == 304
    assert_conforms(case, again)
    missing = await client.get(f"/v1/invocations/{UNKNOWN}", headers=headers)
    assert missing.status_code == 404
    assert_conforms(case, missing)

    capabilities = await call("GET", "/v1/capabilities")
    assert capabilities["encodings"] == [JSON, MSGPACK]
    assert await call("GET", "/healthz") == {"status": "ok"}
    assert await call("GET", "/readyz") == {"status": "ready"}


async def test_an_applied_edit_matches_the_document(open_api: Served) -> None:
    """POST /v1/edits:apply with real edits: applied (the request it stands for, and the
    recipe kept), the next against it, one whose base is not held (409), and a body that is
    not an edit (415): each answer documented."""
    client, operation = open_api.client, open_api.operation("POST", APPLY)
    editor = Editor()
    for turn in range(2):
        messages = [{"role": "user", "content": f"turn {n} " + "x" * 300} for n in range(turn + 1)]
        body = json.dumps({"model": "m", "messages": messages}).encode()
        edit = editor.prepare([("content-type", JSON)], body, "messages")
        assert edit is not None
        response = await client.post(APPLY, content=edit.body, headers=dict(edit.headers))
        assert_conforms(make_case(operation, body=edit.body, media=EDIT), response)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == APPLIED
        assert response.content.endswith(b"\r\n" + body)  # segment 0, a blank line, the body
        assert response.headers["Toolref-History"] == edit.ref
        assert editor.confirm(edit, response.headers["Toolref-History"])
        assert (edit.base is None) is (turn == 0)
    unheld = b'{"v":2,"b":"tb_' + b"a" * 26 + b'","o":[[0,3]],"n":0}\n'  # a base never kept
    missing = await client.post(APPLY, content=unheld, headers={"Content-Type": EDIT})
    assert missing.status_code == 409
    assert missing.json()["type"].endswith(":missing-history")
    assert_conforms(make_case(operation, body=unheld, media=EDIT), missing)
    refused = await client.post(APPLY, json={"messages": []})
    assert refused.status_code == 415
    assert_conforms(make_case(operation, body=b"{}", media=EDIT), refused)


@pytest.mark.parametrize("media", [JSON, MSGPACK])
async def test_a_body_off_the_document_fails_validation(open_api: Served, media: str) -> None:
    """Control for the tests above: a real response, altered, no longer passes, in either
    encoding (so msgpack bodies are validated, not skipped)."""
    response = await open_api.client.post(
        "/v1/invocations:resolve",
        content=encode(media, {"refs": [UNKNOWN]}),
        headers={"Content-Type": media, "Accept": media},
    )
    case = open_api.operation("POST", "/v1/invocations:resolve").Case()
    assert_conforms(case, response)
    assert decode(response) == {"invocations": {}, "missing": [UNKNOWN]}
    alterations: list[Any] = [
        {"invocations": {}},  # a required member dropped
        {"invocations": {}, "missing": ["not-a-ref"]},  # a ref that is not one
        {"invocations": {UNKNOWN: {"name": "t"}}, "missing": []},  # an invocation without args
        {"invocations": [], "missing": []},  # wrong type
    ]
    for altered in alterations:
        forged = httpx.Response(
            200,
            headers={k: v for k, v in response.headers.items() if k != "content-length"},
            content=encode(media, altered),
            request=response.request,
        )
        forged.elapsed = datetime.timedelta(0)
        with pytest.raises(FailureGroup):
            case.validate_response(forged, checks=CONFORMANCE)
    undocumented = httpx.Response(
        418, headers=response.headers, content=response.content, request=response.request
    )
    undocumented.elapsed = datetime.timedelta(0)
    with pytest.raises(FailureGroup):
        case.validate_response(undocumented, checks=CONFORMANCE)


async def test_the_documented_ref_schema_is_the_ref_grammar(open_api: Served) -> None:
    """Refs are typed by their pattern in the document: real refs match it, and strings the
    service refuses as refs do not."""
    schema = open_api.document["components"]["schemas"]["Ref"]
    validator = jsonschema_rs.validator_for(schema)
    for real in (digest_of(READ).ref, digest_of(BIG).ref, Ref(UNKNOWN)):
        assert validator.is_valid(str(real))
        assert Ref.parse(str(real)) == real
    for bad in ("tr_" + "a" * 25 + "b", "tr_" + "A" * 26, "tr_" + "a" * 25, "x" * 29):
        assert not validator.is_valid(bad)
        with pytest.raises(ValueError, match="not a ref"):
            Ref.parse(bad)


# --- 5. documented errors, hand-picked ---


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


# (name, method, path, body bytes, request headers, status, problem slug)
BAD_INPUTS: list[tuple[str, str, str, bytes, dict[str, str], int, str]] = [
    (
        "protocol 1 on a ref endpoint",
        "POST",
        "/v1/invocations:resolve",
        b'{"refs": []}',
        {"Toolref-Protocol": "1"},
        400,
        "protocol-required",
    ),
    ("malformed json", "POST", "/v1/invocations", b'{"invocations": [', {}, 400, "malformed-body"),
    (
        "unsupported content type",
        "POST",
        "/v1/invocations:findMissing",
        b"refs",
        {"Content-Type": "text/plain"},
        415,
        "unsupported-media-type",
    ),
    (
        "unsupported content encoding",
        "POST",
        "/v1/invocations",
        b"{}",
        {"Content-Encoding": "br"},
        415,
        "unsupported-media-type",
    ),
    (
        "batch over the limit",
        "POST",
        "/v1/invocations:findMissing",
        json.dumps({"refs": [UNKNOWN] * 1001}).encode(),
        {},
        413,
        "batch-too-large",
    ),
    (
        "too deep",
        "POST",
        "/v1/invocations",
        json.dumps({"invocations": [{**READ, "args": nested(200)}]}).encode(),
        {},
        422,
        "nesting-too-deep",
    ),
    ("NaN", "POST", "/v1/invocations", b'{"invocations": [NaN]}', {}, 422, "non-finite-number"),
    ("not a ref", "POST", "/v1/invocations:resolve", b'{"refs": ["tr_x"]}', {}, 422, "invalid-ref"),
    ("not a ref in the path", "GET", "/v1/invocations/tr_x", b"", {}, 422, "invalid-ref"),
    ("unknown ref", "GET", f"/v1/invocations/{UNKNOWN}", b"", {}, 404, "not-found"),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "status", "slug"),
    [case[1:] for case in BAD_INPUTS],
    ids=[case[0] for case in BAD_INPUTS],
)
async def test_bad_inputs_get_documented_problems(
    open_api: Served,
    method: str,
    path: str,
    body: bytes,
    headers: dict[str, str],
    status: int,
    slug: str,
) -> None:
    operation = open_api.schema.find_operation_by_path(method, path)
    assert operation is not None, f"{method} {path} is not documented"
    response = await open_api.client.request(
        method, path, content=body or None, headers={"Content-Type": JSON, **headers}
    )
    assert response.status_code == status, response.text
    assert response.json()["type"] == f"urn:toolref:problem:{slug}"
    ref = path.rsplit("/", 1)[1] if "{ref}" in operation.path else None
    assert_conforms(make_case(operation, ref=ref), response)


async def test_an_unreachable_store_is_a_documented_503(
    open_api: Served, tmp_path: pathlib.Path
) -> None:
    settings = Settings(redis_url="unused", retry_after_seconds=7)
    dead = open_redis(settings, f"unix://{tmp_path / 'nothing-listens-here.sock'}")
    app = create_app(settings, redis=dead)
    requests: list[tuple[str, str, Any]] = [
        ("GET", "/readyz", None),
        ("POST", "/v1/invocations", {"invocations": [READ]}),
        ("POST", "/v1/invocations:findMissing", {"refs": [UNKNOWN]}),
        ("POST", "/v1/invocations:resolve", {"refs": [UNKNOWN]}),
        ("GET", f"/v1/invocations/{UNKNOWN}", None),
    ]
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url=BASE,
            headers={"Toolref-Protocol": "2"},
        ) as client,
    ):
        for method, path, body in requests:
            operation = open_api.schema.find_operation_by_path(method, path)
            assert operation is not None, f"{method} {path} is not documented"
            response = await client.request(method, path, json=body)
            assert response.status_code == 503, response.text
            assert response.headers["Retry-After"] == "7"
            ref = UNKNOWN if "{ref}" in operation.path else None
            case = make_case(operation, body=body, ref=ref)
            case.validate_response(response, checks=DOCUMENTED)
            assert response.headers["content-type"] == PROBLEM
    await dead.aclose()
