"""The contributor's make targets do what is due and nothing more: after `make test` built the
web pages (its first step), `make demo` installs and builds nothing again (it ran `npm ci`
for every AI SDK major and built every page again: a pattern rule's install stamp was
deleted as intermediate, and a page's `npm ci` made the SDK's dist/ newer than the pages)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.support.processes import ROOT

from ..conftest import need

pytestmark = pytest.mark.slow


def test_the_pages_once_built_are_not_installed_or_built_again() -> None:
    if shutil.which("make") is None or shutil.which("npm") is None:
        need("make and npm are needed to check the make targets")
    built = subprocess.run(
        ["make", "-q", "web-build"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if built.returncode == 2:
        pytest.fail(f"make -q web-build failed: {built.stderr}")
    if built.returncode == 1:  # not built here (a run outside `make test`): build them once
        subprocess.run(["make", "web-build"], cwd=ROOT, check=True, capture_output=True)
    planned = subprocess.run(
        ["make", "-n", "web-build"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "npm ci" not in planned, planned
    assert "npm run" not in planned, planned
    demo = subprocess.run(
        ["make", "-n", "demo"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "npm" not in demo, demo
