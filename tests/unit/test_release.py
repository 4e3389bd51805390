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
VERSION = toolref.__version__


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


# A version of toolref as docs and deploy files spell it: `toolref 0.2.0` (the relay's and
# doctor's lines), `toolref:0.2.0` (an image tag), `toolref-0.2.0-py3-none-any.whl`,
# `toolref==0.2.0`, `@toolref/client@0.2.0`, `toolref-server v0.2.0`; a PEP 440 pre- or
# post-release suffix (0.3.0rc1) belongs to the version.
TOOLREF_VERSION = re.compile(
    r"(?i)\btoolref(?:-server|/client)?(?:==|[ :@=-])v?"
    r"(\d+\.\d+\.\d+(?:(?:a|b|rc|\.dev|\.post)\d+)?)\b"
)
# Where the tags and sample lines live; each must keep at least one mention (the check
# below would otherwise pass on a file whose mentions were reworded out of its reach).
MENTIONED_IN = {
    "deploy/Dockerfile",
    "deploy/compose.yaml",
    "deploy/k8s/deployment.yaml",
    "docs/operations.md",
    "docs/relay.md",
}


def version_mentions() -> list[tuple[str, int, str]]:
    """(file, line, version) of every toolref version named in docs/ and deploy/."""
    found = []
    for folder in ("docs", "deploy"):
        for path in sorted((ROOT / folder).rglob("*")):
            if not path.is_file():
                continue
            try:
                text = path.read_text("utf-8")
            except UnicodeDecodeError:
                continue  # a chart (PNG): no text to go stale
            name = path.relative_to(ROOT).as_posix()
            for number, line in enumerate(text.splitlines(), 1):
                found += [(name, number, m[1]) for m in TOOLREF_VERSION.finditer(line)]
    return found


def test_the_version_pattern_finds_each_spelling() -> None:
    """Control for the test below: each way a doc names a version is found, and a version
    of something else beside the name is not."""
    for text in (
        "toolref relay: gateway http://x is toolref 0.1.0, key accepted",
        "docker build -f deploy/Dockerfile -t toolref:0.1.0 .",
        "pip install dist/toolref-0.1.0-py3-none-any.whl",
        "pip install toolref==0.1.0",
        "npm install @toolref/client@0.1.0",
        "toolref-server v0.1.0 started",
    ):
        assert [m[1] for m in TOOLREF_VERSION.finditer(text)] == ["0.1.0"], text
    for text in ('version = "0.1.0"', "toolref relay needs node 22.23.3", "toolref_0.1.0"):
        assert TOOLREF_VERSION.search(text) is None, text


def test_every_version_in_docs_and_deploy_is_this_release() -> None:
    """Image tags and sample output name the version pyproject.toml builds (its version is
    `toolref.__version__`, test_pyproject_takes_its_version_from_the_sdk): a release that
    forgets one fails here, naming the file and line."""
    mentions = version_mentions()
    stale = [f"{name}:{line}: {found}" for name, line, found in mentions if found != VERSION]
    assert not stale, f"toolref is {VERSION}, but these name another version:\n" + "\n".join(stale)
    assert {name for name, _, _ in mentions} >= MENTIONED_IN
