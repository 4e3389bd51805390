"""GET /metrics: open by default (on the bind address, loopback unless set otherwise), or
behind a key of its own (TOOLREF_METRICS_KEY) that tenant keys do not replace."""

from __future__ import annotations

import hashlib
import logging

import pydantic
import pytest

from toolref_server.app import create_app
from toolref_server.settings import Settings

from ..conftest import Api

pytestmark = pytest.mark.engine

SCRAPER = "scraper-secret"
TENANT = "tenant-secret"
METRICS_KEY = hashlib.sha256(SCRAPER.encode()).hexdigest()
API_KEYS = f"acme={hashlib.sha256(TENANT.encode()).hexdigest()}"


async def test_metrics_are_open_by_default(make_api: Api) -> None:
    api = await make_api(api_keys=API_KEYS)
    response = await api.get("/metrics")
    assert response.status_code == 200
    assert b"toolref_requests_total" in response.content


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


def test_open_metrics_beyond_loopback_are_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="toolref_server"):
        create_app(Settings(host="0.0.0.0", api_keys=API_KEYS, redis_url="redis://unused"))
    assert any("TOOLREF_METRICS_KEY" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="toolref_server"):
        create_app(
            Settings(
                host="0.0.0.0",
                api_keys=API_KEYS,
                metrics_key=METRICS_KEY,
                redis_url="redis://unused",
            )
        )
        create_app(Settings(redis_url="redis://unused"))  # loopback
    assert not any("TOOLREF_METRICS_KEY" in r.getMessage() for r in caplog.records)
