"""The packages' exports load at their first use (PEP 562): importing one module of the SDK
costs that module, not every other (the relay imports `toolref.wire.headers` and must not
pay for the ACP tracker, the middleware or the streaming adapters), and every exported name
still resolves to what it names."""

from __future__ import annotations

import subprocess
import sys

import pytest

import toolref
import toolref_relay


def test_importing_one_module_imports_no_other_export() -> None:
    code = (
        "import sys, toolref.wire.headers, toolref_relay.config; "
        "print(sorted(m for m in sys.modules if m.startswith(('toolref.acp', "
        "'toolref.receiving', 'toolref.streaming', 'toolref_relay.app'))))"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert found.strip() == "[]", found


@pytest.mark.parametrize("package", [toolref, toolref_relay])
def test_every_exported_name_resolves(package: object) -> None:
    for name in package.__all__:  # type: ignore[attr-defined]
        assert getattr(package, name) is not None, name
    assert "ToolRefMiddleware" in dir(toolref)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = toolref.nothing_here  # type: ignore[attr-defined]  # (what mypy says too)


def test_the_relay_command_imports_its_app_only_once_it_listens() -> None:
    """`toolref relay --help` and a busy port answer before the relay's app, the gateway check
    or httpx are imported (`toolref_relay.cli` imports them after binding)."""
    code = (
        "import sys, toolref_relay.cli; "
        "print(sorted(m for m in sys.modules if m in ('toolref_relay.app', "
        "'toolref_relay.preflight', 'toolref_relay.control', 'httpx', 'pydantic')))"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert found.strip() == "[]", found
