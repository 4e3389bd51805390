"""GET /metrics, request ids and access logs, on the real engine."""

from __future__ import annotations

import hashlib
import json
import logging
import re

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from toolref.wire.canonical import digest_of
from toolref_server.http.access import AccessMiddleware
from toolref_server.logs import JsonFormatter
from toolref_server.metrics import Metrics

from ..conftest import Api

INVOCATION = {"name": "read_file", "args": {"path": "a.py"}, "result": "print('x')\n" * 50}
OTHER = {**INVOCATION, "result": "other"}
SECRET_KEY = "acme-very-secret-key"
KEYS = f"acme={hashlib.sha256(SECRET_KEY.encode()).hexdigest()}"


async def scrape(client: httpx.AsyncClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    answer = await client.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_requests_are_counted_by_route_template_status_and_bytes(
    api: httpx.AsyncClient,
) -> None:
    body = json.dumps({"invocations": [INVOCATION, OTHER]}).encode()
    registered = await api.post(
        "/v1/invocations", content=body, headers={"Content-Type": "application/json"}
    )
    assert registered.status_code == 200
    ref = registered.json()["refs"][0]["ref"]
    held = await api.get(f"/v1/invocations/{ref}")
    unknown = await api.get(f"/v1/invocations/{digest_of({**INVOCATION, 'name': 'x'}).ref}")
    nowhere = await api.get("/no/such/path/123")
    assert (held.status_code, unknown.status_code, nowhere.status_code) == (200, 404, 404)

    samples = await scrape(api)
    template = "/v1/invocations/{ref}"
    requests = "toolref_requests_total"
    assert value(samples, requests, method="POST", route="/v1/invocations", status="200") == 1
    assert value(samples, requests, method="GET", route=template, status="200") == 1
    assert value(samples, requests, method="GET", route=template, status="404") == 1
    # A raw path never becomes a label: unknown paths share one.
    assert value(samples, requests, method="GET", route="unmatched", status="404") == 1
    assert not any("/no/such" in str(labels) or ref in str(labels) for _, labels in samples)
    assert value(samples, "toolref_request_body_bytes_total", route="/v1/invocations") == len(body)
    out = value(samples, "toolref_response_body_bytes_total", route=template)
    assert out == len(held.content) + len(unknown.content)
    count = value(samples, "toolref_request_duration_seconds_count", method="GET", route=template)
    assert count == 2


async def test_a_method_of_the_client_s_own_is_one_label(api: httpx.AsyncClient) -> None:
    """Review: the `method` label took the request's method as sent, and h11 takes any
    token: one new series per made-up method (and 16 for the latency histogram), grown by
    anyone who can reach the port, before any key is asked for."""
    for method in ("FOO1", "FOO2", "QUERY", "PROPFIND"):
        await api.request(method, "/v1/invocations")
    await api.request("DELETE", "/v1/invocations")
    samples = await scrape(api)
    methods = {dict(labels).get("method") for _, labels in samples} - {None}
    assert methods <= {"GET", "POST", "DELETE", "other"}
    answered = {
        dict(labels)["status"]
        for name, labels in samples
        if name == "toolref_requests_total" and dict(labels)["method"] == "other"
    }
    [status] = answered
    other = value(
        samples, "toolref_requests_total", method="other", route="/v1/invocations", status=status
    )
    assert other == 4
    count = value(
        samples, "toolref_request_duration_seconds_count", method="other", route="/v1/invocations"
    )
    assert count == 4


async def test_a_client_that_hangs_up_before_its_answer_is_no_server_error() -> None:
    """Review: a request whose client left before the answer started (an agent's turn
    cancelled: the gateway returns without answering) was counted and logged as a 500,
    so 5xx alerts fired on every cancelled turn."""

    async def cancelled(scope: Scope, receive: Receive, send: Send) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    async def failing(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()  # the app ends without an answer while its client is still there

    messages: list[Message] = []

    async def receive() -> Message:
        return messages.pop(0)

    async def send(message: Message) -> None:
        pass

    metrics = Metrics()
    scope = {"type": "http", "method": "POST", "path": "/v1/invocations", "headers": []}
    messages += [{"type": "http.request", "body": b"{", "more_body": True}]
    messages += [{"type": "http.disconnect"}]
    await AccessMiddleware(cancelled, metrics)(scope, receive, send)
    messages += [{"type": "http.request", "body": b"{}", "more_body": False}]
    await AccessMiddleware(failing, metrics)(scope, receive, send)
    samples = {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for sample in family.samples
        if sample.name == "toolref_requests_total"
    }
    labels = (("method", "POST"), ("route", "unmatched"))
    assert samples == {(*labels, ("status", "499")): 1, (*labels, ("status", "500")): 1}


async def test_refs_registered_resolved_and_missing_are_counted(api: httpx.AsyncClient) -> None:
    first = await api.post("/v1/invocations", json={"invocations": [INVOCATION]})
    await api.post("/v1/invocations", json={"invocations": [INVOCATION, OTHER]})
    held = first.json()["refs"][0]["ref"]
    absent = str(digest_of({**INVOCATION, "name": "absent"}).ref)
    await api.post("/v1/invocations:resolve", json={"refs": [held, absent]})
    await api.post("/v1/invocations:findMissing", json={"refs": [absent]})

    samples = await scrape(api)
    assert value(samples, "toolref_refs_registered_total", new="true") == 2
    assert value(samples, "toolref_refs_registered_total", new="false") == 1
    assert value(samples, "toolref_refs_resolved_total") == 1
    assert value(samples, "toolref_refs_missing_total") == 2
    assert value(samples, "toolref_store_breaker", toolref_store_breaker="closed") == 1
    assert value(samples, "toolref_store_breaker", toolref_store_breaker="open") == 0


async def test_summary_cache_hits_and_summarizer_calls_are_counted(api: httpx.AsyncClient) -> None:
    ref = (await api.post("/v1/invocations", json={"invocations": [INVOCATION]})).json()["refs"][0]
    for _ in range(3):
        answer = await api.get(f"/v1/invocations/{ref['ref']}/summary")
        assert answer.status_code == 200
    samples = await scrape(api)
    assert value(samples, "toolref_summary_cache_total", result="miss") == 1
    assert value(samples, "toolref_summary_cache_total", result="hit") == 2
    assert (
        value(samples, "toolref_summarizer_calls_total", summarizer="extractive", outcome="ok") == 1
    )


async def test_refused_history_refs_are_counted_as_400s_and_histories_no_more(
    api: httpx.AsyncClient,
) -> None:
    """History refs were retired in 0.3: a request of theirs is a 400 like any other, and
    the `toolref_histories` metric is gone."""
    messages = [{"role": "user", "content": "hello"}]
    kept = await api.post(
        "/v1/messages:hydrate", json={"messages": messages}, headers={"Toolref-History": "?1"}
    )
    continued = await api.post(
        "/v1/messages:hydrate", json={"historyRef": "th_" + "a" * 26, "messages": messages}
    )
    assert (kept.status_code, continued.status_code) == (400, 400)
    answer = await api.get("/metrics")
    samples = await scrape(api)
    route = "/v1/messages:hydrate"
    assert value(samples, "toolref_requests_total", method="POST", route=route, status="400") == 2
    assert "toolref_histories" not in answer.text


async def test_each_app_has_its_own_registry(make_api: Api) -> None:
    one, two = await make_api(), await make_api()
    await one.post("/v1/invocations", json={"invocations": [INVOCATION]})
    assert value(await scrape(one), "toolref_refs_registered_total", new="true") == 1
    assert value(await scrape(two), "toolref_refs_registered_total", new="true") == 0


async def test_metrics_name_no_tenant_and_need_no_key(make_api: Api) -> None:
    keyed = await make_api(api_keys=KEYS, headers={"Authorization": f"Bearer {SECRET_KEY}"})
    await keyed.post("/v1/invocations", json={"invocations": [INVOCATION]})
    del keyed.headers["Authorization"]
    answer = await keyed.get("/metrics")
    assert answer.status_code == 200
    assert "acme" not in answer.text
    assert "toolref_refs_registered_total" in answer.text


# --- request ids and access logs ------------------------------------------------------------


async def test_a_request_id_is_made_or_kept_and_sent_back(api: httpx.AsyncClient) -> None:
    made = await api.get("/healthz")
    assert re.fullmatch(r"[0-9a-f]{32}", made.headers["x-request-id"])
    assert made.headers["x-request-id"] != (await api.get("/healthz")).headers["x-request-id"]
    kept = await api.get("/healthz", headers={"X-Request-Id": "chat-backend.42:a"})
    assert kept.headers["x-request-id"] == "chat-backend.42:a"
    # Not a plain token (a log injection attempt, say): replaced, not echoed.
    odd = await api.get("/healthz", headers={"X-Request-Id": 'a b" {}'})
    assert re.fullmatch(r"[0-9a-f]{32}", odd.headers["x-request-id"])


async def test_access_lines_are_json_with_the_request_id_and_no_secrets(
    make_api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    keyed = await make_api(api_keys=KEYS, headers={"Authorization": f"Bearer {SECRET_KEY}"})
    secret_payload = {**INVOCATION, "result": "the payload body must never reach a log"}
    with caplog.at_level(logging.INFO):
        answer = await keyed.post(
            "/v1/invocations",
            json={"invocations": [secret_payload]},
            headers={"X-Request-Id": "req-1"},
        )
        wrong = await keyed.get("/v1/capabilities", headers={"Authorization": "Bearer nope-key"})
    assert answer.status_code == 200
    assert wrong.status_code == 200  # a public route; the key is not looked at
    formatter = JsonFormatter()
    lines = [json.loads(formatter.format(r)) for r in caplog.records]
    access = [line for line in lines if line["logger"] == "toolref_server.access"]
    first = next(line for line in access if line.get("requestId") == "req-1")
    assert first["route"] == "/v1/invocations"
    assert first["status"] == 200
    assert first["method"] == "POST"
    assert first["bytesIn"] > 0
    assert first["bytesOut"] == len(answer.content)
    assert first["durationMs"] >= 0
    text = "\n".join(formatter.format(r) for r in caplog.records)
    for secret in (SECRET_KEY, "nope-key", "must never reach a log"):
        assert secret not in text


async def test_an_unhandled_error_is_a_500_problem_with_the_request_id(
    make_api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    api = await make_api()
    transport = api._transport
    assert isinstance(transport, httpx.ASGITransport)
    app = transport.app
    assert isinstance(app, Starlette)

    async def boom(request: Request) -> Response:
        raise RuntimeError("bug with Authorization: Bearer leaked-key")

    app.router.routes.append(Route("/boom", boom))
    with caplog.at_level(logging.INFO):
        answer = await api.get("/boom", headers={"X-Request-Id": "req-500"})
    assert answer.status_code == 500
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.headers["x-request-id"] == "req-500"
    assert "req-500" in answer.json()["detail"]
    assert "leaked-key" not in answer.text  # the exception text stays in the log
    formatter = JsonFormatter()
    lines = [json.loads(formatter.format(r)) for r in caplog.records]
    failed = next(line for line in lines if line["message"] == "unhandled error")
    assert failed["requestId"] == "req-500"
    assert "RuntimeError" in failed["error"]
    assert "leaked-key" not in failed["error"]
    samples = await scrape(api)
    assert value(samples, "toolref_requests_total", method="GET", route="/boom", status="500") == 1
