"""toolref installed as a user would without the `server` extra: a wheel built from this
checkout, in a fresh venv of its own (no system site-packages). `toolref-server` must say
what is missing and how to install it, not fail with a traceback."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.processes import ROOT, clean_env
from toolref_server.cli import SERVER_MODULES

from ..conftest import ON_CLUSTER, need

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(ON_CLUSTER, reason="installs a wheel; the engine plays no part"),
]

# What the wheel is built from: the packages and the files pyproject.toml names.
SOURCES = ("pyproject.toml", "README.md", "client_sdk", "service")


def server_extra() -> list[str]:
    """The distribution names of pyproject.toml's `server` extra."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    return [re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0] for spec in extras["server"]]


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def test_the_checked_modules_are_the_server_extra() -> None:
    assert sorted(normalized(n) for n in server_extra()) == sorted(SERVER_MODULES)


def run(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, check=False, env=clean_env()
    )


@dataclass(frozen=True)
class Installed:
    bin: Path  # the venv's bin folder
    wheel: Path  # the wheel toolref was installed from


@pytest.fixture(scope="module")
def base_install(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """A venv holding toolref from a freshly built wheel, without extras."""
    root = tmp_path_factory.mktemp("install")
    source = root / "source"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(
                ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(ROOT / name, source / name)
    built = run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(root), str(source)]
    )
    if built.returncode != 0:
        need(f"could not build a wheel of toolref (pip wheel): {built.stderr[-2000:]}")
    [wheel] = root.glob("toolref-*.whl")
    try:
        venv.create(root / "venv", with_pip=True, system_site_packages=False)
    except Exception as exc:
        need(f"could not create a venv with pip: {exc}")
    bin_dir = root / "venv" / "bin"
    installed = run([str(bin_dir / "python"), "-m", "pip", "install", "-q", str(wheel)])
    if installed.returncode != 0:
        need(f"could not install the wheel and its dependencies: {installed.stderr[-2000:]}")
    return Installed(bin_dir, wheel)


def test_toolref_server_without_the_server_extra_says_how_to_install_it(
    base_install: Installed,
) -> None:
    python = str(base_install.bin / "python")
    # The venv really lacks the extra (and holds the SDK, which needs none of it).
    probe = run(
        [python, "-c", "import toolref, importlib.util as u; print(u.find_spec('starlette'))"]
    )
    assert probe.stdout.strip() == "None", probe.stderr

    for args in ([], ["serve"], ["keygen", "acme"]):
        result = run([str(base_install.bin / "toolref-server"), *args])
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr, result.stderr
        assert result.stdout == ""
        message = result.stderr.strip()
        assert "\n" not in message, message  # one paragraph
        assert message.startswith("toolref-server: no module named "), message
        named = re.findall(r"'(\w+)'", message.split(":", 2)[1])
        assert sorted(named) == sorted(SERVER_MODULES), message
        assert "pip install -e '.[server]'" in message

    # The exact command it names installs from the wheel this venv got toolref from, with
    # the extra: what pip would install for it is the server extra, nothing missing.
    command = re.search(r"Install it with `([^`]+)`", message)
    assert command is not None, message
    words = shlex.split(command[1])
    assert words[:4] == [python, "-m", "pip", "install"], words
    assert words[4:] == [f"{base_install.wheel}[server]"], words
    report = base_install.wheel.parent / "report.json"
    dry = run([*words[:4], "--dry-run", "-q", "--report", str(report), *words[4:]])
    assert dry.returncode == 0, dry.stderr
    planned = {normalized(i["metadata"]["name"]) for i in json.loads(report.read_text())["install"]}
    assert {normalized(n) for n in server_extra()} <= planned, planned


def test_the_wheel_ships_the_zstd_dictionaries(base_install: Installed) -> None:
    """Records and history messages written with a shipped dictionary need it to be read:
    the wheel carries every one, and each loads from the installed package."""
    from toolref.wire import dictionaries

    with zipfile.ZipFile(base_install.wheel) as wheel:
        names = set(wheel.namelist())
    for shipped in dictionaries.SHIPPED:
        assert f"toolref/wire/dictionaries/{shipped.file}" in names, sorted(names)
    check = (
        "from toolref.wire import dictionaries as d; "
        "print(sorted(d.by_id(s.dict_id).dict_id() for s in d.SHIPPED))"
    )
    loaded = run([str(base_install.bin / "python"), "-c", check])
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == str(sorted(s.dict_id for s in dictionaries.SHIPPED))


def test_the_wheel_ships_the_savings_page(base_install: Installed) -> None:
    """The page `GET /savings` serves is package data (issue 32): no build step, no file
    outside the package."""
    with zipfile.ZipFile(base_install.wheel) as wheel:
        page = wheel.read("toolref_server/routes/savings.html").decode()
        script = wheel.read("toolref_server/routes/savings.js").decode()
        charts = wheel.read("toolref_server/routes/savings_charts.js").decode()
    assert "<script>/* savings_charts.js, savings.js */</script>" in page  # joined at import
    assert '"/v1/savings"' in script
    assert "function minutesCharts(" in charts
