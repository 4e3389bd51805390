"""The settings as operators see them: every `TOOLREF_*` variable, its type, default and
bounds, which group of `toolref_server.settings` declares it, and the docs naming only real
ones.

The table below is the snapshot of settings.py before it was split by concern (issue 29,
commit eb8fd40): the split kept every variable, default, type and bound as it was. A change
to any of them is a change to operators' configuration: make it here too, on purpose, with
docs/api.md's table.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource

from toolref_server.settings import Settings
from toolref_server.settings.access import AccessSettings
from toolref_server.settings.bodies import BodyLimits
from toolref_server.settings.caches import CacheSettings
from toolref_server.settings.connections import ConnectionSettings
from toolref_server.settings.context import ContextSettings
from toolref_server.settings.environment import ELSEWHERE
from toolref_server.settings.gateway import GatewaySettings
from toolref_server.settings.records import RecordSettings
from toolref_server.settings.serving import ServingSettings
from toolref_server.settings.store import StoreSettings
from toolref_server.settings.summaries import SummarySettings

ROOT = Path(__file__).resolve().parents[2]
MiB = 2**20

# Group -> variable -> (type, default, bounds).
TABLE: dict[type[BaseModel], dict[str, tuple[str, Any, str]]] = {
    ServingSettings: {
        "TOOLREF_HOST": ("str", "127.0.0.1", ""),
        "TOOLREF_PORT": ("int", 8750, "ge=0 le=65535"),
        "TOOLREF_WORKERS": ("int", 1, "ge=1"),
        "TOOLREF_WORK_THREADS": ("int", 2, "ge=1 le=64"),
        "TOOLREF_OFFLOAD_BYTES": ("int", 512 * 1024, "ge=0"),
        "TOOLREF_SHUTDOWN_TIMEOUT": ("int", 20, "ge=1"),
        "TOOLREF_RETRY_AFTER_SECONDS": ("int", 1, "ge=1"),
        "TOOLREF_SAMPLE_SECONDS": ("float", 5.0, "gt=0 le=60"),  # issue 32
        "TOOLREF_USAGE_PENDING_SLOTS": ("int", 20_000, "ge=1"),  # review: usage counters
        "TOOLREF_LOG_LEVEL": ("str", "info", ""),
        "TOOLREF_EVENT_LOOP": ("str", "auto", ""),
    },
    ConnectionSettings: {
        "TOOLREF_HEADER_TIMEOUT": ("float", 10.0, "gt=0"),
        "TOOLREF_BODY_TIMEOUT": ("float", 10.0, "gt=0"),
        "TOOLREF_BODY_MIN_RATE": ("int", 16_384, "ge=1"),
        "TOOLREF_SEND_TIMEOUT": ("float", 30.0, "gt=0"),
        "TOOLREF_KEEP_ALIVE_TIMEOUT": ("int", 5, "ge=1"),
        "TOOLREF_MAX_CONNECTIONS": ("int", 1000, "ge=1"),
        "TOOLREF_MAX_REQUESTS_IN_FLIGHT": ("int", 128, "ge=1"),
        # review: tenant fairness (unset: a quarter of the two above)
        "TOOLREF_TENANT_REQUESTS_IN_FLIGHT": ("int | None", None, "ge=1"),
        "TOOLREF_TENANT_CHANNELS": ("int | None", None, "ge=1"),
        # review: the channel receiver's idle close (above the sender's own 60 s)
        "TOOLREF_CHANNEL_IDLE_SECONDS": ("float", 300.0, "gt=0"),
    },
    BodyLimits: {
        "TOOLREF_MAX_BODY_BYTES": ("int", 32 * MiB, "ge=1024"),
        "TOOLREF_MAX_DECOMPRESSED_BYTES": ("int", 64 * MiB, "ge=1024"),
        "TOOLREF_MAX_INFLATED_IN_FLIGHT": ("int", 256 * MiB, "ge=1024"),
        # review: one tenant's bodies (unset: a quarter of the above, at least one request's)
        "TOOLREF_TENANT_INFLATED_IN_FLIGHT": ("int | None", None, "ge=1024"),
        "TOOLREF_MAX_DEPTH": ("int", 128, "ge=2 le=512"),
        "TOOLREF_MAX_ITEMS": ("int", 100_000, "ge=10"),
        "TOOLREF_MAX_CONTAINERS": ("int", 1_000_000, "ge=100"),
        "TOOLREF_MAX_BATCH": ("int", 1000, "ge=1"),
        "TOOLREF_MAX_MESSAGES": ("int", 5000, "ge=1"),
        "TOOLREF_MAX_EDIT_ENTRIES": ("int", 50_000, "ge=16"),
    },
    AccessSettings: {
        "TOOLREF_API_KEYS": ("str", "", ""),
        "TOOLREF_METRICS_KEY": ("str", "", ""),
        "TOOLREF_TENANT_REQUESTS_PER_SECOND": ("float", 200.0, "ge=0"),
        "TOOLREF_TENANT_MAX_BYTES": ("int", 0, "ge=0"),
    },
    StoreSettings: {
        "TOOLREF_REDIS_URL": ("str | None", None, ""),
        "TOOLREF_REDIS_CLUSTER": ("bool", False, ""),
        "TOOLREF_DATA_DIR": ("Path", Path(".toolref/data"), ""),
        "TOOLREF_REDIS_TIMEOUT": ("float", 2.0, "gt=0"),
        "TOOLREF_REDIS_CONNECT_TIMEOUT": ("float", 0.5, "gt=0"),
        "TOOLREF_REDIS_MAX_CONNECTIONS": ("int", 64, "ge=1"),
        "TOOLREF_BREAKER_FAILURES": ("int", 3, "ge=1"),
    },
    RecordSettings: {
        "TOOLREF_TTL_SECONDS": ("int", 86_400, "ge=1"),
        "TOOLREF_EDIT_SUPERSEDED_TTL": ("int", 600, "ge=1"),
        "TOOLREF_EDIT_REFRESH_SECONDS": ("int", 3600, "ge=1"),
        "TOOLREF_EDIT_SNAPSHOT_EVERY": ("int", 8, "ge=1 le=64"),  # issue 30
        "TOOLREF_COMPRESS_THRESHOLD": ("int", 64, "ge=0"),
        "TOOLREF_COMPRESS_LEVEL": ("int", 3, "ge=1 le=22"),
        "TOOLREF_RECORD_DICTIONARY": ("int", 1, "ge=0"),
        "TOOLREF_MESSAGE_DICTIONARY": ("int", 1, "ge=0"),
    },
    CacheSettings: {
        "TOOLREF_VERIFIED_RECORDS": ("int", 100_000, "ge=0"),
        "TOOLREF_VERIFIED_CHARS": ("int", 32 * MiB, "ge=0"),
        "TOOLREF_EDIT_CACHE_BYTES": ("int", 64 * MiB, "ge=0"),  # issue 30
        "TOOLREF_ANSWER_CACHE_BYTES": ("int", 16 * MiB, "ge=0"),  # issue 39
    },
    SummarySettings: {
        "TOOLREF_SUMMARIZER": ("str", "extractive", ""),
        "TOOLREF_SUMMARY_MAX_CHARS": ("int", 400, "ge=40 le=20000"),
        "TOOLREF_TOOL_KINDS": ("str", "", ""),
        "TOOLREF_LLM_BASE_URL": ("str | None", None, ""),
        "TOOLREF_LLM_MODEL": ("str", "gpt-4o-mini", ""),
        "TOOLREF_LLM_API_KEY": ("SecretStr | None", None, ""),
        "TOOLREF_LLM_PROMPT_VERSION": ("str", "v1", ""),
        "TOOLREF_LLM_TIMEOUT": ("float", 8.0, "gt=0"),
        "TOOLREF_LLM_INPUT_CHARS": ("int", 24_000, "ge=1000"),
        "TOOLREF_LLM_MAX_ANSWER_BYTES": ("int", 64 * 1024, "ge=1024"),
        "TOOLREF_LLM_CALLS_PER_REQUEST": ("int", 16, "ge=1"),
        "TOOLREF_LLM_CALLS_PER_TENANT_MINUTE": ("int", 300, "ge=1"),
        "TOOLREF_LLM_TENANT_CALLS_IN_FLIGHT": ("int | None", None, "ge=1"),  # issue 41
        "TOOLREF_LLM_MAX_CONNECTIONS": ("int", 100, "ge=1"),  # issue 41
        "TOOLREF_LLM_POOL_WAIT": ("float | None", None, "gt=0"),  # issue 41
        "TOOLREF_LLM_BREAKER_FAILURES": ("int", 5, "ge=1"),
        "TOOLREF_LLM_BREAKER_SECONDS": ("float", 30.0, "gt=0"),
        "TOOLREF_LLM_FAILURE_SECONDS": ("float", 60.0, "gt=0"),
        "TOOLREF_SUMMARY_LOCK_SECONDS": ("float", 30.0, "gt=0"),
    },
    GatewaySettings: {
        "TOOLREF_UPSTREAMS": ("str", "", ""),
        "TOOLREF_GATEWAY_CONNECT_TIMEOUT": ("float", 10.0, "gt=0"),
        "TOOLREF_GATEWAY_READ_TIMEOUT": ("float", 600.0, "gt=0"),
        "TOOLREF_GATEWAY_MAX_CONNECTIONS": ("int", 256, "ge=1"),
        "TOOLREF_GATEWAY_MAX_REQUESTS_IN_FLIGHT": ("int", 512, "ge=1"),
        "TOOLREF_GATEWAY_TENANT_REQUESTS_IN_FLIGHT": ("int", 64, "ge=1"),
        "TOOLREF_GATEWAY_WS_MAX_MESSAGE_BYTES": ("int", 16 * MiB, "ge=1024"),
        "TOOLREF_GATEWAY_WS_IDLE_TIMEOUT": ("float", 900.0, "gt=0"),
        "TOOLREF_GATEWAY_WS_LIFETIME": ("float", 3600.0, "gt=0"),
    },
    ContextSettings: {
        "TOOLREF_CONTEXT_EDITING": ("str", "off", ""),
        "TOOLREF_CONTEXT_TRIGGER_TOKENS": ("int", 10000, "ge=0"),
        "TOOLREF_CONTEXT_KEEP": ("int", 5, "ge=0"),
        "TOOLREF_CONTEXT_MIN_TOKENS": ("int", 64, "ge=0"),
        "TOOLREF_CONTEXT_CLEAR_AT_LEAST": ("int", 2000, "ge=1"),
        "TOOLREF_CONTEXT_EXCLUDE_TOOLS": ("str", "", ""),
        "TOOLREF_CONTEXT_SUMMARIZER": ("str", "extractive", ""),
        "TOOLREF_CONTEXT_SUMMARY_CHARS": ("int", 200, "ge=40 le=20000"),
        "TOOLREF_CONTEXT_RESPECT_CLIENT": ("bool", True, ""),
        "TOOLREF_CONTEXT_PRICE_PER_MTOK": ("float", 3.0, "ge=0"),
        "TOOLREF_CONTEXT_REWRITE_WEIGHT": ("float", 11.5, "ge=0"),
        "TOOLREF_CONTEXT_MAX_MESSAGES": ("int", 20000, "ge=1"),
        "TOOLREF_CONTEXT_POLICIES": ("str", "", ""),
    },
}
EVERY = {name: row for rows in TABLE.values() for name, row in rows.items()}
# `TOOLREF_*` variables the docs name that are not service settings: the test suite's.
NOT_SETTINGS = {
    "TOOLREF_TEST_REDIS_URL": "tests/conftest.py: the engine the tests use instead of their own",
    "TOOLREF_TEST_CLUSTER": "tests/cluster: runs the cluster tests",
    "TOOLREF_UPSTREAM": "docs/operations.md: the misspelling the service refuses",
    "TOOLREF_KYE": "docs/relay.md: the misspelling of TOOLREF_KEY the relay names",
    # docs/edits.md: the settings 0.3 removed or renamed, which the service refuses.
    "TOOLREF_HISTORY_CACHE_BYTES": "removed in 0.3",
    "TOOLREF_GATEWAY_TENANTS": "removed in 0.3",
    "TOOLREF_GATEWAY_HISTORY_CHARS": "removed in 0.3",
    "TOOLREF_HISTORY_SUPERSEDED_TTL": "renamed TOOLREF_EDIT_SUPERSEDED_TTL in 0.3",
    "TOOLREF_HISTORY_REFRESH_SECONDS": "renamed TOOLREF_EDIT_REFRESH_SECONDS in 0.3",
    **ELSEWHERE,
}
ENV_NAME = re.compile(r"\bTOOLREF_[A-Z0-9_]*[A-Z0-9]\b")


def described(field: FieldInfo) -> tuple[str, Any, str]:
    """(type, default, bounds) of a field, as the table spells them."""
    annotation = field.annotation
    kind = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    bounds = [
        f"{bound}={getattr(meta, bound)!r}"
        for meta in field.metadata
        for bound in ("gt", "ge", "lt", "le")
        if hasattr(meta, bound)
    ]
    return kind.replace("pydantic.types.", ""), field.default, " ".join(bounds)


def env_name(field_name: str) -> str:
    return f"TOOLREF_{field_name.upper()}"


def test_every_setting_keeps_its_variable_type_default_and_bounds() -> None:
    found = {env_name(name): described(field) for name, field in Settings.model_fields.items()}
    assert found == EVERY


@pytest.mark.parametrize("group", list(TABLE), ids=lambda group: group.__name__)
def test_each_group_declares_its_settings(group: type[BaseModel]) -> None:
    assert {env_name(name) for name in group.model_fields} == set(TABLE[group])


def test_settings_is_the_groups_and_nothing_else() -> None:
    """No field declared on Settings itself: each belongs to the group of its concern."""
    groups = [base for base in Settings.__bases__ if base is not BaseSettings]
    assert set(groups) == set(TABLE)
    assert vars(Settings).get("__annotations__", {}) == {}


def test_each_variable_is_read_under_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment, not just the field names: a group that gave its fields an alias or
    a prefix of their own would read other variables."""
    for name in [*EVERY, "TOOLREF_NOT_A_SETTING"]:
        monkeypatch.setenv(name, "1")
    read = EnvSettingsSource(Settings)()
    assert {env_name(field) for field in read} == set(EVERY)


NAMING_DOCS = [
    "README.md",
    "docs/api.md",
    "docs/operations.md",
    "docs/relay.md",
    "docs/sdk.md",
    "docs/js.md",
    "docs/edits.md",
    "docs/context-editing.md",
    "deploy/compose.yaml",
    "deploy/k8s/configmap.yaml",
    "deploy/k8s/deployment.yaml",
    "deploy/k8s/secret.yaml",
    "deploy/toolref.example.toml",
]


@pytest.mark.parametrize("doc", NAMING_DOCS)
def test_the_docs_name_only_settings(doc: str) -> None:
    named = set(ENV_NAME.findall((ROOT / doc).read_text()))
    assert named, f"{doc} names no TOOLREF_ variable: the pattern is stale"
    assert named - set(EVERY) - set(NOT_SETTINGS) == set()


def test_the_context_editing_table_shows_the_defaults() -> None:
    """docs/context-editing.md's table of defaults, each as the setting has it."""
    text = (ROOT / "docs/context-editing.md").read_text()
    rows = re.findall(r"^\| `(TOOLREF_[A-Z0-9_]+)` \| `([^`]*)` \|", text, re.M)
    assert len(rows) >= 5, "docs/context-editing.md's table is gone: the pattern is stale"
    for name, shown in rows:
        assert shown == str(EVERY[name][1]), name


def test_every_setting_is_in_the_readme_table() -> None:
    """The other way round: docs/api.md's configuration table lists every setting
    (tests/unit/test_docs.py checks the defaults it shows)."""
    text = (ROOT / "docs/api.md").read_text()
    rows = set(re.findall(r"^\| `(TOOLREF_[A-Z0-9_]+)` \|", text, re.M))
    assert rows == set(EVERY)


def test_the_readme_table_is_grouped_as_the_code() -> None:
    """Each docs/api.md row sits under the heading of the module that declares it."""
    text = (ROOT / "docs/api.md").read_text()
    grouped: dict[str, set[str]] = {}
    group = ""
    for line in text.splitlines():
        heading = re.fullmatch(r"\*\*.+\*\* \(`toolref_server\.settings\.(\w+)`\)", line)
        if heading:
            group = heading.group(1)
        row = re.match(r"\| `(TOOLREF_[A-Z0-9_]+)` \|", line)
        if row:
            grouped.setdefault(group, set()).add(row.group(1))
    expected = {cls.__module__.rsplit(".", 1)[1]: set(rows) for cls, rows in TABLE.items()}
    assert grouped == expected
