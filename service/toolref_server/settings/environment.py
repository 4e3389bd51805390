"""The `TOOLREF_*` variables this process may be given, and the check that refuses any other:
a misspelt setting (`TOOLREF_UPSTREAM=` for `TOOLREF_UPSTREAMS`) read by nobody would leave
its setting at its default without a word.

Known: every setting's variable (`TOOLREF_` + a field of `Settings`), the variables other
parts of toolref read that a shell may hold next to the service's (`ELSEWHERE`), and those
of the test suite (`ELSEWHERE_PREFIXES`). Pure: the caller hands over the environment, and
the same check serves any other source of `TOOLREF_*` names (a config file's keys).

`invalid_lines` says what is wrong with values that were refused (pydantic's errors): the
variable (or the file's place), the fact, the value given (never a secret's) and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from toolref.kit.option_checks import nearest
from toolref.wire import redaction
from toolref.wire.errors import ConfigurationError

PREFIX: Final = "TOOLREF_"

# Read by other parts of toolref, which a shell may set next to the service's settings.
ELSEWHERE: Final = {
    "TOOLREF_KEY": "the tenant's key `toolref relay`, `toolref doctor` and the examples send",
    "TOOLREF_URL": "the registry URL of the examples (examples/*.py)",
    "TOOLREF_VALKEY_SERVER": "the valkey-server binary of the embedded engine",
}
# Prefixes of the test suite's and benchmarks' own variables (TOOLREF_TEST_REDIS_URL, ...).
ELSEWHERE_PREFIXES: Final = ("TOOLREF_TEST_", "TOOLREF_E2E_", "TOOLREF_FUZZ_", "TOOLREF_JS_")


def meant(name: str, known: Iterable[str]) -> str | None:
    """Which of `known` `name` most likely misspells, compared in capitals (as settings are
    read: `TOOLREF_UPSTREAM` or a config file's `upstream` both mean `upstreams`), or None.
    The one nearest-name rule of the variables' check and the config file's keys."""
    by_upper = {name.upper(): name for name in known}
    found = nearest(name.upper(), by_upper)
    return by_upper[found] if found is not None else None


def unknown_variables(names: Iterable[str], settings: Iterable[str]) -> list[str]:
    """One line per name in `names` that starts with `TOOLREF_` (any case, as the settings
    are read) and is neither a setting's variable (`settings`) nor known elsewhere: the name,
    and the nearest known one when there is one. Linear in the names (each compared with
    the ~70 known names once)."""
    known = {name.upper() for name in settings} | set(ELSEWHERE)
    suffixes = {name[len(PREFIX) :]: name for name in known}
    lines = []
    for name in sorted(names):
        upper = name.upper()
        if not upper.startswith(PREFIX) or upper in known:
            continue
        if upper.startswith(ELSEWHERE_PREFIXES):
            continue
        found = meant(upper[len(PREFIX) :], suffixes)
        hint = f"; did you mean {suffixes[found]}?" if found is not None else ""
        lines.append(f"unknown variable {name}{hint}")
    return lines


def check_variables(environ: Mapping[str, str], settings: Iterable[str]) -> None:
    """`ConfigurationError` naming every unknown `TOOLREF_*` variable of `environ`."""
    lines = unknown_variables(environ, settings)
    if lines:
        said = " ".join(line if line.endswith("?") else f"{line}." for line in lines)
        raise ConfigurationError(
            f"{said} toolref reads no such variable, so a misspelt setting would stay at its "
            "default: fix or unset it (docs/operations.md lists every setting)"
        )


_SHOWN_CHARS: Final = 80  # of a refused value, quoted back
_PYDANTIC_PREFIX: Final = re.compile(r"^(Value|Assertion) error, ")
_BEFORE_HOST: Final = re.compile(r"^[^@]*@")  # a URL without its scheme: userinfo, perhaps


_BOUND_ERRORS: Final = frozenset(
    {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}
)


def invalid_lines(
    errors: Iterable[Mapping[str, Any]],
    defaults: Mapping[str, object],
    secrets: Iterable[str],
    from_file: Mapping[str, str] | None = None,
    *,
    flags: Mapping[str, str] | None = None,
    ranges: Mapping[str, str] | None = None,
) -> list[str]:
    """One line per refused value (pydantic's `errors(include_url=False)`): where it was
    given (its command-line flag: `flags`, variable -> flag; else its place in the config
    file: `from_file`; else its variable), what is wrong (a bound missed: the setting's
    range too, from `ranges`, field -> "0-65535"), the value given (a setting of `secrets`
    never shown; a URL's credentials masked) and the fix, its default when it has one. A
    check across settings (its `loc` empty) already names the settings and the fix: its
    message alone."""
    hidden, lines = set(secrets), []
    for error in errors:
        message = _PYDANTIC_PREFIX.sub("", str(error["msg"]))
        if not error["loc"]:
            lines.append(message)
            continue
        field = str(error["loc"][0])
        variable = PREFIX + field.upper()
        flag = (flags or {}).get(variable)
        where = (from_file or {}).get(variable)
        given = "(a secret: not shown)" if field in hidden else _shown(error.get("input"))
        if flag is not None:
            where, undo = flag, f"leave out {flag}"
        else:
            undo = "remove it from the file" if where else f"unset {variable}"
        span = (ranges or {}).get(field)
        if span is not None and error.get("type") in _BOUND_ERRORS:
            message = f"{message} ({span})"
        default = defaults.get(field)
        then = f" for its default ({default})" if default not in (None, "") else ""
        lines.append(f"{where or variable}: {message}; given {given}: fix it, or {undo}{then}")
    return lines


def _shown(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    if "://" in text:
        text = redaction.urls_in(text)
    elif "@" in text:
        text = _BEFORE_HOST.sub(redaction.MASK + "@", text)
    if len(text) > _SHOWN_CHARS:
        text = text[: _SHOWN_CHARS - 3] + "..."
    return repr(text)
