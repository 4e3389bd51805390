"""The HTTP layer against a real `toolref-server serve` process, over raw sockets: heads and
bodies that come too slowly or never, idle connections, and requests that are not HTTP.

Deadlines are short here (1 s) so the tests are quick; the defaults are in README.md. Each
refusal is application/problem+json where an answer is still possible; each attack is
measured by what it costs a small request sent meanwhile (`wire.cost`)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from tests.support.processes import Service

from ..sockets import connect, read_reply
from .wire import (
    Attack,
    assert_problem,
    closed_without_answer,
    cost,
    exchange,
    head,
    post,
    start_service,
)

pytestmark = [pytest.mark.engine, pytest.mark.slow]

HEADER_TIMEOUT = 1.0
BODY_TIMEOUT = 1.0
MIN_RATE = 2_000  # bytes per second
KEEP_ALIVE = 1
SEND_TIMEOUT = 1.0
# The server's timers and this process's clock are two clocks: a deadline may be seen to
# fire a little early from here. Waits are polled to a generous bound, never slept once.
CLOCK_SLACK = 0.05
PATIENCE = 15.0


@pytest.fixture(scope="module")
def service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    running = start_service(
        request,
        tmp_path_factory.mktemp("http") / "data",
        TOOLREF_HEADER_TIMEOUT=str(HEADER_TIMEOUT),
        TOOLREF_BODY_TIMEOUT=str(BODY_TIMEOUT),
        TOOLREF_BODY_MIN_RATE=str(MIN_RATE),
        TOOLREF_KEEP_ALIVE_TIMEOUT=str(KEEP_ALIVE),
        TOOLREF_SEND_TIMEOUT=str(SEND_TIMEOUT),
    )
    yield running
    running.stop()


# --- requests that are not HTTP -------------------------------------------------------------

MALFORMED = {
    "NUL in a header value": b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-A: a\x00b\r\n\r\n",
    "NUL in the path": b"GET /heal\x00thz HTTP/1.1\r\nHost: localhost\r\n\r\n",
    "space in the path": b"GET /a b HTTP/1.1\r\nHost: localhost\r\n\r\n",
    "no version": b"GET /healthz\r\nHost: localhost\r\n\r\n",
    "not HTTP at all": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40 + b"\r\n\r\n",
    "header without a colon": b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nnocolon\r\n\r\n",
    "bare LF in a value": b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-A: a\rb\r\n\r\n",
    "letters in Content-Length": b"POST /v1/invocations HTTP/1.1\r\nHost: localhost\r\n"
    b"Content-Length: 12a\r\n\r\n",
    "Content-Length of 4,301 digits": b"POST /v1/invocations HTTP/1.1\r\nHost: localhost\r\n"
    b"Content-Length: " + b"9" * 4301 + b"\r\n\r\n",
    "two Content-Lengths": b"POST /v1/invocations HTTP/1.1\r\nHost: localhost\r\n"
    b"Content-Length: 1\r\nContent-Length: 2\r\n\r\n",
    "Transfer-Encoding gzip": b"POST /v1/invocations HTTP/1.1\r\nHost: localhost\r\n"
    b"Transfer-Encoding: gzip\r\n\r\n",
    "bad chunk size": b"POST /v1/invocations HTTP/1.1\r\nHost: localhost\r\n"
    b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",
}


@pytest.mark.parametrize("raw", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_request_is_a_problem(service: Service, raw: bytes) -> None:
    problem = assert_problem(exchange(service, raw), 400, "malformed-request")
    assert "not valid HTTP/1.1" in problem["detail"]


@pytest.mark.parametrize("whole", [True, False], ids=["in one piece", "in parts"])
def test_a_head_over_the_limit_is_a_431_problem(service: Service, whole: bool) -> None:
    start, rest = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-A: " + b"a" * 20_000, b"\r\n\r\n"
    with connect(service) as sock:
        sock.sendall(start + rest if whole else start)
        if not whole:
            time.sleep(0.1)  # the incomplete head is refused once past the limit
            with contextlib.suppress(OSError):
                sock.sendall(rest)
        problem = assert_problem(read_reply(sock), 431, "headers-too-large")
    assert "16384" in problem["detail"]


# --- deadlines --------------------------------------------------------------------------------


def test_a_head_that_never_ends_is_a_408_problem(service: Service) -> None:
    with connect(service) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")  # no empty line
        problem = assert_problem(read_reply(sock), 408, "request-timeout")
        elapsed = time.monotonic() - started
    assert elapsed >= HEADER_TIMEOUT - CLOCK_SLACK
    assert "TOOLREF_HEADER_TIMEOUT" in problem["detail"]


def test_a_head_sent_byte_by_byte_is_cut_at_its_deadline(service: Service) -> None:
    raw = head("/healthz")
    with connect(service) as sock:
        started = time.monotonic()
        sent = 0
        for byte in raw:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break  # closed
            sent += 1
            time.sleep(0.05)
            if time.monotonic() - started > 3 * HEADER_TIMEOUT:
                break
        reply = read_reply(sock)
    assert sent < len(raw)
    assert_problem(reply, 408, "request-timeout")


def test_an_idle_socket_is_closed_without_an_answer(service: Service) -> None:
    with connect(service) as sock:
        started = time.monotonic()
        assert closed_without_answer(sock)
        assert time.monotonic() - started >= HEADER_TIMEOUT - CLOCK_SLACK


def test_a_body_shorter_than_its_content_length_is_a_408_problem(service: Service) -> None:
    body = b'{"refs": []}'
    raw = post("/v1/invocations:findMissing", body, {"Content-Length": str(len(body) + 10)})
    with connect(service) as sock:
        started = time.monotonic()
        sock.sendall(raw)
        problem = assert_problem(read_reply(sock), 408, "request-timeout")
        elapsed = time.monotonic() - started
    assert elapsed >= BODY_TIMEOUT - CLOCK_SLACK
    assert f"{len(body)} of the {len(body) + 10} declared bytes" in problem["detail"]


def test_a_body_dripping_below_the_minimum_rate_is_cut(service: Service) -> None:
    # 400 bytes per second, a fifth of the minimum: cut soon after the first second.
    size = 100_000
    raw = post("/v1/invocations", b"", {"Content-Length": str(size)})
    with connect(service) as sock:
        sock.sendall(raw)
        started, sent = time.monotonic(), 0
        try:
            while sent < size and time.monotonic() - started < 10:
                sock.sendall(b" " * 20)
                sent += 20
                time.sleep(0.05)
        except OSError:
            pass  # cut
        reply = read_reply(sock)
    problem = assert_problem(reply, 408, "request-timeout")
    assert sent < 2 * MIN_RATE, sent
    assert "TOOLREF_BODY_MIN_RATE" in problem["detail"]


def test_a_steady_body_longer_than_the_body_timeout_goes_through(service: Service) -> None:
    # Twice the minimum rate for 2.5 body timeouts: slow, but not a trickle.
    invocation = b'{"name": "t", "args": {}, "result": "' + b"x" * 10_000 + b'"}'
    body = b'{"invocations": [' + invocation + b"]}"
    raw = post("/v1/invocations", body)
    step = MIN_RATE * 2 // 10
    with connect(service) as sock:
        started = time.monotonic()
        for start in range(0, len(raw), step):
            sock.sendall(raw[start : start + step])
            time.sleep(0.1)
        reply = read_reply(sock)
        elapsed = time.monotonic() - started
    assert reply is not None
    assert reply.status == 200, reply.body[:300]
    assert elapsed > 2 * BODY_TIMEOUT


def test_an_idle_keep_alive_connection_is_closed(service: Service) -> None:
    with connect(service) as sock:
        sock.sendall(head("/healthz", close=False))
        reply = read_reply(sock)
        assert reply is not None
        assert reply.status == 200
        answered = time.monotonic()
        assert closed_without_answer(sock)
        assert time.monotonic() - answered >= KEEP_ALIVE * 0.9


def test_a_keep_alive_connection_serves_a_second_request(service: Service) -> None:
    with connect(service) as sock:
        for _ in range(2):
            sock.sendall(head("/healthz", close=False))
            reply = read_reply(sock)
            assert reply is not None
            assert reply.status == 200
            time.sleep(KEEP_ALIVE / 3)


def closed_for(service: Service, reason: str) -> int:
    reply = exchange(service, head("/metrics"))
    assert reply is not None
    pattern = rb'^toolref_connections_closed_total\{reason="' + reason.encode() + rb'"\} (\S+)$'
    match = re.search(pattern, reply.body, re.MULTILINE)
    return int(float(match[1])) if match else 0


def open_connections(service: Service) -> int:
    reply = exchange(service, head("/metrics"))
    assert reply is not None
    match = re.search(rb"^toolref_connections_open (\S+)$", reply.body, re.MULTILINE)
    assert match is not None
    return int(float(match[1]))


@pytest.fixture(scope="module")
def big_refs(service: Service) -> list[str]:
    """100 refs of 30 KB each: resolving them all is a 4 MB answer."""
    invocations = [
        {"name": "t", "args": {"n": n}, "result": base64.b64encode(os.urandom(30_000)).decode()}
        for n in range(100)
    ]
    reply = exchange(
        service, post("/v1/invocations", json.dumps({"invocations": invocations}).encode())
    )
    assert reply is not None
    assert reply.status == 200
    return [item["ref"] for item in reply.json()["refs"]]


def unread_answer(service: Service, refs: list[str]) -> socket.socket:
    """A connection that asks for a 4 MB answer and reads none of it."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", service.port))
    sock.sendall(post("/v1/invocations:resolve", json.dumps({"refs": refs}).encode()))
    return sock


def test_an_answer_left_unread_is_dropped_after_the_send_timeout(
    service: Service, big_refs: list[str]
) -> None:
    before, baseline = closed_for(service, "send-timeout"), open_connections(service)
    readers = [unread_answer(service, big_refs) for _ in range(10)]
    try:
        assert eventually(lambda: open_connections(service) >= baseline + 10)  # held
        # Dropped, with the answers buffered for them: the server holds none of it now.
        assert eventually(lambda: closed_for(service, "send-timeout") == before + 10)
        assert eventually(lambda: open_connections(service) == baseline)
    finally:
        for sock in readers:
            sock.close()


# --- what the attacks cost everyone else -------------------------------------------------------


def slowloris(service: Service) -> Attack:
    """Connections that send a head a few bytes at a time, and never finish it."""

    def work(attack: Attack) -> None:
        socks = attack.connect(service, 25)
        try:
            for piece in (b"GET /healthz HTTP/1.1\r\n", b"Host: localhost\r\n", b"X-A: a\r\n") * 20:
                if attack.stop.is_set():
                    break
                for sock in socks:
                    sock.sendall(piece)
                time.sleep(0.1)
        finally:
            for sock in socks:
                sock.close()

    return Attack(work)


def drip(service: Service) -> Attack:
    """Uploads that declare 1 MB and send a few bytes at a time."""

    def work(attack: Attack) -> None:
        socks = attack.connect(service, 25)
        try:
            for sock in socks:
                sock.sendall(post("/v1/invocations", b"", {"Content-Length": "1000000"}))
            for _ in range(40):
                if attack.stop.is_set():
                    break
                for sock in socks:
                    sock.sendall(b" " * 10)
                time.sleep(0.1)
        finally:
            for sock in socks:
                sock.close()

    return Attack(work)


def garbage(service: Service) -> Attack:
    """Malformed requests, one after the other, as fast as the server answers them."""

    def work(attack: Attack) -> None:
        exchange(service, MALFORMED["NUL in a header value"])
        attack.count()

    return Attack(work, threads=1)


def idle(service: Service) -> Attack:
    """Connections that send nothing at all."""

    def work(attack: Attack) -> None:
        socks = attack.connect(service, 50)
        attack.stop.wait(2 * HEADER_TIMEOUT)
        for sock in socks:
            sock.close()

    return Attack(work)


# Attacks that only wait cost the loop almost nothing; one that keeps the server parsing
# garbage takes a share of its CPU (and the test's threads take another), so its bound is
# wider. A locked-out client would wait a deadline: hundreds of times the baseline.
ATTACKS = [(slowloris, 10), (drip, 10), (idle, 10), (garbage, 25)]


@pytest.mark.latency
@pytest.mark.parametrize(("attack", "bound"), ATTACKS, ids=[a.__name__ for a, _ in ATTACKS])
def test_small_requests_stay_prompt_during_the_attack(
    service: Service, attack: Callable[[Service], Attack], bound: float
) -> None:
    cost(service, attack(service), attack.__name__, bound)


def test_a_connection_that_is_reset_mid_head_leaves_no_trace(service: Service) -> None:
    for _ in range(20):
        sock = connect(service)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()  # RST
    reply = exchange(service, head("/readyz"))
    assert reply is not None
    assert reply.status == 200
    assert "Traceback" not in service.output()


@pytest.mark.latency
def test_small_requests_stay_prompt_while_answers_go_unread(
    service: Service, big_refs: list[str]
) -> None:
    """Connections that ask for a 4 MB answer each and never read it: the service buffers
    what the socket does not take, until the send timeout drops it."""

    def work(attack: Attack) -> None:
        socks = [unread_answer(service, big_refs) for _ in range(5)]
        attack.count(len(socks))
        attack.stop.wait(2 * SEND_TIMEOUT)
        for sock in socks:
            sock.close()

    cost(service, Attack(work), "answers left unread", bound=10)


def eventually(holds: Callable[[], bool]) -> bool:
    """Whether `holds()` becomes true within `PATIENCE` seconds (polled): a server's timer
    fires on its own clock, later on a loaded machine, never at a time a test can name."""
    deadline = time.monotonic() + PATIENCE
    while not holds():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
