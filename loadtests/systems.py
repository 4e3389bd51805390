"""The processes of the gateway-speed bench, on loopback: the fake upstream, the two floors,
and the gateway and the relay from this tree ("after") and from the commit before the
gateway called its registry in process ("before", `BEFORE`), each started as its users
start it, and the CPU of each one's process tree.

"Before" is that commit's `client_sdk` and `service`, written out of git (`git archive`) into
a temporary folder and put on `PYTHONPATH` ahead of the installed package; `Code.check`
imports the gateway and the relay the same way and names the files they came from, so the
report shows which code ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Final

import psutil

from toolref_server.embedded import valkey_server_binary

ROOT: Final = Path(__file__).resolve().parents[1]
BEFORE: Final = "3160e1c"  # the last commit whose gateway called its own app over ASGI
UPSTREAM_NAME: Final = "bench"  # the upstream's name at the gateway: /llm/bench/...
KEY: Final = "bench-tenant-key"
# The `PYTHONPATH` of this tree's code (`AFTER`): its own files, whatever is installed.
THIS_TREE: Final = f"{ROOT / 'client_sdk'}{os.pathsep}{ROOT / 'service'}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class Code:
    """One version of toolref: its label, the `PYTHONPATH` that selects it (empty: this
    tree's `client_sdk` and `service`, `THIS_TREE`, ahead of any installed toolref: a clone
    benched with another checkout's virtualenv, whose editable install maps toolref to that
    checkout, still runs its own files), where to run it, and how its modules are named."""

    label: str
    pythonpath: str
    cwd: Path
    relay_module: str
    gateway_module: str

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLREF_")}
        env["PYTHONPATH"] = self.pythonpath or THIS_TREE
        return {**env, **extra}

    def check(self) -> str:
        """The files the gateway and the relay are imported from, as this code's processes
        import them; refused when they are not the files under `cwd` (another tree's, the
        installed package's)."""
        probe = (
            f"import {self.gateway_module} as g, {self.relay_module}.app as r; "
            "print(g.__file__); print(r.__file__)"
        )
        found = subprocess.run(
            [sys.executable, "-c", probe],
            env=self.env(),
            cwd=self.cwd,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        if not all(Path(f).is_relative_to(self.cwd) for f in found):
            raise RuntimeError(f"{self.label} imports {found}, not the tree at {self.cwd}")
        return ", ".join(found)


def note(files: dict[str, str]) -> str:
    """Which code ran, for a section's introduction."""
    said = [f"`{label}` ran {files[label]}" for label in files]
    if len(files) == 1:
        said.append(f"`before` ({BEFORE}) could not be had: this tree has no git history")
    else:
        said[1] += (
            f" (commit {BEFORE}, the last whose gateway called its own app over "
            "`httpx.ASGITransport`, written out with `git archive`, its `client_sdk` and "
            "`service` on `PYTHONPATH`)"
        )
    return "; ".join(said) + "."


AFTER: Final = Code("after", "", ROOT, "toolref_relay", "toolref_server.gateway.gateway")


@contextmanager
def before_code() -> Iterator[Code | None]:
    """`BEFORE`'s SDK and service in a temporary folder; None where git has no history
    (a tarball of this tree)."""
    try:
        archive = subprocess.run(
            ["git", "archive", BEFORE, "client_sdk/toolref", "service/toolref_server"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="toolref-before-") as folder:
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
        tree = Path(folder)
        path = f"{tree / 'client_sdk'}{os.pathsep}{tree / 'service'}"
        yield Code(f"before ({BEFORE})", path, tree, "toolref.relay", "toolref_server.gateway")


@dataclass
class Proc:
    """A started process: its URL and its process tree's CPU seconds."""

    name: str
    url: str
    popen: subprocess.Popen[bytes]
    tree: list[psutil.Process] = field(default_factory=list)

    def cpu(self) -> float:
        """CPU seconds of the process and of every process under it: the time each of their
        threads ran (Linux's schedstat, in nanoseconds), else psutil's user + system time
        (in clock ticks: 10 ms steps, too coarse for one request)."""
        if not self.tree:  # found once (`forget` to look again): the engine is there by then
            root = psutil.Process(self.popen.pid)
            self.tree = [root, *root.children(recursive=True)]
        return sum(_ran(process) for process in self.tree)

    def forget(self) -> None:
        """Look for the process's children again at the next `cpu` (workers started late)."""
        self.tree = []


def cpu_of(process: psutil.Process) -> float:
    """CPU seconds of one process (every thread's run time), as `Proc.cpu` counts them."""
    return _ran(process)


def _ran(process: psutil.Process) -> float:
    try:
        tasks = Path(f"/proc/{process.pid}/task")
        if tasks.is_dir():
            total = 0
            for task in tasks.iterdir():
                with contextlib.suppress(OSError):  # a thread that just ended
                    total += int((task / "schedstat").read_text().split()[0])
            return total / 1e9
        times = process.cpu_times()
    except (psutil.NoSuchProcess, FileNotFoundError):
        return 0.0
    return times.user + times.system


def cpu(procs: list[Proc]) -> float:
    return sum(p.cpu() for p in procs)


class Launcher:
    """Starts processes (all at once, then waits for each to listen) and stops them."""

    def __init__(self, stack: ExitStack, scratch: Path) -> None:
        self.stack, self.scratch = stack, scratch
        self.waiting: list[tuple[Proc, int]] = []

    def start(
        self, name: str, command: list[str], env: dict[str, str], cwd: Path, port: int = 0
    ) -> Proc:
        """Start `command`, which listens on `port` (else on its `--port PORT`)."""
        port = port or int(command[command.index("--port") + 1])
        log = self.stack.enter_context((self.scratch / f"{name}.log").open("wb"))
        popen = subprocess.Popen(
            command, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        self.stack.callback(_stop, popen)
        proc = Proc(name, f"http://127.0.0.1:{port}", popen)
        self.waiting.append((proc, port))
        return proc

    async def wait(self, seconds: float = 60) -> None:
        """Until every process started since the last wait listens (the loop keeps running:
        a relay's start-up probe may be answered by this process); after a failure, the
        next wait waits for none of these."""
        waiting, self.waiting = self.waiting, []
        deadline = time.monotonic() + seconds
        for proc, port in waiting:
            while True:
                if proc.popen.poll() is not None:
                    log = (self.scratch / f"{proc.name}.log").read_text(errors="replace")
                    raise RuntimeError(f"{proc.name} exited: {log[-2000:]}")
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"{proc.name} did not listen within {seconds} s"
                        ) from None
                    await asyncio.sleep(0.05)
                    continue
                writer.close()
                await writer.wait_closed()
                break

    def upstream(self) -> Proc:
        command = [sys.executable, "-m", "loadtests.fast_upstream", "--port", str(free_port())]
        return self.start("upstream", command, AFTER.env(), ROOT)

    def floor(self, upstream: Proc) -> Proc:
        target = upstream.url.removeprefix("http://")
        command = [sys.executable, "-m", "loadtests.passthrough", "--port", str(free_port())]
        return self.start("floor", [*command, "--upstream", target], AFTER.env(), ROOT)

    def stack_floor(self, upstream: Proc) -> Proc:
        command = [
            sys.executable, "-m", "uvicorn", "loadtests.passthrough_httpx:app", "--port",
            str(free_port()), "--log-level", "warning", "--no-access-log",
        ]  # fmt: skip
        return self.start("stack-floor", command, AFTER.env(BENCH_UPSTREAM=upstream.url), ROOT)

    def gateway(
        self, code: Code, upstream: Proc | str, name: str, workers: int = 1, **settings: str
    ) -> Proc:
        """`toolref-server serve` on its own embedded engine (a child); with more than one
        worker, uvicorn's supervisor binds the socket and the workers are its children.
        `upstream`: a process, or a URL served otherwise. `settings`: more `TOOLREF_*`
        variables (a code that knows them)."""
        url = upstream if isinstance(upstream, str) else upstream.url
        env = code.env(
            TOOLREF_UPSTREAMS=f"{UPSTREAM_NAME}={url}",
            TOOLREF_DATA_DIR=str(self.scratch / f"{name}-data"),
            TOOLREF_WORKERS=str(workers),
            TOOLREF_LOG_LEVEL="warning",
            **settings,
        )
        command = [sys.executable, "-m", "toolref_server.cli", "serve", "--port", str(free_port())]
        return self.start(name, command, env, code.cwd)

    def granian_gateway(self, upstream: Proc, name: str) -> tuple[Proc, Proc]:
        """This tree's gateway app served by granian (one worker, uvloop) rather than
        `toolref-server serve`'s uvicorn, on an engine of its own (valkey-server, started
        here: granian starts none): the gateway's process and the engine's. What uvicorn's
        protocol gives the gateway (`toolref_server.http.connection`: head, body and send
        deadlines, the connection limit, problem+json refusals) is not there."""
        engine_port = free_port()
        engine = self.start(
            f"{name}-engine",
            [valkey_server_binary(), "--port", str(engine_port), "--save", "", "--appendonly",
             "no", "--bind", "127.0.0.1"],
            AFTER.env(), self.scratch,
        )  # fmt: skip
        env = AFTER.env(
            TOOLREF_UPSTREAMS=f"{UPSTREAM_NAME}={upstream.url}",
            TOOLREF_REDIS_URL=f"redis://127.0.0.1:{engine_port}/0",
            TOOLREF_LOG_LEVEL="warning",
        )
        command = [
            str(Path(sys.executable).with_name("granian")), "--interface", "asgi", "--factory",
            "--host", "127.0.0.1", "--port", str(free_port()), "--workers", "1", "--loop",
            "uvloop", "--log-level", "warning", "toolref_server.app:create_app",
        ]  # fmt: skip
        return self.start(name, command, env, ROOT), engine

    def far_engine(self, delay_ms: float, name: str = "engine") -> tuple[Proc, Proc]:
        """An engine of its own (valkey-server) and a proxy in front that delays every byte
        by `delay_ms` each way (`loadtests.delay_proxy`): a store a round trip of twice it
        away. A gateway reaches it at the proxy's URL (`redis://...`, its `url` below)."""
        engine_port = free_port()
        engine = self.start(
            name,
            [valkey_server_binary(), "--port", str(engine_port), "--save", "", "--appendonly",
             "no", "--bind", "127.0.0.1"],
            AFTER.env(), self.scratch,
        )  # fmt: skip
        command = [
            sys.executable, "-m", "loadtests.delay_proxy", "--port", str(free_port()),
            "--to", f"127.0.0.1:{engine_port}", "--delay-ms", str(delay_ms),
        ]  # fmt: skip
        proxy = self.start(f"{name}-delay", command, AFTER.env(), ROOT)
        return engine, proxy

    def relay(self, code: Code, gateway: str, name: str, *options: str) -> Proc:
        """`toolref relay --gateway URL` (and `options`), once something listens at URL (the
        relay checks its gateway at start, and stops on one that does not answer)."""
        _listening(gateway)
        port = free_port()
        command = [
            sys.executable, "-m", f"{code.relay_module}.cli", "relay", "--gateway", gateway,
            "--port", str(port), "--token-file", str(self.scratch / f"{name}.token"), *options,
        ]  # fmt: skip
        return self.start(name, command, code.env(TOOLREF_KEY=KEY), code.cwd)


def _listening(url: str, seconds: float = 60) -> None:
    """Block until `url`'s port accepts a connection (a process started beside this one)."""
    host, port = url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens at {url} after {seconds} s") from None
            time.sleep(0.05)


def _stop(popen: subprocess.Popen[bytes]) -> None:
    if popen.poll() is None:
        popen.terminate()
        try:
            popen.wait(15)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()
