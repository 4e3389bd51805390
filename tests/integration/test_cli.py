"""`toolref-server` as a user runs it: a real process, the embedded engine, Ctrl-C, restart."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.processes import Process, Service, clean_env
from toolref.wire.canonical import digest_of
from toolref_server.embedded import free_port, valkey_server_binary

from ..conftest import ON_CLUSTER, need

# `serve` on its own embedded engine: data folder, Ctrl-C, restart. The single-node pass
# runs these; the cluster pass has no embedded engine to test.
pytestmark = pytest.mark.skipif(ON_CLUSTER, reason="tests the embedded engine's lifecycle")

INVOCATION = {"name": "read_file", "args": {"path": "README.md"}, "result": "# toolref\n" * 50}


@pytest.fixture(autouse=True)
def engine_binary() -> None:
    try:
        valkey_server_binary()
    except Exception as exc:
        need(f"no valkey-server binary: {exc}")


def cli_env() -> dict[str, str]:
    return clean_env()


def run_cli(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `toolref-server ARGS` to completion."""
    return subprocess.run(
        [sys.executable, "-m", "toolref_server.cli", *args],
        env=env or cli_env(),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); check it is not one.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.mark.slow
def test_serve_answers_and_refs_survive_ctrl_c_and_restart(data_dir: Path) -> None:
    port = free_port()
    service = Service(data_dir, port)
    headers = {"Toolref-Protocol": "2"}
    capabilities = httpx.get(service.url + "/v1/capabilities").json()
    assert capabilities["protocol"] == {"low": 1, "high": 2}
    registered = httpx.post(
        service.url + "/v1/invocations", json={"invocations": [INVOCATION]}, headers=headers
    ).json()
    ref = registered["refs"][0]["ref"]
    assert ref == digest_of(INVOCATION).ref
    engine_pid = service.engine_pid
    assert alive(engine_pid)

    assert service.interrupt() == 0
    output = service.output()
    assert "embedded valkey stopped" in output, output
    assert "Traceback" not in output, output
    assert not alive(engine_pid)

    again = Service(data_dir, port)
    try:
        resolved = httpx.post(
            again.url + "/v1/invocations:resolve", json={"refs": [ref]}, headers=headers
        ).json()
        assert resolved == {"invocations": {ref: {**INVOCATION, "isError": False}}, "missing": []}
    finally:
        assert again.interrupt() == 0


@pytest.mark.slow
def test_a_data_folder_serves_one_process_at_a_time(data_dir: Path) -> None:
    first = Service(data_dir, free_port())
    try:
        second = run_cli("serve", "--port", str(free_port()), "--data-dir", str(data_dir))
        assert second.returncode == 2
        assert "in use" in second.stderr
        assert "TOOLREF_DATA_DIR" in second.stderr
    finally:
        first.interrupt()


def test_refuses_a_public_bind_without_keys(data_dir: Path) -> None:
    result = run_cli("serve", "--host", "0.0.0.0", "--data-dir", str(data_dir))
    assert result.returncode == 2
    assert "TOOLREF_API_KEYS" in result.stderr
    assert not data_dir.exists()  # refused before starting anything


def test_bad_setting_is_named(data_dir: Path) -> None:
    env = {**cli_env(), "TOOLREF_TTL_SECONDS": "soon"}
    result = run_cli("serve", "--data-dir", str(data_dir), env=env)
    assert result.returncode == 2
    assert "TOOLREF_TTL_SECONDS" in result.stderr


def test_an_engine_binary_that_cannot_run_is_one_message(data_dir: Path) -> None:
    """The engine's binary missing (TOOLREF_VALKEY_SERVER, or a broken install): one line
    naming it and the fixes, exit 2 (a FileNotFoundError traceback before the fix), and
    the data folder's lock released for the next start."""
    env = {**cli_env(), "TOOLREF_VALKEY_SERVER": str(data_dir.parent / "no-such-valkey")}
    result = run_cli("serve", "--port", str(free_port()), "--data-dir", str(data_dir), env=env)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "cannot run the embedded engine" in result.stderr
    assert "TOOLREF_REDIS_URL" in result.stderr
    again = run_cli("serve", "--port", str(free_port()), "--data-dir", str(data_dir), env=env)
    assert "in use" not in again.stderr, again.stderr


def test_a_misspelt_variable_is_refused_with_the_name_meant(data_dir: Path) -> None:
    """Issue 31: `TOOLREF_UPSTREAM=` was ignored, the gateway left with no upstream. Now the
    service refuses to start, before anything starts, naming the setting meant (it started
    and ignored the variable before the fix)."""
    env = {**cli_env(), "TOOLREF_UPSTREAM": "anthropic=https://api.anthropic.com"}
    env["TOOLREF_KEY"] = "a relay's key, in the same shell"  # known: not refused
    result = run_cli("serve", "--data-dir", str(data_dir), env=env)
    assert result.returncode == 2
    assert "unknown variable TOOLREF_UPSTREAM; did you mean TOOLREF_UPSTREAMS?" in result.stderr
    assert "TOOLREF_KEY" not in result.stderr
    assert not data_dir.exists()  # refused before starting anything


def test_a_config_file_serves_its_settings_and_the_environment_wins(
    data_dir: Path, tmp_path: Path
) -> None:
    """Issue 32: `serve --config toolref.toml` (there was no such flag). The file's settings
    reach every worker (two, from the file; the metrics key, from the file, keys /metrics),
    and a variable of the environment wins over the file's (the TTL)."""
    config = tmp_path / "toolref.toml"
    scraper = "scraper-key"
    config.write_text(
        "[serving]\nworkers = 2\n"
        f'[access]\nmetrics_key = "{hashlib.sha256(scraper.encode()).hexdigest()}"\n'
        "[records]\nttl_seconds = 60\n"
    )
    port = free_port()
    args = [sys.executable, "-m", "toolref_server.cli", "serve", "--port", str(port)]
    args += ["--data-dir", str(data_dir), "--config", str(config)]
    env = clean_env(TOOLREF_TTL_SECONDS="3600")
    service = Process(args, f"http://127.0.0.1:{port}", "/readyz", env)
    try:
        capabilities = httpx.get(service.url + "/v1/capabilities").json()
        assert capabilities["ttlSeconds"] == 3600  # the environment's, not the file's 60
        for _ in range(6):  # whichever worker answers
            assert httpx.get(service.url + "/metrics").status_code == 401
            keyed = httpx.get(
                service.url + "/metrics", headers={"Authorization": f"Bearer {scraper}"}
            )
            assert keyed.status_code == 200
        children = Path(f"/proc/{service.process.pid}/task/{service.process.pid}/children")
        spawned = [
            pid
            for pid in children.read_text().split()
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        assert len(spawned) == 2
    finally:
        service.stop()


def test_a_config_file_key_that_is_no_setting_is_refused(data_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "toolref.toml"
    config.write_text('[gateway]\nupstream = "anthropic=https://api.anthropic.com"\n')
    result = run_cli("serve", "--data-dir", str(data_dir), "--config", str(config))
    assert result.returncode == 2
    assert (
        f"{config} [gateway] upstream: no setting is named `upstream`; did you mean "
        "`upstreams` (under [gateway])?"
    ) in result.stderr
    config.write_text("[bodies]\nmax_depth = 1\n")  # a bad value: named where the file has it
    result = run_cli("serve", "--data-dir", str(data_dir), "--config", str(config))
    assert result.returncode == 2
    assert f"toolref-server: {config} [bodies] max_depth: Input should be greater" in result.stderr
    assert not data_dir.exists()  # refused before starting anything


def test_hash_key_and_keygen() -> None:
    hashed = run_cli("hash-key", stdin="my-key\n")
    assert hashed.returncode == 0
    assert hashed.stdout.strip() == hashlib.sha256(b"my-key").hexdigest()
    made = run_cli("keygen", "acme")
    lines = dict(line.split(":", 1) for line in made.stdout.strip().splitlines())
    key = lines["key"].strip()
    assert lines["TOOLREF_API_KEYS"].strip() == f"acme={hashlib.sha256(key.encode()).hexdigest()}"
    bad = run_cli("keygen", "no spaces")
    assert bad.returncode == 2


@pytest.mark.slow
def test_a_killed_service_takes_its_engine_along_and_loses_no_ref(data_dir: Path) -> None:
    service = Service(data_dir, free_port())
    headers = {"Toolref-Protocol": "2"}
    registered = httpx.post(
        service.url + "/v1/invocations", json={"invocations": [INVOCATION]}, headers=headers
    ).json()
    ref = registered["refs"][0]["ref"]
    engine_pid = service.engine_pid
    time.sleep(1.5)  # the append-only file is fsynced every second
    os.killpg(service.process.pid, signal.SIGKILL)  # no chance to clean up
    service.process.wait(10)
    deadline = time.monotonic() + 10
    while alive(engine_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(engine_pid)
    again = Service(data_dir, free_port())
    try:
        found = httpx.post(
            again.url + "/v1/invocations:findMissing", json={"refs": [ref]}, headers=headers
        ).json()
        assert found == {"missing": []}
    finally:
        again.interrupt()


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_end_with_a_killed_supervisor_and_the_port_serves_again(data_dir: Path) -> None:
    """Only the supervisor of two workers killed (SIGKILL: it stops no one): its workers
    end too (before the fix they went on as orphans, holding the port, answering 503), so
    a restart on the same port and data folder serves."""
    port = free_port()
    service = Service(data_dir, port, TOOLREF_WORKERS="2")
    group = service.process.pid  # the workers' process group too
    try:
        children = Path(f"/proc/{service.process.pid}/task/{service.process.pid}/children")
        workers = [
            int(pid)
            for pid in children.read_text().split()
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        assert len(workers) == 2
        service.process.kill()
        service.process.wait(10)
        deadline = time.monotonic() + 30
        while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(pid) for pid in workers)
        service.restart()
        assert httpx.get(service.url + "/readyz").status_code == 200
    finally:
        service.stop()
        for each in (group, service.process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(each, signal.SIGKILL)
