"""The LLM's connections and each tenant's share of them (issue 41): defaults derived from
the settings they share, and values that would defeat them refused at start."""

from __future__ import annotations

import hashlib
import re

import pytest
from pydantic import ValidationError

from toolref_server.settings import Settings

KEYS = ",".join(f"{t}={hashlib.sha256(t.encode()).hexdigest()}" for t in ("a", "b"))


def test_the_defaults_are_derived_from_the_connections_and_the_timeout() -> None:
    found = Settings(redis_url="unused", api_keys=KEYS)
    assert found.llm_max_connections == 100
    assert found.llm_tenant_calls_limit == 25
    assert found.llm_pool_wait_seconds == 2.0
    assert Settings(redis_url="unused", llm_timeout=1.0).llm_pool_wait_seconds == 0.25
    # One tenant (or none): no share to keep for others.
    assert Settings(redis_url="unused").llm_tenant_calls_limit is None
    small = Settings(redis_url="unused", api_keys=KEYS, llm_max_connections=2)
    assert small.llm_tenant_calls_limit == 1


def test_a_pool_wait_as_long_as_the_timeout_is_refused() -> None:
    said = re.escape("TOOLREF_LLM_POOL_WAIT (8.0) is not below")
    with pytest.raises(ValidationError, match=said):
        Settings(redis_url="unused", llm_pool_wait=8.0)


def test_a_tenant_share_of_every_connection_is_refused_with_two_tenants() -> None:
    said = re.escape("TOOLREF_LLM_TENANT_CALLS_IN_FLIGHT (100) is not below")
    with pytest.raises(ValidationError, match=said):
        Settings(redis_url="unused", api_keys=KEYS, llm_tenant_calls_in_flight=100)
    alone = Settings(redis_url="unused", llm_tenant_calls_in_flight=100)
    assert alone.llm_tenant_calls_limit is None
