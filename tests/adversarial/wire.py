"""Raw HTTP/1.1 over TCP sockets against a real `toolref-server serve` process, and the
measure every attack test takes: a small request's time during the attack as a ratio of the
same request's time alone, in the same test."""

from __future__ import annotations

import multiprocessing
import socket
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest

from tests.support.processes import Service
from toolref_server.embedded import free_port, valkey_server_binary

from ..conftest import ON_CLUSTER, engine_env, need
from ..sockets import Reply, connect, read_reply

PROBLEM: Final = "application/problem+json"


def start_service(request: pytest.FixtureRequest, data_dir: Path, **env: str) -> Service:
    """`toolref-server serve` with `env` (on the cluster pass, against the cluster)."""
    if not ON_CLUSTER:
        try:
            valkey_server_binary()
        except Exception as exc:
            need(f"no valkey-server binary: {exc}")
    try:
        return serve(data_dir, **env, **engine_env(request))
    except AssertionError as exc:
        need(f"`toolref-server serve` did not start: {exc}")
        raise


def serve(data_dir: Path, **env: str) -> Service:
    """`toolref-server serve` on a free port. The port is free when picked, but the
    service's embedded engine picks one for itself before the web server binds: if the two
    collide (rare), start again on another."""
    for attempt in range(3):
        try:
            return Service(data_dir, free_port(), **env)
        except AssertionError as exc:
            if "address already in use" not in str(exc).lower() or attempt == 2:
                raise
    raise AssertionError("unreachable")


def head(
    path: str, headers: dict[str, str] | None = None, method: str = "GET", *, close: bool = True
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Toolref-Protocol: 2"]
    if close:
        lines.append("Connection: close")
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def post(path: str, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    fields = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    return head(path, {**fields, **(headers or {})}, "POST") + body


def closed_without_answer(sock: socket.socket, timeout: float = 10.0) -> bool:
    """True when the server closes `sock` without sending a byte (within `timeout`)."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def exchange(service: Service, raw: bytes, timeout: float = 10.0) -> Reply | None:
    with connect(service, timeout) as sock:
        sock.sendall(raw)
        return read_reply(sock, timeout)


def assert_problem(reply: Reply | None, status: int, slug: str) -> dict[str, Any]:
    assert reply is not None, "the server closed the connection without answering"
    assert reply.status == status, (reply.status, reply.body[:300])
    assert reply.headers["content-type"] == PROBLEM, reply.headers
    problem: dict[str, Any] = reply.json()
    assert problem["type"] == f"urn:toolref:problem:{slug}", problem
    assert problem["status"] == status
    assert problem["title"]
    assert problem["detail"]
    return problem


# --- the small request, alone and during an attack ------------------------------------------


def small_request(
    service: Service, headers: dict[str, str] | None = None, *, again: bool = False
) -> float:
    """Seconds for one small request that touches the store (findMissing of one ref) on a
    fresh connection: connect, send, read the whole answer. `again`: one closed unanswered
    is sent once more, its time counted (among idle connections past the limit, one whose
    request is still on its way when its connection is chosen looks idle and may be closed,
    as `test_a_flood_of_new_connections_never_closes_one_whose_request_is_waiting` says; a
    client sends it again). Twice unanswered fails."""
    body = b'{"refs": ["tr_aaaaaaaaaaaaaaaaaaaaaaaaaa"]}'
    started = time.perf_counter()
    reply = exchange(service, post("/v1/invocations:findMissing", body, headers))
    if reply is None and again:
        reply = exchange(service, post("/v1/invocations:findMissing", body, headers))
    elapsed = time.perf_counter() - started
    assert reply is not None
    assert reply.status == 200, reply.body[:300]
    return elapsed


def median_small_request(
    service: Service, times: int = 9, headers: dict[str, str] | None = None, again: bool = False
) -> float:
    return statistics.median(small_request(service, headers, again=again) for _ in range(times))


_FORK = multiprocessing.get_context("fork")  # the attack's closures go along as they are


@dataclass
class Attack:
    """`work` run in a loop by `threads` threads in each of `processes` forked processes
    until `stop` is set. Processes, not threads of the test's own: an attack in the test
    process would take the measuring thread's GIL, and time it as the service's. `work`
    counts the attacking connections it opens (`count`) and the answers it got (`answer`).
    """

    work: Callable[[Attack], None]
    threads: int = 2
    processes: int = 2
    stop: Any = field(default_factory=_FORK.Event)
    _opened: Any = field(default_factory=lambda: _FORK.Value("i", 0))
    _answered: Any = field(default_factory=lambda: _FORK.Value("i", 0))
    _refused: Any = field(default_factory=lambda: _FORK.Value("i", 0))
    _errors: Any = field(default_factory=_FORK.Queue)

    @property
    def opened(self) -> int:
        return int(self._opened.value)

    @property
    def answered(self) -> int:
        return int(self._answered.value)

    @property
    def refused(self) -> int:
        """Answers 408, 429 or 503: the service turned the attack away."""
        return int(self._refused.value)

    def count(self, connections: int = 1) -> None:
        with self._opened.get_lock():
            self._opened.value += connections

    def answer(self, status: int) -> None:
        with self._answered.get_lock():
            self._answered.value += 1
        if status in (408, 429, 503):
            with self._refused.get_lock():
                self._refused.value += 1

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                self.work(self)
            except OSError:
                pass  # the server closed or refused: the attack goes on
            except BaseException as exc:  # a bug in the attack: report it
                self._errors.put(repr(exc))
                return

    def _process(self) -> None:
        workers = [threading.Thread(target=self._loop, daemon=True) for _ in range(self.threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    @contextmanager
    def running(self, warm_up: float = 0.5) -> Iterator[Attack]:
        children = [_FORK.Process(target=self._process, daemon=True) for _ in range(self.processes)]
        for child in children:
            child.start()
        time.sleep(warm_up)
        try:
            yield self
        finally:
            self.stop.set()
            for child in children:
                child.join(30)
                if child.is_alive():
                    child.kill()
        errors = []
        while not self._errors.empty():
            errors.append(self._errors.get())
        assert not errors, errors

    def connect(self, service: Service, how_many: int) -> list[socket.socket]:
        socks = [connect(service) for _ in range(how_many)]
        self.count(how_many)
        return socks


def cost(
    service: Service,
    attack: Attack,
    name: str,
    bound: float,
    headers: dict[str, str] | None = None,
    again: bool = False,
) -> float:
    """The ratio of the small request's median time during `attack` to its median time
    alone (sent with `headers`; `again`: see `small_request`); asserted under `bound`,
    printed for the docs."""
    alone = median_small_request(service, headers=headers)
    with attack.running():
        during = median_small_request(service, headers=headers, again=again)
        opened = attack.opened
    ratio = during / alone
    print(
        f"\n{name}: small request {during * 1000:.2f} ms during, {alone * 1000:.2f} ms "
        f"alone ({ratio:.1f}x); {opened} attacking connections"
    )
    assert ratio < bound, f"{name}: {ratio:.1f}x slower during the attack (bound {bound}x)"
    return ratio
