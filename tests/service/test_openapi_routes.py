"""GET /openapi.json is generated from what the app serves, the gateway included.

The document lists exactly the app's routes with the methods each serves, and, with
upstreams, `/llm/{name}/{path}` with the methods the gateway forwards (found on the wire:
which requests reach the upstream); a route that declares no operation cannot be
documented. Every gateway answer conforms to the gateway's operation: its own problems and
the upstream's answers, forwarded, for hand-picked requests and for requests schemathesis
generates from the document. (Before the document was generated, the gateway was not in it.)
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core.result import Ok
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from tests.support.fake_provider import FakeProvider, Reply
from tests.support.servers import serve as serve_app
from toolref import ToolReferenceManager
from toolref.edits.wire import MEDIA_TYPE
from toolref.edits.wire import VERSION as EDITS_VERSION
from toolref.wire.canonical import invocation_digest
from toolref_server.app import create_app
from toolref_server.http import admission, openapi
from toolref_server.http.operation import ApiRoute
from toolref_server.settings import Settings

from ..conftest import Api
from .test_openapi import (
    BASE,
    DOCUMENTED,
    JSON,
    KEY,
    KEYS,
    PROBLEM,
    Served,
    documented_operations,
    route_operations,
    serve,
)

GATEWAY = "/llm/{name}/{path}"
FORWARDED = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")  # README, the wire
# Every method the probe tries: the forwarded ones, and two the gateway refuses.
PROBED = (*FORWARDED, "TRACE", "CONNECT")
KEYED = {"Toolref-Key": KEY}
UNKNOWN = str(invocation_digest("never", {}, "registered").ref)


def chat(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "fake", "messages": [{"role": "user", "content": "hi"}, *messages]}


def with_marker(ref: str) -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "toolRef": ref}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "toolRef": ref},
    ]


# --- the document lists exactly what the app serves ---


@pytest.mark.parametrize("gateway", [False, True], ids=["registry", "with-gateway"])
@pytest.mark.parametrize("keyed", [False, True], ids=["open", "keyed"])
async def test_document_lists_exactly_the_routes_of_the_app(
    make_api: Api, keyed: bool, gateway: bool
) -> None:
    keys = KEYS if keyed else ""
    upstreams = "up=http://127.0.0.1:9" if gateway else ""
    served = await serve(make_api, api_keys=keys, upstreams=upstreams)
    app = create_app(Settings(redis_url="unused", api_keys=keys, upstreams=upstreams))
    routes = route_operations(app)
    if gateway:
        routes |= {(method, GATEWAY) for method in FORWARDED}
    documented = documented_operations(served.document)
    assert routes - documented == set(), "routes missing from /openapi.json"
    assert documented - routes == set(), "documented operations the app does not serve"
    # 13, issue 32's four, issue 38's POST /v1/edits:apply, issue 39's PUT /v1/answers
    assert len(routes) == 19 + (len(FORWARDED) if gateway else 0)
    # schemathesis sees the same operations (it would ignore a malformed path item).
    loaded = set()
    for result in served.schema.get_all_operations():
        assert isinstance(result, Ok), result
        loaded.add((result.ok().method.upper(), result.ok().path))
    assert loaded == routes
    served.schema.validate()
    schemes = served.document["components"].get("securitySchemes", {})
    assert ("toolrefKey" in schemes) is (keyed and gateway)


def test_a_route_that_declares_no_operation_cannot_be_documented() -> None:
    """Control for the test above: the document is built from the routes' declarations,
    so a route without one is refused rather than left out."""

    async def undocumented(request: Request) -> Response:
        return PlainTextResponse("")

    app = create_app(Settings(redis_url="unused"))
    with pytest.raises(TypeError, match="declares no operation"):
        openapi.document([*app.routes, Route("/v1/undocumented", undocumented)])


# A body each POST operation takes as it is (its messages in no particular format).
SMALLEST: dict[str, dict[str, list[Any]]] = {
    "/v1/invocations": {"invocations": []},
    "/v1/invocations:findMissing": {"refs": []},
    "/v1/invocations:resolve": {"refs": []},
}


async def test_the_document_requires_protocol_2_exactly_where_the_route_refuses_1(
    make_api: Api,
) -> None:
    """An operation declared `protocol=2` is one whose route refuses a request without
    `Toolref-Protocol: 2` (400 `protocol-required`), and the document requires the header
    there, as a version of 2 or more; every other operation takes protocol 1, and its
    header is optional."""
    served = await serve(make_api)
    app = create_app(Settings(redis_url="unused"))
    refusing = set()
    for route in app.routes:
        assert isinstance(route, ApiRoute)
        path = route.path.replace("{ref}", UNKNOWN)
        body = SMALLEST.get(route.path, {"messages": []}) if route.method == "POST" else None
        request = served.client.build_request(route.method, path, json=body)
        del request.headers["Toolref-Protocol"]  # protocol 1
        response = await served.client.send(request)
        if response.status_code == 400:
            assert response.json()["type"] == "urn:toolref:problem:protocol-required"
            refusing.add(route.path)
        declared = route.operation.protocol
        parameter = next(
            p
            for p in served.document["paths"][route.path][route.method.lower()]["parameters"]
            if p["name"] == "Toolref-Protocol"
        )
        assert parameter["required"] is (declared == 2), route.path
        pattern = re.compile(parameter["schema"]["pattern"])
        assert pattern.fullmatch("2")
        assert not pattern.fullmatch("0")
        assert bool(pattern.fullmatch("1")) is (declared == 1), route.path
    declared_2 = {
        r.path for r in app.routes if isinstance(r, ApiRoute) and r.operation.protocol == 2
    }
    assert refusing == declared_2
    assert declared_2 == {
        "/v1/invocations",
        "/v1/invocations:findMissing",
        "/v1/invocations:resolve",
        "/v1/messages:optimize",
    }


def test_the_document_promises_no_503_exactly_where_admission_never_refuses() -> None:
    """An operation declared `admitted` is one the admission layer lets through whatever
    the load (a liveness probe), and no other."""
    app = create_app(Settings(redis_url="unused"))
    declared = {r.path for r in app.routes if isinstance(r, ApiRoute) and r.operation.admitted}
    assert declared == set(admission.EXEMPT) == {"/healthz"}
    document = openapi.document(app.routes)
    for path, item in document["paths"].items():
        for operation in item.values():
            assert ("503" not in operation["responses"]) is (path in declared)


async def test_the_gateway_forwards_exactly_the_documented_methods(make_api: Api) -> None:
    """On the wire: the methods whose requests reach the upstream are the documented ones;
    the others are refused by the gateway (405, `Allow` naming the documented ones) before
    anything is sent."""
    reached: list[str] = []

    async def record(request: Request) -> Response:
        reached.append(request.method)
        return PlainTextResponse("upstream")

    upstream = Starlette(routes=[Route("/{rest:path}", record, methods=list(PROBED))])
    async with serve_app(upstream) as url:
        served = await serve(make_api, api_keys=KEYS, upstreams=f"up={url}")
        refused = set()
        for method in PROBED:
            response = await served.client.request(method, "/llm/up/probe", headers=KEYED)
            if response.status_code == 405:
                assert response.headers["content-type"] == PROBLEM
                refused.add(method)
                allowed = response.headers["allow"]
    documented = {m for m, path in documented_operations(served.document) if path == GATEWAY}
    assert set(reached) == documented == set(FORWARDED)
    assert refused == set(PROBED) - documented
    assert allowed.split(", ") == sorted(documented)


# --- gateway answers conform to its operation ---


@pytest.fixture
async def gateway(make_api: Api) -> AsyncIterator[Served]:
    """The app with API keys and one upstream, `up`: the fake LLM provider, over a socket."""
    provider = FakeProvider(lambda api, body: Reply(text="done"))
    async with serve_app(provider.app) as url:
        yield await serve(make_api, api_keys=KEYS, upstreams=f"up={url}")


async def test_gateway_answers_match_the_document(gateway: Served) -> None:
    client = gateway.client
    registered = await client.post(
        "/v1/invocations",
        json={"invocations": [{"name": "bash", "args": {}, "result": "ok"}]},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    ref = registered.json()["refs"][0]["ref"]
    hydrating = {**KEYED, "Toolref-Protocol": "2"}
    # (method, path, body, headers, expected status, problem slug or None: the upstream's)
    completions = "/llm/up/v1/chat/completions"
    keep = {**hydrating, "Toolref-History": "?1"}  # history refs, retired in 0.3
    cases: list[tuple[str, str, Any, dict[str, str], int, str | None]] = [
        ("POST", completions, chat(*with_marker(ref)), hydrating, 200, None),
        ("POST", completions, chat(), keep, 400, "history-refs-retired"),
        ("POST", completions, chat(), KEYED, 200, None),  # protocol 1: passed through
        ("GET", "/llm/up/v1/models", None, KEYED, 404, None),  # the fake's own 404
        ("POST", completions, chat(*with_marker(UNKNOWN)), hydrating, 409, "missing-refs"),
        ("GET", "/llm/nowhere/v1/models", None, KEYED, 404, "not-found"),
        ("GET", "/llm/up/v1/models", None, {}, 401, "unauthorized"),
        ("GET", "/llm/up/a/%2e%2e/b", None, KEYED, 400, "bad-request"),
    ]
    for method, path, body, headers, status, slug in cases:
        response = await client.request(method, path, json=body, headers=headers)
        assert response.status_code == status, (path, response.text)
        if slug is None:
            assert response.headers["content-type"] != PROBLEM
        else:
            assert response.headers["content-type"] == PROBLEM
            assert response.json()["type"] == f"urn:toolref:problem:{slug}"
        _, name, rest = path.split("/", 3)[1:]
        operation = gateway.operation(method, GATEWAY)
        parameters = {"name": name, "path": rest}
        if body is None:
            case = operation.Case(path_parameters=parameters, headers=headers)
        else:
            case = operation.Case(
                path_parameters=parameters, headers=headers, body=body, media_type=JSON
            )
        case.validate_response(response, checks=DOCUMENTED)
    # An offer of edits is answered `Toolref-Edits`, an edit `Toolref-History: tb_...`:
    # documented, and sent.
    manager = ToolReferenceManager()
    operation = gateway.operation("POST", GATEWAY)
    for turn in range(2):
        # messages of 64 bytes or more: a first request of tiny ones goes as it came
        talk = [{"role": "user", "content": f"turn {n}: " + "go on " * 12} for n in range(2)]
        body = chat(*talk[: turn + 1])
        response = await manager.apost(client, completions, json=body, headers=KEYED)
        assert response.status_code == 200, response.text
        assert response.headers["Toolref-Edits"] == str(EDITS_VERSION)
        parameters = {"name": "up", "path": "v1/chat/completions"}
        case = operation.Case(path_parameters=parameters, headers=KEYED, body=body, media_type=JSON)
        case.validate_response(response, checks=DOCUMENTED)
    assert response.request.headers["content-type"] == MEDIA_TYPE
    assert response.headers["Toolref-History"].startswith("tb_")
    assert manager.savings.edits == 1


@pytest.mark.parametrize("method", FORWARDED)
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_generated_gateway_requests_get_documented_answers(
    gateway: Served, method: str, data: st.DataObject
) -> None:
    operation = gateway.operation(method, GATEWAY)
    strategy = operation.as_strategy(GenerationMode.POSITIVE, headers=KEYED)
    case = data.draw(strategy, label="case")
    kwargs = case.as_transport_kwargs(base_url=BASE)
    content = kwargs.get("json", kwargs.get("data"))
    if content is not None and not isinstance(content, bytes | str):
        content = json.dumps(content).encode()  # any body: schemathesis leaves it a value
    response = await gateway.client.request(
        kwargs["method"],
        kwargs["url"],
        params=kwargs.get("params") or None,
        headers={**kwargs["headers"], **KEYED},
        content=content,
    )
    case.validate_response(response, checks=DOCUMENTED)
    assert response.status_code < 500, response.text
    if response.headers.get("content-type") == PROBLEM and method != "HEAD":
        assert response.json()["status"] == response.status_code
