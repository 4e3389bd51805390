"""The connection limit, against a real `toolref-server serve` process over raw sockets:
idle connections past it make room for new ones, and when every connection is busy a new
request is answered 503 problem+json (`/healthz` still 200)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from tests.support.processes import Service
from toolref_server.http.connection_limits import connection_budget
from toolref_server.settings import Settings

from ..sockets import connect, read_reply
from .wire import (
    Attack,
    assert_problem,
    closed_without_answer,
    cost,
    exchange,
    head,
    post,
    small_request,
    start_service,
)

pytestmark = [pytest.mark.engine, pytest.mark.slow]

LIMIT = 50


@pytest.fixture(scope="module")
def service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    # Deadlines far longer than the tests: what closes connections here is the limit.
    running = start_service(
        request,
        tmp_path_factory.mktemp("connections") / "data",
        TOOLREF_MAX_CONNECTIONS=str(LIMIT),
        TOOLREF_HEADER_TIMEOUT="60",
        TOOLREF_BODY_TIMEOUT="60",
    )
    yield running
    running.stop()


def open_connections(service: Service) -> int:
    """The service's own count (`toolref_connections_open`), the scrape's included."""
    reply = exchange(service, head("/metrics"))
    assert reply is not None
    match = re.search(rb"^toolref_connections_open (\S+)$", reply.body, re.MULTILINE)
    assert match is not None, reply.body[:500]
    return int(float(match[1]))


def test_idle_connections_past_the_limit_make_room(service: Service) -> None:
    with ExitStack() as stack:
        idle = [stack.enter_context(connect(service)) for _ in range(4 * LIMIT)]
        time.sleep(0.5)
        # The oldest were closed, without an answer, to make room for the newer ones.
        assert closed_without_answer(idle[0], timeout=5)
        assert open_connections(service) <= LIMIT + 1
        small_request(service)  # answered at once
    attack = Attack(lambda a: _hold_idle(a, service))
    # a request on its way when its connection is chosen may be closed: sent again
    cost(service, attack, f"idle connections at {LIMIT} open", bound=10, again=True)


def _hold_idle(attack: Attack, service: Service, seconds: float = 0.5) -> None:
    socks = attack.connect(service, LIMIT)
    attack.stop.wait(seconds)
    for sock in socks:
        sock.close()


def test_a_flood_of_new_connections_never_closes_one_whose_request_is_waiting(
    service: Service,
) -> None:
    """New connections arrive in bursts far past the limit: each burst is accepted before
    any of its connections is read, so a client whose request is already in the kernel's
    buffer looks as idle as the flood around it. It is not the one closed (before that
    check, 13 of 300 such requests in a harsher flood were closed unanswered).

    One whose request is still on its way when its connection is chosen (accepted, nothing
    in the kernel's buffer yet: the client thread not yet scheduled to send) looks idle
    and may be: on two loaded cores, one of 150 was, about once in five runs, and two once
    (stop 58, the suite's other worker busy). So at most two here, which the check's
    absence (some 6 of 150) still fails."""
    attack = Attack(lambda a: _hold_idle(a, service, 0.05), threads=4)
    with attack.running():
        answered = [
            exchange(service, post("/v1/invocations:findMissing", b'{"refs": []}'))
            for _ in range(150)
        ]
    statuses = [reply.status if reply is not None else None for reply in answered]
    assert statuses.count(None) <= 2, statuses
    assert all(status in (200, None) for status in statuses), statuses
    assert attack.opened > 10 * LIMIT


def test_when_every_connection_is_busy_new_requests_get_503(service: Service) -> None:
    with ExitStack() as stack:
        # Every connection busy: each has sent a head and is uploading a large body.
        for _ in range(LIMIT):
            sock = stack.enter_context(connect(service))
            sock.sendall(post("/v1/invocations", b"{", {"Content-Length": "1000000"}))
        time.sleep(0.5)
        reply = exchange(service, post("/v1/invocations:findMissing", b'{"refs": []}'))
        problem = assert_problem(reply, 503, "overloaded")
        assert reply is not None
        assert reply.headers["retry-after"].isdigit()
        assert reply.headers["connection"] == "close"
        assert problem["limit"] == LIMIT
        assert "TOOLREF_MAX_CONNECTIONS" in problem["detail"]
        health = exchange(service, head("/healthz"))  # liveness stays answered
        assert health is not None
        assert health.status == 200
    # The busy connections gone, requests are served again.
    time.sleep(0.3)
    small_request(service)


def test_a_refused_connection_is_closed_after_its_answer(service: Service) -> None:
    with ExitStack() as stack:
        for _ in range(LIMIT):
            sock = stack.enter_context(connect(service))
            sock.sendall(post("/v1/invocations", b"{", {"Content-Length": "1000000"}))
        time.sleep(0.5)
        with connect(service) as sock:
            sock.sendall(head("/healthz", close=False))
            reply = read_reply(sock)
            assert reply is not None
            assert reply.status == 200
            assert closed_without_answer(sock, timeout=5)


def test_the_limit_fits_the_open_files_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolref_server.http import connection_limits

    monkeypatch.setattr(connection_limits, "open_files_limit", lambda: 1024)
    settings = Settings(max_connections=5000, redis_max_connections=64)
    assert connection_budget(settings) == 1024 - 64 - 64
    assert connection_budget(Settings(max_connections=100)) == 100
