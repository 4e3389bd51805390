"""The benches' "this tree" (`loadtests.systems.AFTER`) runs the tree the benches are in,
not whatever toolref the interpreter has installed: a clone benched with another checkout's
virtualenv (an editable install of that checkout) would otherwise time that checkout's files
under the clone's name, its uncommitted edits included."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from loadtests.systems import AFTER, ROOT, Code


def test_this_tree_is_first_on_the_path_whatever_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/elsewhere/client_sdk")
    path = AFTER.env()["PYTHONPATH"].split(os.pathsep)
    assert path == [str(ROOT / "client_sdk"), str(ROOT / "service")]


def test_this_tree_imports_its_own_files() -> None:
    found = AFTER.check().split(", ")
    assert len(found) == 2
    assert all(Path(f).is_relative_to(ROOT) for f in found), found


def test_a_code_importing_another_trees_files_is_refused(tmp_path: Path) -> None:
    # this tree's files on the path (no PYTHONPATH of its own), said to be `tmp_path`'s
    elsewhere = Code("elsewhere", "", tmp_path, AFTER.relay_module, AFTER.gateway_module)
    with pytest.raises(RuntimeError, match="not the tree at"):
        elsewhere.check()
