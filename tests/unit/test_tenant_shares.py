"""Each tenant's share of what a worker serves at once, checked at start (review: one
tenant's bodies): TOOLREF_TENANT_INFLATED_IN_FLIGHT within the budget of bodies in flight,
and TOOLREF_GATEWAY_TENANT_REQUESTS_IN_FLIGHT below the gateway's requests in flight."""

from __future__ import annotations

import hashlib
from typing import Any, Final

import pydantic
import pytest

from toolref_server.app import create_app
from toolref_server.settings import Settings

MiB: Final = 2**20
TWO: Final = ",".join(f"{t}={hashlib.sha256(t.encode()).hexdigest()}" for t in ("a", "b"))
ONE: Final = f"a={hashlib.sha256(b'a').hexdigest()}"


def settings(**given: Any) -> Settings:
    return Settings(redis_url="unused", **given)


def test_a_tenants_share_is_a_quarter_of_the_budget_at_least_one_request() -> None:
    assert settings(api_keys=TWO).tenant_inflated_limit == 96 * MiB  # 32 + 64 MiB, over 64
    bigger = settings(api_keys=TWO, max_inflated_in_flight=1024 * MiB)
    assert bigger.tenant_inflated_limit == 256 * MiB
    given = settings(api_keys=TWO, tenant_inflated_in_flight=100 * MiB)
    assert given.tenant_inflated_limit == 100 * MiB


@pytest.mark.parametrize("keys", ["", ONE])
def test_one_tenant_or_none_has_the_whole_budget(keys: str) -> None:
    """No other tenant to keep room for: as before, the budget is all its."""
    assert settings(api_keys=keys).tenant_inflated_limit is None
    assert (
        settings(api_keys=keys, tenant_inflated_in_flight=100 * MiB).tenant_inflated_limit is None
    )


def test_a_share_over_the_budget_is_refused_naming_both() -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        settings(tenant_inflated_in_flight=300 * MiB)
    said = str(caught.value)
    assert f"TOOLREF_TENANT_INFLATED_IN_FLIGHT ({300 * MiB}) is over" in said
    assert f"TOOLREF_MAX_INFLATED_IN_FLIGHT ({256 * MiB})" in said
    assert "lower it to at most that" in said


def test_a_share_below_one_request_is_refused_naming_both() -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        settings(tenant_inflated_in_flight=50 * MiB)
    said = str(caught.value)
    assert f"({50 * MiB}) is below what one request may hold ({96 * MiB}" in said
    assert f"raise it to at least {96 * MiB}" in said


def test_the_service_gives_each_tenant_its_share_of_the_budget() -> None:
    app = create_app(settings(api_keys=TWO, tenant_inflated_in_flight=128 * MiB))
    assert app.state.budget.per_tenant == 128 * MiB
    assert "TOOLREF_TENANT_INFLATED_IN_FLIGHT" in app.state.budget.tenant_setting


def test_a_tenants_gateway_requests_must_be_below_the_process_s() -> None:
    """Before: a tenant allowed as many gateway requests in flight as the process took
    every slot, and every other tenant got 503 while they lasted; now the service refuses
    to start, naming both values and the fix."""
    up = "up=http://127.0.0.1:9"
    with pytest.raises(pydantic.ValidationError) as caught:
        settings(api_keys=TWO, upstreams=up, gateway_max_requests_in_flight=64)
    said = str(caught.value)
    assert "TOOLREF_GATEWAY_TENANT_REQUESTS_IN_FLIGHT (64) is not below" in said
    assert "TOOLREF_GATEWAY_MAX_REQUESTS_IN_FLIGHT (64)" in said
    assert "lower it below 64" in said
    # One tenant (no other to refuse), or no gateway: nothing to check.
    settings(api_keys=ONE, upstreams=up, gateway_max_requests_in_flight=1)
    settings(api_keys=TWO, gateway_max_requests_in_flight=1)
    settings(api_keys=TWO, upstreams=up, gateway_max_requests_in_flight=65)


def test_serve_says_which_two_settings_disagree(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from toolref_server import cli

    monkeypatch.setenv("TOOLREF_API_KEYS", TWO)
    monkeypatch.setenv("TOOLREF_UPSTREAMS", "up=http://127.0.0.1:9")
    monkeypatch.setenv("TOOLREF_GATEWAY_MAX_REQUESTS_IN_FLIGHT", "10")
    assert cli.main(["serve"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(
        "toolref-server: TOOLREF_GATEWAY_TENANT_REQUESTS_IN_FLIGHT (64) is not below "
        "TOOLREF_GATEWAY_MAX_REQUESTS_IN_FLIGHT (10)"
    )


def test_a_tenants_requests_and_channels_are_a_quarter_of_the_worker_s() -> None:
    """Review (tenant fairness): each tenant's share of the registry's requests in flight
    and of the connections (its channels), a quarter unless given, at least one; none with
    one tenant or none (no other to keep room for)."""
    two = settings(api_keys=TWO)
    assert (two.tenant_requests_limit, two.tenant_channel_limit) == (32, 250)
    small = settings(api_keys=TWO, max_requests_in_flight=3, max_connections=2)
    assert (small.tenant_requests_limit, small.tenant_channel_limit) == (1, 1)
    given = settings(api_keys=TWO, tenant_requests_in_flight=5, tenant_channels=7)
    assert (given.tenant_requests_limit, given.tenant_channel_limit) == (5, 7)
    for keys in ("", ONE):
        alone = settings(api_keys=keys, tenant_requests_in_flight=5, tenant_channels=7)
        assert (alone.tenant_requests_limit, alone.tenant_channel_limit) == (None, None)


@pytest.mark.parametrize(
    ("given", "setting", "whole"),
    [
        ({"tenant_requests_in_flight": 128}, "TOOLREF_TENANT_REQUESTS_IN_FLIGHT (128)", 128),
        ({"tenant_channels": 1000}, "TOOLREF_TENANT_CHANNELS (1000)", 1000),
    ],
)
def test_a_share_of_all_of_them_is_refused_naming_both(
    given: dict[str, int], setting: str, whole: int
) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        settings(api_keys=TWO, **given)
    said = str(caught.value)
    assert f"{setting} is not below" in said
    assert f"lower it below {whole}" in said
    settings(api_keys=ONE, **given)  # one tenant: no other to refuse
