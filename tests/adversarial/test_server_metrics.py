"""GET /metrics and GET /v1/savings (request counts and bytes per tenant): without a key of
their own, answered only to requests made on the service's machine (a loopback peer, no
proxy header); with TOOLREF_METRICS_KEY, to whoever sends that key, which tenant keys do not
replace. Before, without the key they answered anyone who reached the bind address."""

from __future__ import annotations

import hashlib
import logging

import httpx
import pydantic
import pytest
from redis.asyncio import Redis

from tests.support.servers import serve
from toolref_server.app import create_app
from toolref_server.settings import Settings

from ..conftest import Api

pytestmark = pytest.mark.engine

SCRAPER = "scraper-secret"
TENANT = "tenant-secret"
METRICS_KEY = hashlib.sha256(SCRAPER.encode()).hexdigest()
API_KEYS = f"acme={hashlib.sha256(TENANT.encode()).hexdigest()}"


METRICS_PATHS = ("/metrics", "/v1/savings")


# The `Host` values a request made on this machine names the service by: a loopback address
# or `localhost`, with any port (or none), in any case.
LOCAL_HOSTS = (
    "127.0.0.1:8750",
    "localhost",
    "LocalHost:9000",
    "127.8.9.10",
    "[::1]:8750",
    "[::1]",
    "[::ffff:127.0.0.1]:80",
)


@pytest.mark.parametrize("peer", ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"])
async def test_without_a_key_this_machine_reads_them(make_api: Api, peer: str) -> None:
    api = await make_api(api_keys=API_KEYS, peer=peer)
    for host in LOCAL_HOSTS:
        response = await api.get("/metrics", headers={"Host": host})
        assert response.status_code == 200, host
        assert b"toolref_requests_total" in response.content
        assert (await api.get("/v1/savings", headers={"Host": host})).status_code == 200, host


@pytest.mark.parametrize(
    "host",
    [
        "rebind.example:8750",  # a page's own name, pointed at 127.0.0.1 (DNS rebinding)
        "rebind.example",
        "127.0.0.1.rebind.example:8750",
        "localhost.rebind.example",
        "toolref.test",
        "10.1.2.3:8750",  # an address, but not loopback
        "[2001:db8::1]:8750",
        "",
    ],
)
async def test_without_a_key_a_loopback_request_for_another_host_is_refused(
    make_api: Api, host: str
) -> None:
    """A web page the operator visits can point a name of its own at 127.0.0.1 after it
    loaded: the browser's requests then come from loopback, for `Host: rebind.example`, and
    the page reads what they answer. Before, they were answered."""
    api = await make_api(api_keys=API_KEYS)
    for path in METRICS_PATHS:
        response = await api.get(path, headers={"Host": host})
        assert response.status_code == 403, (path, host)
        assert response.headers["content-type"] == "application/problem+json"
        problem = response.json()
        assert problem["type"] == "urn:toolref:problem:forbidden"
        detail = problem["detail"]
        assert f"Host {host!r}" in detail
        for said in ("localhost", "127.0.0.1", "DNS rebinding", "TOOLREF_METRICS_KEY"):
            assert said in detail, said
        assert "toolref_requests_total" not in response.text
    # With the metrics key set, the key decides, whatever the Host.
    keyed = await make_api(api_keys=API_KEYS, metrics_key=METRICS_KEY)
    for path in METRICS_PATHS:
        answer = await keyed.get(path, headers={"Host": host, "Authorization": f"Bearer {SCRAPER}"})
        assert answer.status_code == 200, (path, host)


@pytest.mark.parametrize("peer", ["203.0.113.9", "10.1.2.3", "::ffff:10.1.2.3", "2001:db8::1"])
async def test_without_a_key_another_machine_is_refused_saying_how_to_set_one(
    make_api: Api, peer: str
) -> None:
    api = await make_api(api_keys=API_KEYS, peer=peer)
    for path in METRICS_PATHS:
        # Whatever it sends: with no metrics key configured, no key opens it from there.
        for headers in ({}, {"Authorization": f"Bearer {SCRAPER}"}):
            response = await api.get(path, headers=headers)
            assert response.status_code == 403, (path, headers)
            assert response.headers["content-type"] == "application/problem+json"
            problem = response.json()
            assert problem["type"] == "urn:toolref:problem:forbidden"
            detail = problem["detail"]
            assert f"GET {path} answers only requests made on the service's own machine" in detail
            assert f"from {peer}, not a loopback address" in detail
            for fix in ("TOOLREF_METRICS_KEY", "toolref-server hash-key", "Authorization: Bearer"):
                assert fix in detail, fix
    # The rest of the open endpoints stay open to it; the document says 403.
    assert (await api.get("/healthz")).status_code == 200
    document = (await api.get("/openapi.json")).json()
    for path in METRICS_PATHS:
        responses = document["paths"][path]["get"]["responses"]
        assert "403" in responses
        assert "401" not in responses


@pytest.mark.parametrize(
    "header",
    [
        ("X-Forwarded-For", "203.0.113.9"),
        ("X-Forwarded-For", "127.0.0.1"),  # a client's own claim, passed on by a proxy
        ("Forwarded", "for=203.0.113.9;proto=https"),
        ("X-Real-IP", "203.0.113.9"),
        ("X-Forwarded-Proto", "https"),
        ("Via", "1.1 proxy"),
    ],
)
async def test_without_a_key_a_request_through_a_proxy_is_refused(
    make_api: Api, header: tuple[str, str]
) -> None:
    """A proxy on this machine connects from loopback: what it adds says it is one."""
    api = await make_api(api_keys=API_KEYS)
    for path in METRICS_PATHS:
        response = await api.get(path, headers=[header])
        assert response.status_code == 403, (path, header)
        assert f"through a proxy (it carries {header[0].title()})" in response.json()["detail"]


async def test_over_a_socket_uvicorn_s_forwarded_address_opens_nothing(redis: Redis) -> None:
    """uvicorn (as `serve` runs it: proxy headers on, FORWARDED_ALLOW_IPS loopback) takes a
    loopback peer's `X-Forwarded-For` as the client: even one naming 127.0.0.1 is refused."""
    app = create_app(Settings(redis_url="unused", api_keys=API_KEYS), redis=redis)
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/metrics")).status_code == 200
        port = httpx.URL(url).port
        for host in (f"rebind.example:{port}", "rebind.example"):  # DNS rebinding
            answer = await client.get("/metrics", headers={"Host": host})
            assert answer.status_code == 403, host
            assert f"Host {host!r}" in answer.json()["detail"]
        assert (await client.get("/v1/savings", headers={"Host": "localhost"})).status_code == 200
        for claimed in ("127.0.0.1", "203.0.113.9"):
            answer = await client.get("/metrics", headers={"X-Forwarded-For": claimed})
            assert answer.status_code == 403, claimed
            assert "through a proxy (it carries X-Forwarded-For)" in answer.json()["detail"]


async def test_with_the_key_any_machine_reads_them(make_api: Api) -> None:
    api = await make_api(api_keys=API_KEYS, metrics_key=METRICS_KEY, peer="203.0.113.9")
    for path in METRICS_PATHS:
        assert (await api.get(path)).status_code == 401
        scraped = await api.get(
            path, headers={"Authorization": f"Bearer {SCRAPER}", "X-Forwarded-For": "10.0.0.1"}
        )
        assert scraped.status_code == 200, path


async def test_a_metrics_key_is_required_once_set(make_api: Api) -> None:
    api = await make_api(api_keys=API_KEYS, metrics_key=METRICS_KEY.upper())
    for headers, invalid in (
        ({}, False),
        ({"Authorization": "Bearer wrong"}, True),
        ({"Authorization": f"Bearer {TENANT}"}, True),  # a tenant's key is not the scraper's
        ({"Authorization": f"Basic {SCRAPER}"}, False),
    ):
        response = await api.get("/metrics", headers=headers)
        assert response.status_code == 401, headers
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["type"] == "urn:toolref:problem:unauthorized"
        assert "TOOLREF_METRICS_KEY" in response.json()["detail"]
        challenge = response.headers["www-authenticate"]
        assert challenge.startswith("Bearer")
        assert ('error="invalid_token"' in challenge) is invalid
    scraped = await api.get("/metrics", headers={"Authorization": f"Bearer {SCRAPER}"})
    assert scraped.status_code == 200
    assert b"toolref_requests_total" in scraped.content
    # The other open endpoints stay open; the document says /metrics takes its key.
    assert (await api.get("/healthz")).status_code == 200
    document = (await api.get("/openapi.json")).json()
    assert document["paths"]["/metrics"]["get"]["security"] == [{"metricsKey": []}]
    assert "401" in document["paths"]["/metrics"]["get"]["responses"]


def test_a_metrics_key_that_is_not_a_hash_is_refused_at_start() -> None:
    with pytest.raises(pydantic.ValidationError, match="hash-key"):
        Settings(metrics_key=SCRAPER)


@pytest.mark.parametrize(
    "settings",
    [
        {"host": "0.0.0.0", "api_keys": API_KEYS},  # scrapers elsewhere are refused
        {"api_keys": API_KEYS},  # loopback with tenants: a proxy in front, most likely
    ],
)
def test_no_metrics_key_on_a_service_others_reach_is_warned_about(
    caplog: pytest.LogCaptureFixture, settings: dict[str, str]
) -> None:
    with caplog.at_level(logging.WARNING, logger="toolref_server"):
        create_app(Settings.model_validate({"redis_url": "redis://unused", **settings}))
    (warning,) = [r.getMessage() for r in caplog.records if "TOOLREF_METRICS_KEY" in r.getMessage()]
    for said in ("made on this machine", "proxy", "toolref-server hash-key", "403"):
        assert said in warning, said


def test_no_warning_with_the_key_or_for_a_lone_local_service(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="toolref_server"):
        create_app(
            Settings(
                host="0.0.0.0",
                api_keys=API_KEYS,
                metrics_key=METRICS_KEY,
                redis_url="redis://unused",
            )
        )
        create_app(Settings(redis_url="redis://unused"))  # loopback, no tenants
    assert not any("TOOLREF_METRICS_KEY" in r.getMessage() for r in caplog.records)
