"""The soak's traffic against its real processes, for a few seconds: every kind of request
reaches its path and is answered, bodies go in every encoding, nothing fails but the
deliberate disconnects, edits that would amplify are refused as they must be, no process
logs an error, and every process is sampled. (Whether memory stays flat takes minutes:
`make soak`, and CI's 2 minutes.)"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from loadtests import soak
from loadtests.soak_memory import Limit
from loadtests.soak_traffic import CUT_REQUEST, CUT_STREAM, EDIT_ATTACK, EDIT_ATTACKS

from toolref_server.embedded import valkey_server_binary

from ..conftest import ON_CLUSTER, need

pytestmark = [
    pytest.mark.skipif(ON_CLUSTER, reason="the soak's service runs its own embedded engine"),
    pytest.mark.slow,
]


@pytest.fixture(autouse=True)
def binaries() -> None:
    try:
        valkey_server_binary()
    except Exception as exc:
        need(f"no valkey-server binary: {exc}")
    if not Path(sys.executable).with_name("toolref").exists() and not shutil.which("toolref"):
        need("no `toolref` command in this venv (pip install -e .): the soak runs the relay")


def test_a_short_soak_sends_every_kind_of_request_and_none_fails() -> None:
    options = soak.Options(12, 4, 10, Limit(soak.LIMIT_MIB, soak.FLOOR_MIB), turns=4, every=0.5)
    result = soak.soak(options)
    assert dict(result.tally.errors) == {}
    assert result.logged == {name: [] for name in ("service", "relay", "backend", "provider")}
    rest = {f"rest {k}" for k in ("register", "findMissing", "resolve", "summary", "optimize")}
    answered = {"gateway", "gateway stream", "middleware", "middleware stream", "rest hydrate"}
    answered |= {"gateway responses stream", "gateway gemini stream"}  # answers written back
    cut = {f"{CUT_REQUEST} ({w})" for w in ("rest", "gateway", "middleware")}
    cut |= {f"{CUT_STREAM} ({w})" for w in ("gateway", "middleware")}
    attacks = {f"{EDIT_ATTACK} ({kind})" for kind in EDIT_ATTACKS}
    assert set(result.tally.requests) - attacks == rest | answered | cut
    assert {f"{EDIT_ATTACK} ({kind})" for kind in EDIT_ATTACKS[:2]} <= set(result.tally.requests)
    codings = {"identity", "zstd", "gzip"}
    assert set(result.tally.bodies) == {
        f"{c} ({kind})" for c in codings for kind in ("json", "msgpack", "agent")
    }
    labels = {label for sample in result.samples for label in sample.rss}
    assert labels == {"service", "service (valkey-server)", "relay", "backend", "provider"}
    assert [g.process for g in result.growths][:2] == ["service", "service (valkey-server)"]
