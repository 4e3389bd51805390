"""The release is tag-ready: one version across the Python and npm packages, a changelog
section for it, and the license both packages name."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import toolref

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "client_sdk" / "js"


def test_pyproject_takes_its_version_from_the_sdk() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "toolref.__version__"}


def test_the_npm_package_has_the_sdks_version() -> None:
    package = json.loads((JS / "package.json").read_text())
    lock = json.loads((JS / "package-lock.json").read_text())
    assert package["version"] == toolref.__version__
    assert lock["version"] == toolref.__version__
    assert lock["packages"][""]["version"] == toolref.__version__


def test_the_changelog_opens_with_this_version() -> None:
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert headings[0] == toolref.__version__


def test_both_packages_carry_the_license_they_name() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package = json.loads((JS / "package.json").read_text())
    text = (ROOT / "LICENSE").read_text()
    assert project["project"]["license"] == "MIT"  # an SPDX expression (PEP 639)
    assert project["project"]["license-files"] == ["LICENSE"]
    assert package["license"] == "MIT"
    assert text.startswith("MIT License")
    assert (JS / "LICENSE").read_text() == text
