"""The examples, run as a user would: registry, chat backend and client as real processes."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.processes import ROOT, Process, Service, clean_env
from toolref_server.embedded import free_port

from ..conftest import engine_env


@pytest.fixture
def registry(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Service]:
    service = Service(tmp_path / "data", free_port(), **engine_env(request))
    yield service
    service.stop()


@pytest.fixture
def backend(registry: Service) -> Iterator[Process]:
    port = free_port()
    process = Process(
        [
            sys.executable,
            "examples/chat_backend.py",
            "--registry",
            registry.url,
            "--port",
            str(port),
        ],
        f"http://127.0.0.1:{port}",
        "/seen",
        clean_env(),
    )
    yield process
    process.stop()


def claimed_saving() -> int:
    """The saving docs/api.md promises for the examples ("at least Nx fewer bytes")."""
    text = " ".join((ROOT / "docs" / "api.md").read_text().split())
    found = re.search(r"examples/chat_client\.py`: .*? at least (\d+)x fewer bytes", text)
    assert found is not None, "docs/api.md no longer states the examples' saving"
    return int(found[1])


@dataclass
class Thirty:
    """examples/chat_client.py's 30 turns: the bytes it uploaded without toolref and with,
    what it printed, and what the backend saw."""

    without: int
    with_toolref: int
    printed: str
    seen: list[str]


@pytest.fixture
def thirty_turns(backend: Process) -> Thirty:
    result = subprocess.run(
        [sys.executable, "examples/chat_client.py", "--backend", backend.url, "--turns", "30"],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    without = int(re.search(r"without refs: ([\d,]+)", result.stdout)[1].replace(",", ""))  # type: ignore[index]
    with_refs = int(re.search(r"with refs: +([\d,]+)", result.stdout)[1].replace(",", ""))  # type: ignore[index]
    seen = httpx.get(backend.url + "/seen").json()["seen"]
    return Thirty(without, with_refs, result.stdout, seen)


@pytest.mark.slow
def test_thirty_turns_upload_fewer_bytes_and_the_backend_sees_the_same(
    thirty_turns: Thirty,
) -> None:
    run = thirty_turns
    assert run.without > 10 * run.with_toolref, run.printed
    assert f"{run.without / run.with_toolref:.1f}x" in run.printed
    assert len(run.seen) == 60
    assert run.seen[:30] == run.seen[30:]  # the same conversation, turn by turn, both ways
    assert len(set(run.seen)) == 30


@pytest.mark.slow
def test_thirty_turns_upload_what_the_readme_says(thirty_turns: Thirty) -> None:
    run = thirty_turns
    # 46x (size-guarded edits) when the documented bound was set: it moves a little with the
    # files read.
    claimed = claimed_saving()
    assert run.without >= claimed * run.with_toolref, (
        f"measured {run.without / run.with_toolref:.1f}x, docs/api.md says at least "
        f"{claimed}x: find why the saving fell, or state what is measured in docs/api.md\n"
        f"{run.printed}"
    )


@pytest.fixture
def llm_backend(registry: Service) -> Iterator[Process]:
    port = free_port()
    args = ["examples/llm_backend.py", "--registry", registry.url, "--port", str(port)]
    process = Process([sys.executable, *args], f"http://127.0.0.1:{port}", "/received", clean_env())
    yield process
    process.stop()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("example", "clients"),
    [
        ("openai_client.py", ["openai.OpenAI", "openai.AsyncOpenAI"]),
        ("anthropic_client.py", ["anthropic.Anthropic", "anthropic.AsyncAnthropic"]),
    ],
)
def test_the_official_sdks_stream_with_refs_through_the_transport(
    llm_backend: Process, example: str, clients: list[str]
) -> None:
    result = subprocess.run(
        [sys.executable, f"examples/{example}", "--backend", llm_backend.url],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == clients
    for line in lines:  # four tasks, each a tool call and an answer: eight requests
        found = re.search(
            r"in (\d+) requests; .* \(([\d.]+)x fewer\); (\d+) requests continued as edits", line
        )
        assert found is not None, line
        requests, ratio, edits = int(found[1]), float(found[2]), int(found[3])
        assert (requests, edits) == (8, 7), line
        assert ratio > 3, line
    received = httpx.get(llm_backend.url + "/received").json()["received"]
    assert len(received) == 16  # the middleware gave the app every request whole
