"""The process: stopped by SIGTERM or SIGINT with its engine and data, and not starved of
file descriptors by idle sockets. Real `toolref-server serve` processes, real sockets."""

from __future__ import annotations

import os
import resource
import signal
import socket
import statistics
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import psutil
import pytest

from toolref_server.embedded import valkey_server_binary

from ..conftest import ON_CLUSTER, need
from ..sockets import read_reply
from .wire import serve

pytestmark = [
    pytest.mark.skipif(ON_CLUSTER, reason="tests the embedded engine's lifecycle"),
    pytest.mark.slow,
]

INVOCATION = {"name": "read_file", "args": {"path": "a.py"}, "result": "x = 1\n" * 200}
HEADERS = {"Toolref-Protocol": "2"}


@pytest.fixture(autouse=True)
def engine_binary() -> None:
    try:
        valkey_server_binary()
    except Exception as exc:
        need(f"no valkey-server binary: {exc}")


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def runs_uvloop(pid: int) -> bool:
    """Whether the process has uvloop's extension loaded (its event loop)."""
    return any("uvloop" in m.path for m in psutil.Process(pid).memory_maps())


@pytest.mark.parametrize("loop", ["auto", "asyncio"])
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_stops_the_engine_first_and_keeps_the_data(
    tmp_path: Path, stop: signal.Signals, loop: str
) -> None:
    """The signal goes to the service process alone (as `kill PID` or Kubernetes send it).
    When the process has exited, its engine is gone too (stopped by it, not orphaned), and a
    service started at once on the same folder holds what was registered just before. On
    either event loop: `auto` (the default) runs uvloop, installed with the server extra."""
    data_dir = tmp_path / "data"
    service = serve(data_dir, TOOLREF_EVENT_LOOP=loop)
    try:
        assert runs_uvloop(service.process.pid) == (loop == "auto")
        registered = httpx.post(
            service.url + "/v1/invocations", json={"invocations": [INVOCATION]}, headers=HEADERS
        )
        ref = registered.json()["refs"][0]["ref"]
        engine_pid = service.engine_pid
        os.kill(service.process.pid, stop)  # at once: no wait for the append-only fsync
        assert service.process.wait(30) == 0, service.output()
        # The engine was stopped before the process exited, not left to die after it.
        assert not alive(engine_pid), "the engine outlived the service"
        output = service.output()
        assert "embedded valkey stopped" in output, output
        assert "Traceback" not in output, output
    finally:
        service.stop()
    again = serve(data_dir)  # at once: the data folder's lock is free
    try:
        assert again.engine_pid != engine_pid
        resolved = httpx.post(
            again.url + "/v1/invocations:resolve", json={"refs": [ref]}, headers=HEADERS
        ).json()
        assert resolved == {"invocations": {ref: {**INVOCATION, "isError": False}}, "missing": []}
    finally:
        again.stop()


# --- file descriptors ---------------------------------------------------------------------

IDLE = 1_100
SOFT_LIMIT = 1_024


@contextmanager
def soft_open_files_limit(limit: int) -> Iterator[None]:
    """Children started in the block inherit `limit` as their soft RLIMIT_NOFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def healthz_seconds(port: int) -> float:
    """A small request on a fresh connection: connect, GET /healthz, read the answer."""
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200"), data[:200]
    return time.perf_counter() - started


def median_healthz(port: int, times: int = 7) -> float:
    return statistics.median(healthz_seconds(port) for _ in range(times))


@pytest.mark.latency
def test_idle_sockets_past_a_1024_descriptor_limit_do_not_lock_out_a_client(
    tmp_path: Path,
) -> None:
    """Started with a soft limit of 1,024 open files, the service raises it to the hard
    limit, accepts 1,100 idle sockets, and still answers a new client as fast as alone."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < IDLE * 2 + 200:
        need(f"the hard open-files limit {hard} leaves no room for {IDLE} sockets each side")
    with soft_open_files_limit(SOFT_LIMIT):
        # A connection limit above the sockets: what is tested is that they all fit.
        service = serve(tmp_path / "data", TOOLREF_MAX_CONNECTIONS="2000")
    with ExitStack() as stack:
        stack.callback(service.stop)
        process = psutil.Process(service.process.pid)
        soft, _ = process.rlimit(psutil.RLIMIT_NOFILE)
        assert soft > SOFT_LIMIT, "the service did not raise its open-files limit"
        alone = median_healthz(service.port)
        idle = [
            stack.enter_context(socket.create_connection(("127.0.0.1", service.port)))
            for _ in range(IDLE)
        ]
        deadline = time.monotonic() + 10
        while process.num_fds() < IDLE and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.num_fds() >= IDLE, f"only {process.num_fds()} descriptors accepted"
        during = median_healthz(service.port)
        ratio = during / alone
        print(
            f"\n{len(idle)} idle sockets: /healthz {during * 1000:.2f} ms against "
            f"{alone * 1000:.2f} ms alone ({ratio:.1f}x); service soft limit {soft}"
        )
        assert ratio < 20, (during, alone)


def test_a_stop_during_an_attack_is_not_held_up_by_it(tmp_path: Path) -> None:
    """SIGTERM while idle sockets, half-sent heads and trickling uploads are open (with
    deadlines far longer than the test): the idle ones are closed at once, the uploads are
    cut after TOOLREF_SHUTDOWN_TIMEOUT, the engine is stopped and the process exits."""
    service = serve(
        tmp_path / "data",
        TOOLREF_SHUTDOWN_TIMEOUT="1",
        TOOLREF_HEADER_TIMEOUT="600",
        TOOLREF_BODY_TIMEOUT="600",
    )
    with ExitStack() as stack:
        stack.callback(service.stop)
        engine_pid = service.engine_pid

        def attacker() -> socket.socket:
            return stack.enter_context(socket.create_connection(("127.0.0.1", service.port)))

        for _ in range(200):
            attacker()
        for _ in range(20):
            attacker().sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
        head = (
            b"POST /v1/invocations HTTP/1.1\r\nHost: localhost\r\nToolref-Protocol: 2\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{"
        )
        uploads = [attacker() for _ in range(20)]
        for upload in uploads:
            upload.sendall(head)
        time.sleep(0.5)
        started = time.monotonic()
        os.kill(service.process.pid, signal.SIGTERM)
        assert service.process.wait(30) == 0, service.output()
        print(f"\nstop during an attack: exited after {time.monotonic() - started:.2f}s")
        assert not alive(engine_pid)
        assert "embedded valkey stopped" in service.output()
        # The cancelled uploads were answered, as problem+json (not uvicorn's text/plain 500).
        for upload in uploads:
            reply = read_reply(upload)
            assert reply is not None
            assert reply.status == 503, reply
            assert reply.headers["content-type"] == "application/problem+json"
            assert reply.json()["type"] == "urn:toolref:problem:unavailable"
            assert reply.headers["retry-after"].isdigit()
