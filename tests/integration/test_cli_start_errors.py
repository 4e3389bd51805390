"""`toolref-server` started wrong: each mistake one message on stderr naming the setting (or
the path), the value and the fix, exit 2, no traceback, and nothing started (review:
starting it wrong). The command runs as a subprocess, as an operator runs it."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import clean_env
from toolref_server.embedded import free_port

KEYS = "acme=" + "0" * 64  # a tenant, so that a bind beyond loopback is not refused first


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `toolref-server ARGS` to completion (`env` added to a clean environment)."""
    return subprocess.run(
        [sys.executable, "-m", "toolref_server.cli", *args],
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def refused(result: subprocess.CompletedProcess[str], *said: str) -> None:
    """Exit 2, no traceback, one line on stderr, holding each of `said`."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for part in said:
        assert part in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("redis://localhost:99999", "Port out of range"),
        ("redis://:pw@cache:abc/0", "integer"),
        ("redis://[::1", "Invalid IPv6 URL"),
    ],
)
@pytest.mark.parametrize("command", ["serve", "export"])
def test_a_redis_url_that_does_not_parse_is_one_line_before_anything_starts(
    tmp_path: Path, url: str, why: str, command: str
) -> None:
    """Review: `serve --redis-url redis://localhost:99999` ended the start in a traceback
    (uvicorn's lifespan, exit 3), `redis://[::1` in one from the URL check itself (exit 1),
    `cache export` in one from redis-py (exit 1)."""
    data = tmp_path / "data"
    if command == "serve":
        args = ["serve", "--port", str(free_port()), "--data-dir", str(data)]
    else:
        args = ["cache", "export", str(tmp_path / "out.bin"), "--data-dir", str(data)]
    result = run_cli(*args, "--redis-url", url)
    # the flag gave it: named so (review, relay and start-up edges: TOOLREF_REDIS_URL before)
    refused(result, "--redis-url is ", why, "a port of 1-65535", "redis://localhost:6379/0")
    assert "TOOLREF_REDIS_URL is" not in result.stderr
    assert "leave out --redis-url" in result.stderr
    assert "pw" not in result.stderr  # the password is never shown
    assert not data.exists()
    assert not (tmp_path / "out.bin").exists()


@pytest.mark.parametrize("command", ["serve", "export"])
def test_a_data_folder_that_is_a_file_is_one_line(tmp_path: Path, command: str) -> None:
    """Review: `--data-dir` naming a file ended in a FileExistsError traceback (exit 1)."""
    data = tmp_path / "data"
    data.write_text("not a folder")
    if command == "serve":
        args = ["serve", "--port", str(free_port())]
    else:
        args = ["cache", "export", str(tmp_path / "out.bin")]
    result = run_cli(*args, "--data-dir", str(data))
    refused(result, f"data folder {str(data)!r} cannot be used", "TOOLREF_DATA_DIR")
    assert data.read_text() == "not a folder"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("import", "{tmp}/absent.bin"), "cannot read the export file '{tmp}/absent.bin'"),
        (("export", "{tmp}/absent/out.bin"), "cannot write the export file '{tmp}/absent/out.bin'"),
    ],
)
def test_an_export_file_that_cannot_be_opened_is_one_line(
    tmp_path: Path, args: tuple[str, str], said: str
) -> None:
    """Review: `cache import` of a missing file, or `cache export` into a missing folder,
    ended in a FileNotFoundError traceback (exit 1)."""
    action, path = args[0], args[1].format(tmp=tmp_path)
    result = run_cli("cache", action, path, "--redis-url", "redis://127.0.0.1:1")
    refused(result, said.format(tmp=tmp_path), "No such file or directory", "in a folder that")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_port_in_use_is_named_with_the_fix_before_the_engine_starts(
    tmp_path: Path, workers: str
) -> None:
    """Review: uvicorn said `[Errno 98] Address already in use` (with two workers, not even
    the address), exit 3, after the embedded engine had started; nothing said what to do."""
    data = tmp_path / "data"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cli(
            "serve", "--port", str(port), "--workers", workers, "--data-dir", str(data)
        )
    refused(result, f"cannot listen on 127.0.0.1:{port}", "--port or TOOLREF_PORT")
    assert not data.exists()  # refused before the engine started


def test_a_host_that_does_not_resolve_is_named_with_the_fix(tmp_path: Path) -> None:
    """Review: uvicorn said `[Errno -2] Name or service not known`, naming neither the host
    nor the setting, exit 3, after the engine had started."""
    data = tmp_path / "data"
    result = run_cli(
        "serve",
        "--host",
        "no-such-host.invalid",
        "--port",
        str(free_port()),
        "--data-dir",
        str(data),
        TOOLREF_API_KEYS=KEYS,
    )
    # the flag gave it: named so (review, relay and start-up edges: TOOLREF_HOST before)
    refused(result, "--host is 'no-such-host.invalid', which does not resolve")
    assert "TOOLREF_HOST is" not in result.stderr
    assert not data.exists()


def test_a_free_port_still_serves_after_the_check(tmp_path: Path) -> None:
    """The check binds and closes: the same port then serves (a correct start unchanged)."""
    from toolref_server.cli import check_listen

    port = free_port()
    for workers in (1, 2):
        check_listen("127.0.0.1", port, workers)
        check_listen("localhost", port, workers)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()


@pytest.mark.parametrize(
    ("args", "env", "said", "unsaid"),
    [
        (
            ("--port", "99999"),
            {},
            ("--port: ", "(0-65535)", "given '99999'", "leave out --port for its default (8750)"),
            "TOOLREF_PORT",
        ),
        (("--port", "-1"), {}, ("--port: ", "(0-65535)", "given '-1'"), "TOOLREF_PORT"),
        (
            (),
            {"TOOLREF_PORT": "99999"},
            ("TOOLREF_PORT: ", "(0-65535)", "unset TOOLREF_PORT for its default (8750)"),
            "--port",
        ),
        (
            ("--workers", "0"),
            {},
            ("--workers: ", "given '0'", "leave out --workers for its default (1)"),
            "TOOLREF_WORKERS",
        ),
    ],
)
def test_a_bad_value_is_named_as_the_flag_or_the_variable_that_gave_it(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], said: tuple[str, ...], unsaid: str
) -> None:
    """Review (relay and start-up edges): `serve --port 99999` said `TOOLREF_PORT: ...: fix
    it, or unset TOOLREF_PORT`, a variable no one had set, and not the range a port takes.
    Now the flag when a flag gave the value, the variable when the variable did, and a
    bounded setting's range."""
    data = tmp_path / "data"
    result = run_cli("serve", *args, "--data-dir", str(data), **env)
    refused(result, *said)
    assert unsaid not in result.stderr
    assert not data.exists()
