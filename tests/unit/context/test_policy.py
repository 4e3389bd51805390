"""Context editing's policy: the settings' default, overrides by upstream and tenant, the
request header within the mode, and configuration mistakes refused with the fix."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from toolref.wire.errors import BadRequestError, ConfigurationError
from toolref_server.app import create_app
from toolref_server.context.policy import context_header, wanted
from toolref_server.settings import Settings
from toolref_server.settings.config_file import parse
from toolref_server.settings.context import Policy, parse_policies


def test_the_tenant_wins_over_the_upstream_which_wins_over_the_default() -> None:
    policies = {
        "upstreams": {"anthropic": {"trigger_tokens": 50_000, "keep": 3}},
        "tenants": {"acme": {"keep": 9, "exclude_tools": ["Read"], "mode": "never"}},
    }
    settings = Settings(context_editing="on", context_policies=json.dumps(policies))
    found = settings.context_policy
    assert found.of("openai", "bob") == settings.context_policy.default
    assert found.of("anthropic", "bob").trigger_tokens == 50_000
    assert found.of("anthropic", "bob").keep == 3
    acme = found.of("anthropic", "acme")
    assert (acme.trigger_tokens, acme.keep, acme.mode) == (50_000, 9, "never")
    assert acme.exclude_tools == frozenset({"Read"})


@pytest.mark.parametrize(
    ("mode", "header", "edited"),
    [
        ("off", None, False),
        ("off", "on", True),
        ("on", None, True),
        ("on", "off", False),
        ("on", " ON ", True),
        ("never", "on", False),
        ("never", None, False),
    ],
)
def test_a_request_asks_or_refuses_within_the_mode(
    mode: str, header: str | None, edited: bool
) -> None:
    assert wanted(Policy(mode=mode), header) is edited


def test_a_wrong_header_is_a_bad_request_saying_what_to_send() -> None:
    with pytest.raises(BadRequestError, match="send `on`"):
        wanted(Policy(mode="on"), "yes")
    with pytest.raises(BadRequestError, match="send `on`"):
        wanted(Policy(mode="on"), "on, yes")


@pytest.mark.parametrize("mode", ["off", "on"])
def test_an_off_added_after_the_clients_on_refuses(mode: str) -> None:
    """A proxy may add `Toolref-Context-Editing: off` behind a client's `on`: every value
    is read (the first alone was, and the request was edited)."""
    scope = {
        "type": "http",
        "headers": [
            (b"toolref-context-editing", b"on"),
            (b"toolref-context-editing", b"off"),
        ],
    }
    assert context_header(scope) == "on, off"
    assert wanted(Policy(mode=mode), context_header(scope)) is False
    assert wanted(Policy(mode=mode), context_header({"type": "http", "headers": []})) is (
        mode == "on"
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "is not JSON"),
        ('{"upstream": {}}', "`upstreams` and `tenants`"),
        ('{"tenants": []}', "give an object"),
        ('{"tenants": {"a": {"keeps": 3}}}', "no policy field is named 'keeps'"),
        ('{"tenants": {"a": {"keep": "3"}}}', "give a int"),
        ('{"tenants": {"a": {"keep": true}}}', "give a int"),
        ('{"tenants": {"a": {"mode": "always"}}}', "one of off, on, never"),
        ('{"tenants": {"a": {"keep": -1}}}', "at least 0"),
        ('{"tenants": {"a": {"summary_chars": 0}}}', "from 40 to 20000"),
        ('{"tenants": {"a": {"max_messages": 0}}}', "at least 1"),
        ('{"tenants": {"a": {"summarizer": "gpt"}}}', "extractive"),
        ('{"tenants": {"a": {"exclude_tools": [1]}}}', "list of tool names"),
        # Review: JSON's NaN and Infinity were taken (a cost counter then read NaN for good),
        # and a batch freeing 0 tokens, which TOOLREF_CONTEXT_CLEAR_AT_LEAST refuses.
        ('{"tenants": {"a": {"price_per_mtok": NaN}}}', "finite number, not nan"),
        ('{"tenants": {"a": {"rewrite_weight": Infinity}}}', "finite number, not inf"),
        ('{"upstreams": {"a": {"price_per_mtok": -Infinity}}}', "finite number"),
        ('{"tenants": {"a": {"clear_at_least": 0}}}', "at least 1"),
    ],
)
def test_wrong_policies_are_refused_naming_the_fix(text: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        parse_policies(text, Policy())
    with pytest.raises(ValidationError, match=says):
        Settings(context_policies=text)


def test_the_switch_and_the_summarizer_are_checked() -> None:
    with pytest.raises(ValidationError, match="off, on, never"):
        Settings(context_editing="yes")
    with pytest.raises(ValidationError, match="extractive"):
        Settings(context_summarizer="mine")


def test_the_config_file_gives_policies_as_tables() -> None:
    document = {
        "context": {
            "context_editing": "on",
            "context_policies": {"upstreams": {"anthropic": {"keep": 2}}},
        }
    }
    found = {s.variable: s.text for s in parse(document, "toolref.toml")}
    assert found["TOOLREF_CONTEXT_EDITING"] == "on"
    assert json.loads(found["TOOLREF_CONTEXT_POLICIES"]) == {
        "upstreams": {"anthropic": {"keep": 2}}
    }


def test_a_summarizer_the_service_does_not_offer_is_refused_at_start() -> None:
    with pytest.raises(ConfigurationError, match="TOOLREF_CONTEXT_SUMMARIZER is openai-compatible"):
        Settings(context_summarizer="openai-compatible").check_context_summarizers()
    policies = json.dumps({"tenants": {"acme": {"summarizer": "openai-compatible"}}})
    with pytest.raises(ConfigurationError, match=r"tenants\.acme"):
        Settings(context_policies=policies).check_context_summarizers()
    offered = Settings(context_summarizer="openai-compatible", llm_base_url="http://127.0.0.1:9/v1")
    offered.check_context_summarizers()  # offered: no refusal


def test_a_policy_for_an_upstream_or_tenant_the_service_lacks_is_refused_at_start() -> None:
    """Review: a policy under a name no upstream or tenant has (`antropic`, a tenant of
    another deployment) was kept and never applied, without a word."""
    keys = f"acme={'a' * 64},globex={'b' * 64}"
    upstreams = "anthropic=https://api.anthropic.com,openai=https://api.openai.com"
    known = {"upstreams": {"anthropic": {"keep": 2}}, "tenants": {"acme": {"keep": 3}}}
    Settings(
        api_keys=keys, upstreams=upstreams, context_policies=json.dumps(known)
    ).check_context_names()
    local = json.dumps({"tenants": {"local": {"keep": 3}}})  # the one tenant without keys
    Settings(context_policies=local).check_context_names()
    for policies, says in (
        (
            {"upstreams": {"antropic": {"keep": 2}}},
            "TOOLREF_CONTEXT_POLICIES upstreams.antropic names no upstream of this service "
            "(TOOLREF_UPSTREAMS gives: anthropic, openai), so that policy would never apply; "
            "did you mean 'anthropic'?",
        ),
        (
            {"tenants": {"acme-corp": {"mode": "never"}}},
            "TOOLREF_CONTEXT_POLICIES tenants.acme-corp names no tenant of this service "
            "(TOOLREF_API_KEYS gives: acme, globex)",
        ),
    ):
        settings = Settings(
            api_keys=keys, upstreams=upstreams, context_policies=json.dumps(policies)
        )
        with pytest.raises(ConfigurationError) as refused:
            settings.check_context_names()
        assert refused.value.detail.startswith(says)
    with pytest.raises(ConfigurationError, match="gives: local"):
        Settings(context_policies=json.dumps({"tenants": {"acme": {}}})).check_context_names()
    unknown = json.dumps({"upstreams": {"antropic": {"keep": 2}}})
    with pytest.raises(ConfigurationError, match=r"upstreams\.antropic"):  # the service's start
        create_app(Settings(redis_url="unused", context_policies=unknown))
