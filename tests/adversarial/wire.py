"""Raw HTTP/1.1 over TCP sockets against a real `toolref-server serve` process, and the
measure every attack test takes: a small request's time during the attack as a ratio of the
same request's time alone, in the same test."""

from __future__ import annotations

import json
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

from toolref_server.embedded import free_port, valkey_server_binary

from ..conftest import ON_CLUSTER, engine_env, need
from ..integration.processes import Service

PROBLEM: Final = "application/problem+json"


def start_service(request: pytest.FixtureRequest, data_dir: Path, **env: str) -> Service:
    """`toolref-server serve` with `env` (on the cluster pass, against the cluster)."""
    if not ON_CLUSTER:
        try:
            valkey_server_binary()
        except Exception as exc:
            need(f"no valkey-server binary: {exc}")
    try:
        return Service(data_dir, free_port(), **env, **engine_env(request))
    except AssertionError as exc:
        need(f"`toolref-server serve` did not start: {exc}")
        raise


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def connect(service: Service, timeout: float = 10.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", service.port), timeout=timeout)


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


def read_reply(sock: socket.socket, timeout: float = 10.0) -> Reply | None:
    """The next response on `sock`, or None when the server closes without one."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return None
        if not chunk:
            return None
        data += chunk
    top, _, rest = data.partition(b"\r\n\r\n")
    status_line, *lines = top.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return Reply(int(status_line.split()[1]), headers, rest[:length])


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


def small_request(service: Service) -> float:
    """Seconds for one small request that touches the store (findMissing of one ref) on a
    fresh connection: connect, send, read the whole answer."""
    body = b'{"refs": ["tr_aaaaaaaaaaaaaaaaaaaaaaaaaa"]}'
    started = time.perf_counter()
    reply = exchange(service, post("/v1/invocations:findMissing", body))
    elapsed = time.perf_counter() - started
    assert reply is not None
    assert reply.status == 200, reply.body[:300]
    return elapsed


def median_small_request(service: Service, times: int = 9) -> float:
    return statistics.median(small_request(service) for _ in range(times))


@dataclass
class Attack:
    """`work` run in a loop by `threads` threads until `stop` is set; it counts each
    attacking connection it opens with `count`."""

    work: Callable[[Attack], None]
    threads: int = 4
    opened: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[BaseException] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, connections: int = 1) -> None:
        with self._lock:
            self.opened += connections

    @contextmanager
    def running(self, warm_up: float = 0.5) -> Iterator[Attack]:
        def loop() -> None:
            while not self.stop.is_set():
                try:
                    self.work(self)
                except OSError:
                    pass  # the server closed or refused: the attack goes on
                except BaseException as exc:  # a bug in the attack: report it
                    self.errors.append(exc)
                    return

        workers = [threading.Thread(target=loop, daemon=True) for _ in range(self.threads)]
        for worker in workers:
            worker.start()
        time.sleep(warm_up)
        try:
            yield self
        finally:
            self.stop.set()
            for worker in workers:
                worker.join(30)
        assert not self.errors, self.errors

    def connect(self, service: Service, how_many: int) -> list[socket.socket]:
        socks = [connect(service) for _ in range(how_many)]
        self.count(how_many)
        return socks


def cost(service: Service, attack: Attack, name: str, bound: float) -> float:
    """The ratio of the small request's median time during `attack` to its median time
    alone; asserted under `bound`, printed for the docs."""
    alone = median_small_request(service)
    with attack.running():
        during = median_small_request(service)
        opened = attack.opened
    ratio = during / alone
    print(
        f"\n{name}: small request {during * 1000:.2f} ms during, {alone * 1000:.2f} ms "
        f"alone ({ratio:.1f}x); {opened} attacking connections"
    )
    assert ratio < bound, f"{name}: {ratio:.1f}x slower during the attack (bound {bound}x)"
    return ratio
