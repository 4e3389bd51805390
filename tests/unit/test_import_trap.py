"""A folder named `toolref` beside a user's script (a clone of this repository, say) does not
shadow the installed SDK.

Python puts the script's folder first on `sys.path`; a folder there without `__init__.py` is a
namespace portion, which setuptools' editable finder (appended after the path finder) lets win:
`from toolref import ToolReferenceManager` then failed with "cannot import name ... (unknown
location)". The Makefile's installs also put the source folders on `sys.path` (a .pth file), so
the path finder finds the regular package first. This test failed before that .pth existed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import toolref


def test_a_folder_named_toolref_beside_a_script_does_not_shadow_the_sdk(tmp_path: Path) -> None:
    clone = tmp_path / "toolref"
    (clone / "client_sdk").mkdir(parents=True)
    (clone / "README.md").write_text("a clone of the repository\n")
    script = tmp_path / "app.py"
    script.write_text(
        "import toolref\n"
        "from toolref import ToolReferenceManager\n"
        "print(toolref.__file__)\n"
        "print(ToolReferenceManager.__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    found, name = done.stdout.split()
    assert Path(found) == Path(toolref.__file__)
    assert name == "ToolReferenceManager"
