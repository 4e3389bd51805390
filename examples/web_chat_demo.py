"""`make demo`: the registry (embedded engine) and the web-chat backend, as real processes.

    python -m examples.web_chat_demo [--port 8770] [--registry-port 8751]

prints the page's URL and serves until Ctrl-C. The browser test (tests/browser) and the
bench (loadtests/web_chat.py) start the same `Stack` on free ports and drive the page with
`drive`: examples/web-chat/test/conversation.mjs in Debian's Chromium.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final, Self

ROOT = Path(__file__).resolve().parents[1]
WEB = ROOT / "examples" / "web-chat"
DRIVER = WEB / "test" / "conversation.mjs"
# The one-line page built once per AI SDK major (`make web-build`): served under /ai5/ etc.
MAJORS = WEB / "majors"
AI_MAJORS: Final = (5, 6, 7)
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def missing() -> str | None:
    """What the browser run lacks here, with the command that installs it, or None."""
    if shutil.which("node") is None:
        return "node is not on PATH: install Node.js 20+ (apt-get install -y nodejs npm)"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing: apt-get install -y chromium"
    if not (WEB / "node_modules" / "playwright-core").is_dir():
        return f"{WEB}/node_modules is missing: make web-build (npm ci there)"
    if not (WEB / "dist" / "index.html").exists():
        return f"{WEB}/dist is missing: make web-build (vite build)"
    for major in AI_MAJORS:
        if not (MAJORS / "dist" / f"ai{major}" / "index.html").exists():
            return f"{MAJORS}/dist/ai{major} is missing: make web-build (it builds each major)"
    return None


class Child:
    """A process in its own session, its output in a log file, ready once `ready_url`
    answers 200."""

    def __init__(self, args: list[str], ready_url: str, name: str) -> None:
        self.args, self.ready_url, self.name = args, ready_url, name
        self.log: IO[bytes] = tempfile.NamedTemporaryFile(prefix=f"web-chat-{name}-")  # noqa: SIM115
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLREF_")}
        env["TOOLREF_LOG_LEVEL"] = "warning"
        self.process = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{name} exited ({self.process.returncode}): {self.output()}")
            try:
                with urllib.request.urlopen(ready_url, timeout=1) as answer:  # noqa: S310
                    if answer.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"{name} was not ready at {ready_url} in 30 s: {self.output()}")

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL to its whole session, as a crash would: nothing saved, nothing closed."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        """Ctrl-C, then a kill if it has not ended in 10 s."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


class Stack:
    """The registry on its embedded engine, and the backend in front of it."""

    def __init__(
        self,
        data_dir: Path,
        port: int = 0,
        registry_port: int = 0,
        delay: float = 0.01,
        page: Path | None = None,
    ) -> None:
        self.data_dir, self.page = data_dir, page
        self.port, self.registry_port = port or free_port(), registry_port or free_port()
        self.delay = delay
        self.url = f"http://127.0.0.1:{self.port}/"
        self.registry_url = f"http://127.0.0.1:{self.registry_port}"
        self.registry: Child | None = None
        self.backend: Child | None = None

    def __enter__(self) -> Self:
        try:
            self.start_registry()
            self.backend = Child(
                [sys.executable, "-m", "examples.web_chat_backend", "--port", str(self.port),
                 "--registry", self.registry_url, "--delay", str(self.delay),
                 *(["--page", str(self.page)] if self.page is not None else [])],
                f"http://127.0.0.1:{self.port}/api/received", "backend",
            )  # fmt: skip
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        for child in (self.backend, self.registry):
            if child is not None:
                child.stop()

    def start_registry(self, fresh: bool = False) -> None:
        """Serve the registry; `fresh`: on an empty data folder, as a lost disk would."""
        if fresh:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.registry = Child(
            [sys.executable, "-m", "toolref_server.cli", "serve", "--port",
             str(self.registry_port), "--data-dir", str(self.data_dir)],
            f"{self.registry_url}/readyz", "registry",
        )  # fmt: skip

    def kill_registry(self) -> None:
        assert self.registry is not None, "the registry is not running"
        self.registry.kill()
        self.registry.log.close()
        self.registry = None

    def received(self) -> list[str]:
        """Every request body the backend's app received, as text."""
        with urllib.request.urlopen(self.url + "api/received", timeout=10) as answer:  # noqa: S310
            bodies: list[str] = json.load(answer)["bodies"]
        return bodies


def drive(
    url: str,
    out: Path,
    turns: int,
    *,
    pauses: dict[int, Callable[[], None]] | None = None,
    query: str = "",
    timeout: float = 240,
) -> dict[str, Any]:
    """Run the conversation in Chromium; before turn n, `pauses[n]()`. The driver's record."""
    pauses = pauses or {}
    args = ["node", str(DRIVER), "--url", url + query, "--turns", str(turns), "--out", str(out)]
    args += ["--pause", ",".join(map(str, pauses)), "--chromium", str(CHROMIUM)]
    errors = out.with_suffix(".stderr")
    with errors.open("w") as stderr:
        driver = subprocess.Popen(
            args, cwd=WEB, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
    assert driver.stdin is not None
    assert driver.stdout is not None
    deadline = time.monotonic() + timeout
    try:
        for line in _lines(driver.stdout, deadline):
            event = json.loads(line)
            if event["event"] == "pause":
                pauses[event["turn"]]()
                driver.stdin.write("go\n")
                driver.stdin.flush()
        driver.stdin.close()
        code = driver.wait(max(1.0, deadline - time.monotonic()))
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    if code != 0:
        raise RuntimeError(f"the browser driver failed ({code}): {errors.read_text()[-4000:]}")
    record: dict[str, Any] = json.loads(out.read_text())
    return record


def _lines(stream: IO[str], deadline: float) -> Iterable[str]:
    for line in stream:
        if time.monotonic() > deadline:
            raise TimeoutError("the browser conversation took too long")
        if line.startswith("{"):
            yield line


def _interrupt(signum: int, frame: object) -> None:
    # Once: a second signal (make passes one on, a shell another) must not cut the cleanup
    # short and leave the backend running; the cleanup ends itself (a kill after 10 s).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8770, help="the page and /api/chat")
    parser.add_argument("--registry-port", type=int, default=8751)
    parser.add_argument("--data-dir", type=Path, default=ROOT / ".toolref" / "demo-data")
    args = parser.parse_args()
    if not (WEB / "dist" / "index.html").exists():
        sys.exit(f"{WEB}/dist is missing: run `make demo` (it builds the page)")
    # SIGTERM (and SIGINT where a background shell ignored it) stops the children too.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    with Stack(args.data_dir, args.port, args.registry_port, delay=0.03) as stack:
        print(f"registry: {stack.registry_url} (data in {args.data_dir})")
        print(f"web chat: {stack.url}  (toolref off, to compare: {stack.url}?toolref=off)")
        print("Ctrl-C stops both.", flush=True)
        try:
            while stack.backend is not None and stack.backend.process.poll() is None:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
