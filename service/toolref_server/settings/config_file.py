"""`toolref-server serve --config toolref.toml`: the settings in a TOML file, one table per
group of `Settings` (`[serving]`, `[connections]`, `[bodies]`, `[access]`, `[store]`,
`[records]`, `[caches]`, `[summaries]`, `[gateway]`, `[context]`), each key a setting's name
in lower case (`TOOLREF_MAX_BODY_BYTES` is `max_body_bytes` under `[bodies]`).

The file is read once, by the command, into the environment variables it stands for
(`read`), which the command sets where the environment has none (`apply`): the environment
wins over the file, the command's flags over both, and every process (each uvicorn worker)
reads its settings once from its environment as before. A table that is no group, a key
that is no setting, or a setting under another group's table, is refused with the name
most likely meant (`environment.meant`, the rule unknown `TOOLREF_*` variables are refused
by). Values are TOML strings, numbers or booleans: a string for any setting (as the
environment gives it), a boolean only for a true/false setting and a number only for a
numeric one, else the file is refused (`host = true` is no host). The comma-separated
lists (`upstreams`, `api_keys`, `tool_kinds`) may also be tables (`[gateway.upstreams]`
with `anthropic = "https://api.anthropic.com"`; an API key's tenant may list several
hashes).
Pure but for reading the file; linear in its size.

A file that holds secrets should be readable by its owner alone: `exposure` says so when
group or others may read one that does (`serve` logs it as a warning at start). Secrets
are the settings in `SECRETS` whatever their value (API key and metrics key hashes count:
a weak key can be found from its hash, and they say who may use the service), and the URL
settings in `CREDENTIAL_URLS` when a URL in them carries credentials (a userinfo, such as
a Redis password, or a query, such as an upstream's `?key=`: `toolref.wire.redaction`).
"""

from __future__ import annotations

import json
import shlex
import stat
import tomllib
import types
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_settings import BaseSettings

from toolref.wire import redaction
from toolref.wire.errors import ConfigurationError
from toolref_server.settings import Settings
from toolref_server.settings.environment import PREFIX, meant

# Table -> the group it holds: the module name of each group of `Settings`.
GROUPS: Final[dict[str, type[BaseModel]]] = {
    group.__module__.rsplit(".", 1)[1]: group
    for group in Settings.__bases__
    if issubclass(group, BaseModel) and group is not BaseSettings
}
# Settings written `name=value,...`, which a table may give instead.
LISTS: Final = frozenset({"upstreams", "api_keys", "tool_kinds"})
# Settings written as JSON, which a table gives as it is.
JSONS: Final = frozenset({"context_policies"})
HOME: Final = {field: table for table, group in GROUPS.items() for field in group.model_fields}
# Settings that are secrets whatever their value, and why; URL settings that are when a URL
# in them carries credentials.
SECRETS: Final = {
    "api_keys": "API key hashes",
    "metrics_key": "the /metrics key's hash",
    "llm_api_key": "an API key",
}
CREDENTIAL_URLS: Final = frozenset({"redis_url", "upstreams", "llm_base_url"})


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting the file gives: its variable, its text, and where the file says it."""

    variable: str
    text: str
    where: str  # `toolref.toml [bodies] max_body_bytes`


def read(path: Path) -> list[Setting]:
    """The settings `path` gives (`ConfigurationError` saying what is wrong, and where)."""
    try:
        document = tomllib.loads(path.read_text("utf-8"))
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read the config file {str(path)!r} ({exc.strerror or exc}); give "
            "--config the path of a TOML file (deploy/toolref.example.toml shows one)"
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigurationError(
            f"the config file {str(path)!r} is not TOML: {exc}; fix it (deploy/"
            "toolref.example.toml shows the format)"
        ) from None
    return parse(document, str(path))


def parse(document: Mapping[str, Any], name: str) -> list[Setting]:
    """The settings of a parsed file (`name` names it in messages)."""
    found = []
    for table, body in document.items():
        if table not in GROUPS or not isinstance(body, dict):
            raise ConfigurationError(_unknown_table(name, table, body))
        for key, value in body.items():
            where = f"{name} [{table}] {key}"
            home = HOME.get(key)
            if home is None:
                guess = meant(key, HOME)
                hint = f"; did you mean `{guess}` (under [{HOME[guess]}])?" if guess else "."
                raise ConfigurationError(
                    f"{where}: no setting is named `{key}`{hint} toolref reads no such key, "
                    "so it would stay at its default: fix or remove it (docs/operations.md "
                    "lists every setting)"
                )
            if home != table:
                raise ConfigurationError(
                    f"{where}: `{key}` is a setting of [{home}], not [{table}]; move it there"
                )
            _check_type(where, key, value)
            found.append(Setting(PREFIX + key.upper(), _text(where, key, value), where))
    return found


_TOML_TYPES: Final = {bool: "boolean", int: "integer", float: "float"}


def _kind(key: str) -> str:
    """What the setting `key` takes: `bool`, `number` or `text` (its annotation, optional or
    not)."""
    annotation = Settings.model_fields[key].annotation
    if get_origin(annotation) in (Union, types.UnionType):
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    if annotation is bool:
        return "bool"
    return "number" if annotation in (int, float) else "text"


def _check_type(where: str, key: str, value: object) -> None:
    """Refuse a TOML boolean or number given to a setting of another kind: it would become
    its text ("true", "6379") without a word. A string is left to the setting's own check."""
    given = _TOML_TYPES.get(type(value))
    kind = _kind(key)
    if given is None or (kind, given == "boolean") in (("bool", True), ("number", False)):
        return
    secret = key in SECRETS
    shown = "(a secret: not shown)" if secret else _toml(value)
    fact = f"{where}: `{key}` is"
    if kind == "text":
        quoted = '"..."' if secret else json.dumps(_toml(value))
        raise ConfigurationError(
            f"{fact} text, not the TOML {given} {shown}; write it in quotes ({quoted}) if "
            "that is the text you mean, or fix it"
        )
    if kind == "bool":
        raise ConfigurationError(
            f"{fact} true or false, not the TOML {given} {shown}; write true or false"
        )
    default = Settings.model_fields[key].default
    raise ConfigurationError(
        f"{fact} a number, not the TOML {given} {shown}; write a number (its default: {default})"
    )


def _toml(value: object) -> str:
    """A TOML boolean or number as the file wrote it."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def exposure(path: Path, settings: list[Setting]) -> str | None:
    """The warning for `path`, whose `settings` (`read`) hold secrets, when its group or
    others may read it; None when they hold none, or only its owner may."""
    held = [
        f"{key} ({why})"
        for setting in settings
        if (why := _secret(key := setting.variable.removeprefix(PREFIX).lower(), setting.text))
    ]
    if not held:
        return None
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None  # read a moment ago; gone since: nothing left to warn about
    readers = [who for who, bit in (("its group", 0o040), ("others", 0o004)) if mode & bit]
    if not readers:
        return None
    who = " and ".join(readers)
    return (
        f"the config file {str(path)!r} holds secrets ({', '.join(held)}) and {who} can read "
        f"it (mode {mode:04o}); run `chmod 600 {shlex.quote(str(path))}` so that only its "
        "owner can (or give those settings as TOOLREF_* variables, which win over the file)"
    )


def _secret(key: str, text: str) -> str | None:
    """Why the setting `key` given as `text` is a secret, or None."""
    if key in SECRETS:
        return SECRETS[key]
    if key in CREDENTIAL_URLS and redaction.urls_in(text) != text:
        return "credentials in a URL"
    return None


def apply(settings: list[Setting], environ: MutableMapping[str, str]) -> list[Setting]:
    """Each setting of the file set in `environ` unless a variable of its name (any case)
    is there already: the environment wins. The settings the file gave that are in force."""
    present = {name.upper() for name in environ}
    applied = []
    for setting in settings:
        if setting.variable not in present:
            environ[setting.variable] = setting.text
            applied.append(setting)
    return applied


def _unknown_table(name: str, table: str, body: object) -> str:
    if not isinstance(body, dict):
        home = HOME.get(table)
        if home is not None:
            return f"{name}: `{table}` is a setting of [{home}]; put it under that table"
        return f"{name}: `{table}` is outside any table; settings go under [{'], ['.join(GROUPS)}]"
    guess = meant(table, GROUPS)
    hint = f"; did you mean [{guess}]?" if guess else "."
    return (
        f"{name}: no group of settings is named [{table}]{hint} The tables are "
        f"[{'], ['.join(GROUPS)}]."
    )


def _text(where: str, key: str, value: object) -> str:
    """A TOML value as the environment variable's text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    if isinstance(value, dict) and key in JSONS:
        return json.dumps(value)
    if isinstance(value, dict) and key in LISTS:
        entries = []
        for name, given in value.items():
            for one in given if isinstance(given, list) else [given]:
                if not isinstance(one, str):
                    shown = "(a secret: not shown)" if key in SECRETS else repr(one)
                    raise ConfigurationError(f"{where}.{name}: give a string, not {shown}")
                entries.append(f"{name}={one}")
        return ",".join(entries)
    shape = "a string or a table of strings" if key in LISTS else "a string, number or boolean"
    raise ConfigurationError(f"{where}: give {shape}, not a TOML {type(value).__name__}")
