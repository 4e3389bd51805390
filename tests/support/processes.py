"""Real processes for integration tests: the registry (`toolref-server serve`) and examples."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLREF_")}
    env["TOOLREF_LOG_LEVEL"] = "warning"
    env.update(extra)
    return env


class Process:
    """A child process in its own session, ready once `ready_path` answers `ready_status`."""

    def __init__(
        self,
        args: list[str],
        url: str,
        ready_path: str,
        env: dict[str, str],
        ready_status: int = 200,
    ) -> None:
        self.url = url
        self._log = tempfile.NamedTemporaryFile(prefix="toolref-test-", suffix=".log")  # noqa: SIM115
        self.process = subprocess.Popen(
            args,
            env=env,
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"{args} exited early: {self.output()}")
            try:
                if httpx.get(url + ready_path, timeout=1).status_code == ready_status:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.process.kill()
        raise AssertionError(f"{args} did not become ready: {self.output()}")

    def output(self) -> str:
        return Path(self._log.name).read_text(errors="replace")

    def interrupt(self) -> int:
        """Ctrl-C as a terminal sends it: SIGINT to the whole foreground process group."""
        os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.interrupt()
        self._log.close()


class Service(Process):
    """`toolref-server serve` on the embedded engine, persisted under `data_dir`."""

    def __init__(self, data_dir: Path, port: int, **env: str) -> None:
        self.data_dir, self.port = data_dir, port
        args = [sys.executable, "-m", "toolref_server.cli", "serve", "--port", str(port)]
        args += ["--data-dir", str(data_dir)]
        self._args, self._env = args, clean_env(**env)
        super().__init__(args, f"http://127.0.0.1:{port}", "/readyz", self._env)

    def restart(self) -> None:
        """Stop (Ctrl-C) if running, then serve again on the same data folder, port and env."""
        self.stop()
        Process.__init__(self, self._args, self.url, "/readyz", self._env)

    @property
    def engine_pid(self) -> int:
        return int((self.data_dir / "valkey.pid").read_text())

    @property
    def engine_url(self) -> str:
        """URL of the embedded engine this service started, as it printed it (the socket may
        live outside `data_dir` when that path is too long for a unix socket)."""
        match = re.search(r"embedded valkey on (unix://\S+)", self.output())
        if match is None:
            raise AssertionError(f"this service started no embedded engine: {self.output()}")
        return match[1]
