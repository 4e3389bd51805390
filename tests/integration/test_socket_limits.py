"""Body limits over a raw socket, against a real `toolref-server serve` process.

The service runs with small limits (1 MiB body, 2 MiB inflated, depth 32). Requests are
written byte by byte on a TCP socket, so the tests control exactly what the server has been
sent when it answers: headers only, a chunked body stopped just past the limit, a body cut
short. Memory is the server process's resident set, sampled with psutil every millisecond
while a request runs (and read from the kernel's high-water mark, VmHWM, where Linux lets us
reset it): streaming 64 MiB, or a body that inflates to 1 GiB, must not grow it by more than
a small multiple of the limit.

The memory bound is 3 x the limit + 16 MiB. The service may hold what it has read, up to the
limit plus one chunk (the body parts, or the inflated parts), and a request that is accepted
would briefly hold those parts and their join: 2 x the limit, 3 x with headroom. 16 MiB
covers what is not the body: the allocator's arenas for the request, the response and the
exception (the same request shape is warmed up first), and sampling noise. Buffering the
stream would instead cost its whole size: 64 MiB or 1 GiB, far above the bound.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgpack
import psutil
import pytest
import zstandard

from tests.support.processes import Service
from toolref_server.embedded import free_port, valkey_server_binary

from ..conftest import ON_CLUSTER, engine_env, need
from ..sockets import Reply, connect, read_reply

MiB: Final = 2**20
LIMIT: Final = 1 * MiB
INFLATED_LIMIT: Final = 2 * MiB
DEPTH: Final = 32
MARGIN: Final = 16 * MiB
STREAMED: Final = 64 * MiB
CHUNK: Final = 64 * 1024
PROBLEM: Final = "application/problem+json"
RESOLVE: Final = "/v1/invocations:resolve"
REGISTER: Final = "/v1/invocations"

# Peak RSS growth measured by each test, by name: printed at the end of the module (-s).
MEASURED: dict[str, dict[str, Any]] = {}


@pytest.fixture(scope="module")
def service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    if not ON_CLUSTER:
        try:
            valkey_server_binary()
        except Exception as exc:
            need(f"no valkey-server binary: {exc}")
    try:
        running = Service(
            tmp_path_factory.mktemp("limits") / "data",
            free_port(),
            TOOLREF_MAX_BODY_BYTES=str(LIMIT),
            TOOLREF_MAX_DECOMPRESSED_BYTES=str(INFLATED_LIMIT),
            TOOLREF_MAX_DEPTH=str(DEPTH),
            **engine_env(request),
        )
    except AssertionError as exc:
        need(f"`toolref-server serve` did not start: {exc}")
    yield running
    running.stop()
    if MEASURED:
        print("\npeak RSS growth of the service process:")
        for name, numbers in MEASURED.items():
            print(f"  {name}: {numbers}")


# --- raw HTTP/1.1 ---


def head(path: str, headers: dict[str, str], method: str = "POST") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Toolref-Protocol: 2"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def exchange(service: Service, path: str, body: bytes, headers: dict[str, str]) -> Reply:
    """One request with a Content-Length body on a fresh connection."""
    with connect(service) as sock:
        sock.sendall(head(path, {**headers, "Content-Length": str(len(body))}) + body)
        reply = read_reply(sock)
    assert reply is not None, "the server closed the connection without answering"
    return reply


def assert_problem(reply: Reply, status: int, slug: str) -> dict[str, Any]:
    assert reply.status == status, (reply.status, reply.body[:500])
    assert reply.headers["content-type"] == PROBLEM
    problem: dict[str, Any] = reply.json()
    assert problem["type"] == f"urn:toolref:problem:{slug}", problem
    assert problem["status"] == status
    assert problem["title"]
    assert problem["detail"]
    return problem


def assert_ready(service: Service, within: float = 2.0) -> float:
    """GET /readyz answers 200 within `within` seconds; returns how long it took."""
    started = time.monotonic()
    with connect(service, timeout=within) as sock:
        sock.sendall(head("/readyz", {}, method="GET"))
        reply = read_reply(sock, timeout=within)
    elapsed = time.monotonic() - started
    assert reply is not None
    assert reply.status == 200, reply.body
    assert elapsed < within
    return elapsed


def chunk_frame(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


# --- memory ---


def _hwm_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_hwm(pid: int) -> bool:
    """Reset the kernel's peak-RSS mark to the current RSS (Linux >= 4.0)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


@dataclass
class PeakRss:
    """Peak resident memory of the service process (and any worker children) while the
    block runs, against the resident memory just before it."""

    pid: int
    baseline: int = 0
    peak: int = 0
    samples: int = 0
    hwm_peak: int | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _hwm: bool = False

    def _rss(self) -> int:
        process = psutil.Process(self.pid)
        total = process.memory_info().rss
        for child in process.children(recursive=True):
            if "python" in child.name().lower():  # uvicorn workers; not the valkey engine
                total += child.memory_info().rss
        return total

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            self.samples += 1
            time.sleep(0.001)

    def __enter__(self) -> PeakRss:
        self.baseline = self.peak = self._rss()
        self._hwm = _reset_hwm(self.pid)
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(0.05)  # a last few samples after the answer
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        self.peak = max(self.peak, self._rss())
        if self._hwm:
            kib = _hwm_kib(self.pid)
            self.hwm_peak = kib * 1024 if kib is not None else None

    @property
    def growth(self) -> int:
        """Growth over the baseline: the larger of the sampled and the kernel's peak."""
        peak = max(self.peak, self.hwm_peak or 0)
        return max(0, peak - self.baseline)

    def record(self, name: str, **extra: Any) -> None:
        MEASURED[name] = {
            "baseline_mib": round(self.baseline / MiB, 1),
            "growth_mib": round(self.growth / MiB, 2),
            "sampled_growth_mib": round(max(0, self.peak - self.baseline) / MiB, 2),
            "hwm_growth_mib": None
            if self.hwm_peak is None
            else round(max(0, self.hwm_peak - self.baseline) / MiB, 2),
            "samples": self.samples,
            **extra,
        }


def bound(limit: int) -> int:
    return 3 * limit + MARGIN


# --- (a) a declared length over the limit ---


@pytest.mark.parametrize("declared", [LIMIT + 1, 2**30, 2**62])
def test_a_declared_length_over_the_limit_is_refused_before_the_body(
    service: Service, declared: int
) -> None:
    with connect(service) as sock:
        started = time.monotonic()
        # Headers only: not one byte of the body is ever sent.
        sock.sendall(
            head(RESOLVE, {"Content-Type": "application/json", "Content-Length": str(declared)})
        )
        reply = read_reply(sock, timeout=5)
        elapsed = time.monotonic() - started
    assert reply is not None, "no answer to the headers alone"
    problem = assert_problem(reply, 413, "body-too-large")
    assert problem["limit"] == LIMIT
    assert elapsed < 2, elapsed
    assert_ready(service)


# --- (b) a chunked body that streams past the limit ---


def test_a_chunked_body_is_refused_once_it_passes_the_limit(service: Service) -> None:
    """Sent: the limit plus two chunks, then nothing. The 413 arrives without more, so the
    server decided on at most that much."""
    sent = 0
    with connect(service) as sock:
        sock.sendall(
            head(RESOLVE, {"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
        )
        while sent <= LIMIT + CHUNK:
            sock.sendall(chunk_frame(b" " * CHUNK))
            sent += CHUNK
        reply = read_reply(sock, timeout=5)
    assert reply is not None, f"no answer after {sent} bytes"
    problem = assert_problem(reply, 413, "body-too-large")
    assert sent <= LIMIT + 2 * CHUNK
    MEASURED["chunked: refused after"] = {"sent_bytes": sent, "detail": problem["detail"]}
    assert_ready(service)


def stream(sock: socket.socket, total: int) -> tuple[Reply | None, int, int]:
    """Send `total` bytes as a chunked body as fast as the socket takes them, watching for
    the answer; after it, keep sending what is left (the server may read and drop it, or
    close). Returns (the answer, bytes sent when it arrived, bytes sent in all)."""
    sock.setblocking(False)
    frame = chunk_frame(b" " * CHUNK)
    sent, at_answer, pending = 0, -1, b""
    reply: Reply | None = None
    buffered = b""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if reply is None:
            try:
                buffered += sock.recv(65536)
            except BlockingIOError:
                pass
            except OSError:
                break
            if b"\r\n\r\n" in buffered:
                at_answer = sent
                sock.setblocking(True)
                reply = read_reply(sock, timeout=5, buffered=buffered)
                sock.setblocking(False)
        if sent >= total and not pending:
            break
        if not pending:
            pending = frame
        try:
            written = sock.send(pending)
        except BlockingIOError:
            time.sleep(0.0005)
            continue
        except OSError:
            break  # the server closed: nothing more to send
        pending = pending[written:]
        if not pending:
            sent += CHUNK
    sock.setblocking(True)
    if reply is None:
        with contextlib.suppress(OSError):
            sock.sendall(b"0\r\n\r\n")
        reply = read_reply(sock, timeout=5, buffered=buffered)
        at_answer = sent
    return reply, at_answer, sent


def test_streaming_64_mib_keeps_memory_bounded(service: Service) -> None:
    # Warm up: the same refusal once, so first-use allocations are not counted.
    with connect(service) as sock:
        sock.sendall(
            head(RESOLVE, {"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
        )
        stream(sock, 2 * LIMIT)
    with connect(service) as sock, PeakRss(service.process.pid) as memory:
        sock.sendall(
            head(RESOLVE, {"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
        )
        started = time.monotonic()
        reply, at_answer, sent = stream(sock, STREAMED)
        elapsed = time.monotonic() - started
    assert reply is not None, f"no answer after {sent} bytes"
    assert_problem(reply, 413, "body-too-large")
    memory.record(
        "chunked 64 MiB",
        sent_when_answered_mib=round(at_answer / MiB, 2),
        sent_in_all_mib=round(sent / MiB, 2),
        seconds=round(elapsed, 2),
    )
    assert memory.growth < bound(LIMIT), MEASURED["chunked 64 MiB"]
    assert_ready(service)


# --- (c) compression bombs ---


def _gzip_bomb(inflated: int) -> bytes:
    """A JSON resolve body padded with `inflated` spaces (valid JSON, fully inflated)."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [squeeze.compress(b'{"refs":[')]
    block = b" " * MiB
    for _ in range(inflated // MiB):
        parts.append(squeeze.compress(block))
    parts.append(squeeze.compress(b"]}"))
    parts.append(squeeze.flush())
    return b"".join(parts)


def _zstd_bomb(inflated: int) -> bytes:
    squeeze = zstandard.ZstdCompressor(level=3).compressobj()
    parts = [squeeze.compress(b'{"refs":[')]
    block = b" " * (8 * MiB)
    for _ in range(inflated // (8 * MiB)):
        parts.append(squeeze.compress(block))
    parts.append(squeeze.compress(b"]}"))
    parts.append(squeeze.flush())
    return b"".join(parts)


BOMBS: Final = {"gzip": (_gzip_bomb, 256 * MiB), "zstd": (_zstd_bomb, 1024 * MiB)}


@pytest.mark.parametrize("coding", sorted(BOMBS))
def test_a_compression_bomb_is_refused_with_bounded_memory(service: Service, coding: str) -> None:
    build, inflated = BOMBS[coding]
    bomb = build(inflated)
    assert len(bomb) < LIMIT  # it passes the body limit: only inflating can stop it
    headers = {"Content-Type": "application/json", "Content-Encoding": coding}
    exchange(service, RESOLVE, build(4 * MiB), headers)  # warm up
    with PeakRss(service.process.pid) as memory:
        started = time.monotonic()
        reply = exchange(service, RESOLVE, bomb, headers)
        elapsed = time.monotonic() - started
    problem = assert_problem(reply, 413, "decompressed-too-large")
    assert problem["limit"] == INFLATED_LIMIT
    memory.record(
        f"{coding} bomb",
        compressed_kib=round(len(bomb) / 1024, 1),
        inflates_to_mib=inflated // MiB,
        seconds=round(elapsed, 3),
    )
    assert memory.growth < bound(INFLATED_LIMIT), MEASURED[f"{coding} bomb"]
    assert elapsed < 5
    assert_ready(service)


# --- (d) nesting ---


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


NESTED: Final[list[tuple[str, str, bytes, str]]] = [
    ("json arrays", RESOLVE, b"[" * 100 + b"]" * 100, "application/json"),
    (
        "json args",
        REGISTER,
        json.dumps(
            {"invocations": [{"name": "t", "args": _nested(DEPTH + 1), "result": 1}]}
        ).encode(),
        "application/json",
    ),
    (
        "half a megabyte of brackets",
        RESOLVE,
        b"[" * (LIMIT // 2 - 1) + b"]" * (LIMIT // 2 - 1),
        "application/json",
    ),
    ("unclosed brackets", RESOLVE, b"[" * (LIMIT - 1), "application/json"),
    (
        "msgpack",
        REGISTER,
        msgpack.packb({"invocations": [{"name": "t", "args": _nested(100), "result": 1}]}),
        "application/msgpack",
    ),
]


@pytest.mark.parametrize(
    ("path", "body", "media"), [case[1:] for case in NESTED], ids=[case[0] for case in NESTED]
)
def test_nesting_past_the_depth_limit_is_a_4xx_problem(
    service: Service, path: str, body: bytes, media: str
) -> None:
    started = time.monotonic()
    reply = exchange(service, path, body, {"Content-Type": media})
    elapsed = time.monotonic() - started
    if body.startswith(b"[" * 100) and not body.endswith(b"]"):
        # Unclosed: malformed or too deep, whichever the parser meets first; both are 4xx.
        assert 400 <= reply.status < 500
        assert reply.headers["content-type"] == PROBLEM
    else:
        problem = assert_problem(reply, 422, "nesting-too-deep")
        assert f"deeper than {DEPTH}" in problem["detail"]
    assert elapsed < 3, elapsed
    assert_ready(service)


# --- (e) bodies that are not what they say ---

RESOLVE_BODY: Final = json.dumps({"refs": []}).encode()

MISLABELLED: Final[list[tuple[str, bytes, dict[str, str], int, str, str]]] = [
    # (name, body, headers, status, slug, a phrase of the detail)
    (
        "plain JSON labelled gzip",
        RESOLVE_BODY,
        {"Content-Type": "application/json", "Content-Encoding": "gzip"},
        400,
        "malformed-body",
        "gzip",
    ),
    (
        "plain JSON labelled zstd",
        RESOLVE_BODY,
        {"Content-Type": "application/json", "Content-Encoding": "zstd"},
        400,
        "malformed-body",
        "zstd",
    ),
    (
        "zstd labelled gzip",
        zstandard.compress(RESOLVE_BODY),
        {"Content-Type": "application/json", "Content-Encoding": "gzip"},
        400,
        "malformed-body",
        "gzip",
    ),
    (
        "gzip without Content-Encoding",
        gzip.compress(RESOLVE_BODY),
        {"Content-Type": "application/json"},
        400,
        "malformed-body",
        "UTF-8",
    ),
    (
        "invalid UTF-8 JSON",
        b'{"refs": ["\xc3\x28"]}',
        {"Content-Type": "application/json"},
        400,
        "malformed-body",
        "UTF-8",
    ),
    (
        "Latin-1 JSON",
        '{"refs": ["caf\u00e9"]}'.encode("latin-1"),
        {"Content-Type": "application/json; charset=utf-8"},
        400,
        "malformed-body",
        "UTF-8",
    ),
    (
        "msgpack labelled JSON",
        msgpack.packb({"refs": []}),
        {"Content-Type": "application/json"},
        400,
        "malformed-body",
        "UTF-8",
    ),
    (
        "JSON labelled msgpack",
        RESOLVE_BODY,
        {"Content-Type": "application/msgpack"},
        400,
        "malformed-body",
        "msgpack",
    ),
    (
        "gzip of msgpack labelled JSON",
        gzip.compress(msgpack.packb({"refs": []})),
        {"Content-Type": "application/json", "Content-Encoding": "gzip"},
        400,
        "malformed-body",
        "UTF-8",
    ),
    (
        "unknown Content-Encoding",
        RESOLVE_BODY,
        {"Content-Type": "application/json", "Content-Encoding": "br"},
        415,
        "unsupported-media-type",
        "gzip, zstd",
    ),
    (
        "stacked Content-Encoding",
        gzip.compress(gzip.compress(RESOLVE_BODY)),
        {"Content-Type": "application/json", "Content-Encoding": "gzip, gzip"},
        415,
        "unsupported-media-type",
        "single encoding",
    ),
]


@pytest.mark.parametrize(
    ("body", "headers", "status", "slug", "phrase"),
    [case[1:] for case in MISLABELLED],
    ids=[case[0] for case in MISLABELLED],
)
def test_wrongly_encoded_bodies_are_4xx_problems(
    service: Service, body: bytes, headers: dict[str, str], status: int, slug: str, phrase: str
) -> None:
    reply = exchange(service, RESOLVE, body, headers)
    problem = assert_problem(reply, status, slug)
    assert phrase in problem["detail"], problem["detail"]


# --- (f) a body cut short ---


def _log_since(service: Service, offset: int) -> str:
    return service.output()[offset:]


@pytest.mark.parametrize("ending", ["half-close", "close", "reset"])
def test_a_truncated_body_harms_nothing(service: Service, ending: str) -> None:
    """Content-Length promises 10000 bytes, 100 arrive, then the client half-closes, closes
    or resets. The server neither crashes nor hangs, answers the next request at once, and
    does not log the client's departure as a failure of its own."""
    time.sleep(0.05)
    offset = len(service.output())
    sock = connect(service)
    sock.sendall(
        head(RESOLVE, {"Content-Type": "application/json", "Content-Length": "10000"})
        + b'{"refs": ['
        + b" " * 90
    )
    time.sleep(0.05)  # the server has read the headers and started the body
    if ending == "half-close":
        sock.shutdown(socket.SHUT_WR)
        started = time.monotonic()
        reply = read_reply(sock, timeout=5)  # the server closes, or answers with a 4xx
        assert time.monotonic() - started < 5
        assert reply is None or 400 <= reply.status < 500, reply
    elif ending == "reset":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()
    assert_ready(service, within=2)
    reply = exchange(service, RESOLVE, RESOLVE_BODY, {"Content-Type": "application/json"})
    assert reply.status == 200
    assert reply.json() == {"invocations": {}, "missing": []}
    time.sleep(0.2)  # let the server finish with the dead request and log it
    log = _log_since(service, offset)
    assert "Traceback" not in log, log[-3000:]
    assert "ClientDisconnect" not in log, log[-3000:]
    assert service.process.poll() is None


def test_a_stalled_body_does_not_hold_up_other_requests(service: Service) -> None:
    stalled = connect(service)
    stalled.sendall(
        head(RESOLVE, {"Content-Type": "application/json", "Content-Length": "10000"}) + b"{"
    )
    try:
        for _ in range(5):
            assert assert_ready(service, within=1) < 1
            reply = exchange(service, RESOLVE, RESOLVE_BODY, {"Content-Type": "application/json"})
            assert reply.status == 200
    finally:
        stalled.close()
    assert_ready(service)


# --- after all that ---


def test_the_service_is_still_ready_and_serving(service: Service) -> None:
    assert service.process.poll() is None
    assert_ready(service)
    body = json.dumps({"invocations": [{"name": "t", "args": {}, "result": "still here"}]})
    reply = exchange(service, REGISTER, body.encode(), {"Content-Type": "application/json"})
    assert reply.status == 200, reply.body
    assert reply.json()["refs"][0]["new"] in (True, False)
