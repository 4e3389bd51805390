"""API keys, tenants and isolation."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis
from starlette.routing import Route

from toolref.wire.canonical import digest_of, invocation_digest
from toolref.wire.errors import ConfigurationError
from toolref_server.app import create_app
from toolref_server.http.operation import ApiRoute
from toolref_server.settings import Settings

from ..conftest import Api, key_names, snapshot

ACME_KEY, GLOBEX_KEY, ACME_ROTATED = "acme-secret-1", "globex-secret", "acme-secret-2"
KEYS = ",".join(
    f"{tenant}={hashlib.sha256(key.encode()).hexdigest()}"
    for tenant, key in (("acme", ACME_KEY), ("globex", GLOBEX_KEY), ("acme", ACME_ROTATED))
)
ROOT = Path(__file__).resolve().parents[2]
INVOCATION = {"name": "read_file", "args": {"path": "secret.txt"}, "result": "acme's secret"}


@pytest.fixture
async def clients(make_api: Api) -> dict[str, httpx.AsyncClient]:
    return {
        name: await make_api(api_keys=KEYS, headers=headers)
        for name, headers in {
            "acme": {"Authorization": f"Bearer {ACME_KEY}"},
            "acme2": {"Authorization": f"Bearer {ACME_ROTATED}"},
            "globex": {"Authorization": f"Bearer {GLOBEX_KEY}"},
            "none": {},
            "wrong": {"Authorization": "Bearer not-a-key"},
            "basic": {"Authorization": "Basic YWNtZTpzZWNyZXQ="},
        }.items()
    }


async def test_another_tenants_ref_is_indistinguishable_from_an_unknown_one(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    acme, globex = clients["acme"], clients["globex"]
    registered = await acme.post("/v1/invocations", json={"invocations": [INVOCATION]})
    ref = registered.json()["refs"][0]["ref"]
    unknown = str(invocation_digest("never", {}, "seen").ref)

    for probe in (ref, unknown):
        resolved = await globex.post("/v1/invocations:resolve", json={"refs": [probe]})
        assert resolved.json() == {"invocations": {}, "missing": [probe]}
        found = await globex.post("/v1/invocations:findMissing", json={"refs": [probe]})
        assert found.json() == {"missing": [probe]}
    theirs = await globex.get(f"/v1/invocations/{ref}")
    never = await globex.get(f"/v1/invocations/{unknown}")
    assert theirs.status_code == never.status_code == 404
    # Same body but for the ref itself.
    assert theirs.json()["detail"].replace(ref, "R") == never.json()["detail"].replace(unknown, "R")

    mine = await acme.post("/v1/invocations:resolve", json={"refs": [ref]})
    assert mine.json()["invocations"][ref]["result"] == "acme's secret"


async def test_tenants_register_independently(
    clients: dict[str, httpx.AsyncClient], redis: Redis
) -> None:
    first = await clients["acme"].post("/v1/invocations", json={"invocations": [INVOCATION]})
    second = await clients["globex"].post("/v1/invocations", json={"invocations": [INVOCATION]})
    assert first.json()["refs"][0]["new"] is True
    assert second.json()["refs"][0]["new"] is True  # globex cannot learn acme holds it
    keys = await key_names(redis)
    ref_key = digest_of(INVOCATION).ref.key
    assert keys == [f"tr:acme:i:{ref_key}", f"tr:globex:i:{ref_key}"]


async def test_rotated_keys_reach_the_same_tenant(clients: dict[str, httpx.AsyncClient]) -> None:
    registered = await clients["acme"].post("/v1/invocations", json={"invocations": [INVOCATION]})
    ref = registered.json()["refs"][0]["ref"]
    assert (await clients["acme2"].get(f"/v1/invocations/{ref}")).status_code == 200


@pytest.mark.parametrize("who", ["none", "wrong", "basic"])
async def test_missing_or_wrong_key_is_401_and_changes_nothing(
    clients: dict[str, httpx.AsyncClient], redis: Redis, who: str
) -> None:
    before = await snapshot(redis)
    client = clients[who]
    for method, path, body in (
        ("POST", "/v1/invocations", {"invocations": [INVOCATION]}),
        ("POST", "/v1/invocations:findMissing", {"refs": []}),
        ("POST", "/v1/invocations:resolve", {"refs": []}),
        ("GET", f"/v1/invocations/{digest_of(INVOCATION).ref}", None),
    ):
        response = await client.request(method, path, json=body)
        assert response.status_code == 401, (path, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert response.json()["type"] == "urn:toolref:problem:unauthorized"
    assert await snapshot(redis) == before


def readme_public_paths() -> list[str]:
    """The paths docs/api.md says need no key ("`/a`, `/b` and `/c` need no key")."""
    text = " ".join((ROOT / "docs" / "api.md").read_text().split())
    sentence = re.search(r"((?:`/[^`]*`(?:, | and )?)+) need no key", text)
    assert sentence is not None, "docs/api.md no longer lists the endpoints that need no key"
    return re.findall(r"`(/[^`]*)`", sentence[1])


async def test_the_endpoints_the_readme_calls_public_are_exactly_those_needing_no_key(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    public = readme_public_paths()
    for path in public:
        # `/` redirects to the page.
        answer = await clients["none"].get(path, follow_redirects=True)
        assert answer.status_code == 200, path
    ref = digest_of(INVOCATION).ref
    routes = [r for r in create_app(Settings(api_keys=KEYS)).routes if isinstance(r, Route)]
    assert {r.path for r in routes} >= set(public)
    # Those two take the metrics key, or come from this machine (test_server_metrics.py).
    metrics = {r.path for r in routes if isinstance(r, ApiRoute) and r.operation.auth == "metrics"}
    assert metrics == {"/metrics", "/v1/savings"}
    for route in routes:
        if route.path in public or route.path in metrics:
            continue
        for method in sorted((route.methods or set()) - {"HEAD"}):
            path = route.path.replace("{ref}", str(ref))
            response = await clients["none"].request(method, path, json={})
            assert response.status_code == 401, (method, path, response.text)


async def test_loopback_without_keys_is_one_local_tenant(
    api: httpx.AsyncClient, redis: Redis
) -> None:
    response = await api.post(
        "/v1/invocations",
        json={"invocations": [INVOCATION]},
        headers={"Authorization": "Bearer anything"},
    )
    assert response.status_code == 200
    assert await key_names(redis) == [f"tr:local:i:{digest_of(INVOCATION).ref.key}"]


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "example.org"])
def test_refuses_to_start_exposed_without_keys(host: str) -> None:
    with pytest.raises(ConfigurationError, match="TOOLREF_API_KEYS"):
        create_app(Settings(host=host, redis_url="redis://unused"))


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
def test_loopback_without_keys_starts(host: str) -> None:
    create_app(Settings(host=host, redis_url="redis://unused"))


def test_exposed_with_keys_starts() -> None:
    create_app(Settings(host="0.0.0.0", redis_url="redis://unused", api_keys=KEYS))
