"""Requests in flight, against a real `toolref-server serve` process over raw sockets: past
TOOLREF_MAX_REQUESTS_IN_FLIGHT a request is answered 503 `overloaded` at once, `/healthz`
still 200, and the slots come back when the requests holding them end."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from tests.support.processes import Service

from ..sockets import connect, read_reply
from .wire import assert_problem, exchange, head, post, small_request, start_service

pytestmark = [pytest.mark.engine, pytest.mark.slow]

IN_FLIGHT = 10


@pytest.fixture(scope="module")
def service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    running = start_service(
        request,
        tmp_path_factory.mktemp("requests") / "data",
        TOOLREF_MAX_REQUESTS_IN_FLIGHT=str(IN_FLIGHT),
        TOOLREF_BODY_TIMEOUT="60",
    )
    yield running
    running.stop()


def refused_seconds(service: Service) -> float:
    started = time.perf_counter()
    reply = exchange(service, post("/v1/invocations:findMissing", b'{"refs": []}'))
    elapsed = time.perf_counter() - started
    problem = assert_problem(reply, 503, "overloaded")
    assert reply is not None
    assert reply.headers["retry-after"].isdigit()
    assert reply.headers["toolref-protocol"] == "2"
    assert problem["limit"] == IN_FLIGHT
    assert "TOOLREF_MAX_REQUESTS_IN_FLIGHT" in problem["detail"]
    return elapsed


@pytest.mark.latency
def test_past_the_limit_requests_are_refused_at_once_and_healthz_answered(
    service: Service,
) -> None:
    alone = statistics.median(small_request(service) for _ in range(7))
    with ExitStack() as stack:
        # IN_FLIGHT requests held in flight: each is uploading a body it never finishes.
        uploads = [stack.enter_context(connect(service)) for _ in range(IN_FLIGHT)]
        for sock in uploads:
            sock.sendall(post("/v1/invocations", b"{", {"Content-Length": "1000000"}))
        time.sleep(0.3)
        refused = statistics.median(refused_seconds(service) for _ in range(7))
        health = exchange(service, head("/healthz"))
        assert health is not None
        assert health.status == 200
        ratio = refused / alone
        print(
            f"\n{IN_FLIGHT} requests in flight: the next refused in {refused * 1000:.2f} ms, "
            f"a small request alone {alone * 1000:.2f} ms ({ratio:.1f}x)"
        )
        assert ratio < 10
        # One ends (the client gives up on its upload): its slot comes back.
        uploads[0].close()
        time.sleep(0.3)
        small_request(service)


def test_slots_come_back_after_answers_and_refusals(service: Service) -> None:
    # Many more requests than slots, one after the other on keep-alive connections: none
    # leaks a slot, refused or not.
    with connect(service) as sock:
        for _ in range(5 * IN_FLIGHT):
            sock.sendall(head("/v1/capabilities", close=False))
            reply = read_reply(sock)
            assert reply is not None
            assert reply.status == 200
    for _ in range(3 * IN_FLIGHT):
        small_request(service)
