"""The README says what the code does: every setting with its default, every problem type."""

from __future__ import annotations

import re
from pathlib import Path

from toolref import errors
from toolref_server.settings import Settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_readme_opens_with_the_two_commands() -> None:
    first_block = README.split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in first_block.strip().splitlines()]
    assert commands == ["make serve", "make test"]


def test_every_setting_is_documented_with_its_default() -> None:
    rows = dict(re.findall(r"^\| `(TOOLREF_[A-Z_]+)` \| ([^|]+) \|", README, re.MULTILINE))
    fields = Settings.model_fields
    assert set(rows) == {f"TOOLREF_{name.upper()}" for name in fields}
    for name, field in fields.items():
        shown = rows[f"TOOLREF_{name.upper()}"].strip()
        if field.default in (None, ""):
            assert shown in ("unset", "empty"), name
        else:
            assert shown == f"`{field.default}`", name


def test_every_problem_type_is_documented() -> None:
    for name in dir(errors):
        cls = getattr(errors, name)
        if (
            isinstance(cls, type)
            and issubclass(cls, errors.ToolrefError)
            and cls.status < 500
            and cls.slug not in ("bad-request", "limit-exceeded", "conflict")  # abstract bases
        ):
            assert f"`{cls.slug}`" in README, cls.slug
