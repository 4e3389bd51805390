"""`serve --config toolref.toml` (`toolref_server.settings.config_file`): a table per group,
a key per setting, the environment winning, and anything unknown refused with the name
most likely meant. Before issue 32 there was no config file: every setting was one of ~70
environment variables."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from toolref.wire.errors import ConfigurationError
from toolref_server.settings import Settings
from toolref_server.settings.config_file import (
    GROUPS,
    HOME,
    Setting,
    apply,
    exposure,
    parse,
    read,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "toolref.example.toml"


def given(text: str) -> dict[str, str]:
    return {s.variable: s.text for s in parse(tomllib.loads(text), "toolref.toml")}


def refused(text: str) -> str:
    with pytest.raises(ConfigurationError) as caught:
        parse(tomllib.loads(text), "toolref.toml")
    return caught.value.detail


def test_the_example_names_every_setting_under_its_group_and_loads() -> None:
    text = EXAMPLE.read_text()
    table, seen = "", {}
    for line in text.splitlines():
        heading = re.fullmatch(r"\[(\w+)(?:\.(\w+))?\]", line)
        if heading:
            table = heading[1]
            if heading[2]:
                seen[heading[2]] = table
            continue
        key = re.match(r"#? ?(\w+) = ", line)
        if key and key[1] in HOME:
            seen[key[1]] = table
    assert seen == HOME  # every setting, each under the table of its group
    values = {s.variable: s.text for s in read(EXAMPLE)}
    settings = Settings.model_validate(
        {name[len("TOOLREF_") :].lower(): v for name, v in values.items()}
    )
    assert settings.workers == 2
    assert sorted(settings.upstream_urls) == ["anthropic", "openai"]
    assert settings.upstream_urls["anthropic"].shown == "https://api.anthropic.com"
    settings.check_exposure()  # servable as it is


def test_values_become_the_variables_they_stand_for() -> None:
    assert given(
        """
        [serving]
        workers = 3
        [bodies]
        max_body_bytes = 1048576
        [store]
        redis_cluster = true
        [summaries]
        llm_timeout = 2.5
        [gateway.upstreams]
        anthropic = "https://api.anthropic.com"
        local = "http://127.0.0.1:8080/v1"
        [access.api_keys]
        acme = ["aaa", "bbb"]
        globex = "ccc"
        [context.context_policies.tenants.acme]
        keep = 2
        """
    ) == {
        "TOOLREF_WORKERS": "3",
        "TOOLREF_MAX_BODY_BYTES": "1048576",
        "TOOLREF_REDIS_CLUSTER": "true",
        "TOOLREF_LLM_TIMEOUT": "2.5",
        "TOOLREF_UPSTREAMS": "anthropic=https://api.anthropic.com,local=http://127.0.0.1:8080/v1",
        "TOOLREF_API_KEYS": "acme=aaa,acme=bbb,globex=ccc",
        "TOOLREF_CONTEXT_POLICIES": '{"tenants": {"acme": {"keep": 2}}}',
    }
    assert set(GROUPS) == {
        "serving",
        "connections",
        "bodies",
        "access",
        "store",
        "records",
        "caches",
        "summaries",
        "gateway",
        "context",
    }


def test_the_environment_wins_over_the_file() -> None:
    settings = [
        Setting("TOOLREF_WORKERS", "4", "toolref.toml [serving] workers"),
        Setting("TOOLREF_PORT", "9000", "toolref.toml [serving] port"),
    ]
    environ = {"toolref_workers": "2", "PATH": "/bin"}  # any case, as settings are read
    applied = apply(settings, environ)
    assert environ == {"toolref_workers": "2", "PATH": "/bin", "TOOLREF_PORT": "9000"}
    assert [s.variable for s in applied] == ["TOOLREF_PORT"]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('[gateway]\nupstream = "a=http://x"', "no setting is named `upstream`; did you mean "
         "`upstreams` (under [gateway])?"),
        ("[bodies]\nmax_body_byte = 10", "did you mean `max_body_bytes` (under [bodies])?"),
        ("[serving]\nMAX_BODY_BYTES = 10", "did you mean `max_body_bytes` (under [bodies])?"),
        ("[serving]\nmax_body_bytes = 10", "`max_body_bytes` is a setting of [bodies], not "
         "[serving]; move it there"),
        ("[gatway]\nupstreams = ''", "no group of settings is named [gatway]; did you mean "
         "[gateway]?"),
        ("[limits]\nx = 1", "no group of settings is named [limits]. The tables are [serving]"),
        ("workers = 2", "`workers` is a setting of [serving]; put it under that table"),
        ("colour = 2", "`colour` is outside any table"),
        ("[serving]\nworkers = [2]", "toolref.toml [serving] workers: give a string, number or "
         "boolean, not a TOML list"),
        ("[gateway.upstreams]\na = 1", "toolref.toml [gateway] upstreams.a: give a string"),
        ("[summaries]\ntotally_unrelated = 1", "no setting is named `totally_unrelated`. toolref "
         "reads no such key"),
    ],
)  # fmt: skip
def test_anything_unknown_is_refused_with_the_name_meant(text: str, said: str) -> None:
    assert said in refused(text)


def test_a_file_that_is_not_toml_or_not_there_is_named(tmp_path: Path) -> None:
    broken = tmp_path / "toolref.toml"
    broken.write_text("[serving\nworkers = 2\n")
    with pytest.raises(ConfigurationError, match=r"toolref.toml' is not TOML: .*line 1"):
        read(broken)
    with pytest.raises(ConfigurationError, match="cannot read the config file"):
        read(tmp_path / "absent.toml")


# Each holds a secret; the comment says why.
SECRET_FILES = {
    "redis password": '[store]\nredis_url = "redis://:pw1@cache:6379/0"\n',
    "upstream credentials": '[gateway.upstreams]\nup = "https://u:pw1@api.example.com"\n',
    "upstream key in a query": '[gateway]\nllm_base_url = "https://llm.example/v1?key=pw1"\n',
    "api key hashes": f'[access]\napi_keys = "acme={"a" * 64}"\n',
    "metrics key hash": f'[access]\nmetrics_key = "{"b" * 64}"\n',
    "llm api key": '[summaries]\nllm_api_key = "sk-pw1"\n',
}


@pytest.mark.parametrize("text", SECRET_FILES.values(), ids=SECRET_FILES.keys())
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o600, 0o400])
def test_a_file_of_secrets_others_can_read_is_warned_of(
    tmp_path: Path, text: str, mode: int
) -> None:
    """A file that sets a secret-bearing setting warns when its group or others can read
    it, naming the file, its mode and the fix; never quoting a secret."""
    path = tmp_path / "toolref.toml"
    path.write_text(text.replace("[gateway]\nllm_base_url", "[summaries]\nllm_base_url"))
    path.chmod(mode)
    warning = exposure(path, read(path))
    if not mode & 0o044:
        assert warning is None
        return
    assert warning is not None
    assert f"the config file {str(path)!r} holds secrets" in warning
    assert f"(mode {mode:04o})" in warning
    assert f"`chmod 600 {path}`" in warning
    readers = {0o040: "its group", 0o004: "others", 0o044: "its group and others"}
    assert f") and {readers[mode & 0o044]} can read it" in warning
    assert "pw1" not in warning
    assert "a" * 64 not in warning


def test_a_file_without_secrets_is_not_warned_of(tmp_path: Path) -> None:
    path = tmp_path / "toolref.toml"
    path.write_text(
        '[store]\nredis_url = "redis://cache:6379/0"\n'
        '[gateway.upstreams]\nanthropic = "https://api.anthropic.com"\n'
        "[bodies]\nmax_body_bytes = 1048576\n"
    )
    path.chmod(0o644)
    assert exposure(path, read(path)) is None


def test_the_warning_names_each_secret_the_file_holds(tmp_path: Path) -> None:
    path = tmp_path / "toolref.toml"
    path.write_text("".join(SECRET_FILES[k] for k in ("redis password", "api key hashes")))
    path.chmod(0o644)
    warning = exposure(path, read(path))
    assert warning is not None
    assert "redis_url (credentials in a URL)" in warning
    assert "api_keys (API key hashes)" in warning


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[serving]\nhost = true", "toolref.toml [serving] host: `host` is text, not the TOML "
         "boolean true; write it in quotes (\"true\") if that is the text you mean"),
        ("[store]\nredis_url = 6379", "toolref.toml [store] redis_url: `redis_url` is text, not "
         "the TOML integer 6379"),
        ("[summaries]\nllm_model = 4.1", "`llm_model` is text, not the TOML float 4.1; write it "
         "in quotes (\"4.1\")"),
        ("[store]\ndata_dir = 0", "`data_dir` is text, not the TOML integer 0"),
        ("[store]\nredis_cluster = 1", "toolref.toml [store] redis_cluster: `redis_cluster` is "
         "true or false, not the TOML integer 1; write true or false"),
        ("[serving]\nworkers = true", "toolref.toml [serving] workers: `workers` is a number, "
         "not the TOML boolean true; write a number (its default: 1)"),
    ],
)  # fmt: skip
def test_a_value_of_the_wrong_type_is_refused_with_its_key_value_and_fix(
    text: str, said: str
) -> None:
    """Found: a TOML boolean or number given to a text setting (`host = true`,
    `redis_url = 6379`), or a number to a true/false one (`redis_cluster = 1`), became its
    text ("true", "6379", "1") and was taken without a word. Now the file is refused, naming
    the key, the value given and the fix. A string is taken for any setting, as the
    environment gives it."""
    assert said in refused(text)


def test_a_wrong_type_for_a_secret_does_not_show_the_value() -> None:
    """Found: a list table's entry of the wrong type was quoted back, the API key hashes'
    included (secrets whatever their value)."""
    for text in (
        "[summaries]\nllm_api_key = 123456789",
        "[access.api_keys]\nacme = 123456789",
        '[access.api_keys]\nacme = ["ok", 123456789]',
    ):
        detail = refused(text)
        assert "123456789" not in detail, detail
        assert "a secret: not shown" in detail, detail


def test_strings_are_taken_for_any_setting_as_the_environment_gives_them() -> None:
    assert given('[serving]\nworkers = "3"\nhost = "127.0.0.1"\n[store]\nredis_cluster = "1"') == {
        "TOOLREF_WORKERS": "3",
        "TOOLREF_HOST": "127.0.0.1",
        "TOOLREF_REDIS_CLUSTER": "1",
    }


# A commented line of the example shows a sample rather than its setting's default.
SAMPLES = {
    "context_policies": "a policy for a tenant (the default is none)",
    "tenant_inflated_in_flight": "a share in bytes (the default is derived: unset)",
    "tenant_requests_in_flight": "a share of requests (the default is derived: unset)",
    "tenant_channels": "a share of connections (the default is derived: unset)",
    "llm_tenant_calls_in_flight": "a share of LLM connections (the default is derived: unset)",
    "llm_pool_wait": "a quarter of llm_timeout (the default is derived: unset)",
}


def test_the_examples_commented_lines_show_the_real_defaults() -> None:
    """The example says "Commented lines show the defaults": each `# key = value` of a
    setting is its default as `Settings` declares it (`event_loop` showed asyncio after the
    default became auto), a `""  # unset by default` one a setting with no default."""
    wrong, checked = [], 0
    for number, line in enumerate(EXAMPLE.read_text().splitlines(), 1):
        found = re.fullmatch(r"# (\w+) = (.*?)(  # unset by default)?", line)
        if not found or found[1] not in HOME or found[1] in SAMPLES:
            continue
        checked += 1
        shown = tomllib.loads(f"value = {found[2]}")["value"]
        default = Settings.model_fields[found[1]].default
        expected = str(default) if isinstance(default, Path) else default
        if found[3]:
            ok = shown == "" and default in (None, "")
        else:  # 8 for 8.0 is the same number; "8" for 8 is not
            ok = shown == expected and isinstance(shown, str) == isinstance(expected, str)
        if not ok:
            wrong.append(f"line {number}: {found[1]} = {found[2]}, but its default is {default!r}")
    assert checked > len(HOME) // 2, "the example's commented lines were not found"
    assert not wrong, "deploy/toolref.example.toml: " + "; ".join(wrong)
