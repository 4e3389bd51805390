"""`toolref.asgi.budget`: one process's bytes of request bodies in flight, charged by accounts,
refused at once past the limit, released whole."""

from __future__ import annotations

import threading

import pytest

from toolref.asgi.budget import Budget, charge, shared
from toolref.wire.errors import OverloadedError


def test_charges_add_up_and_a_closed_account_gives_everything_back() -> None:
    budget = Budget(1000, setting="TEST_SETTING")
    with budget.account() as first, budget.account() as second:
        first.charge(300)
        second.charge(600)
        assert budget.in_flight == 900
        first.charge(100)
        assert budget.in_flight == budget.high_water == 1000
    assert budget.in_flight == 0
    assert budget.high_water == 1000


def test_past_the_limit_a_charge_is_refused_at_once_and_charges_nothing() -> None:
    budget = Budget(1000, setting="TOOLREF_EXAMPLE", retry_after=3)
    holder = budget.account()
    holder.charge(900)
    with budget.account() as refused:
        refused.charge(50)
        with pytest.raises(OverloadedError) as caught:
            refused.charge(51)
        assert refused.charged == 50
        assert budget.in_flight == 950
    error = caught.value
    assert error.status == 503
    assert error.slug == "overloaded"
    assert error.http_headers() == {"Retry-After": "3"}
    assert error.extra == {"limit": 1000}
    assert "TOOLREF_EXAMPLE" in error.detail
    assert "1000" in error.detail
    assert budget.in_flight == 900  # the refused request gave back its 50
    holder.close()
    holder.close()  # idempotent
    assert budget.in_flight == 0


async def test_async_with_releases_on_error() -> None:
    budget = Budget(100)

    async def failing() -> None:
        async with budget.account() as account:
            account.charge(60)
            raise RuntimeError

    with pytest.raises(RuntimeError):
        await failing()
    assert budget.in_flight == 0


def test_a_closed_account_refuses_charges_so_a_late_worker_cannot_leak_them() -> None:
    """A request cancelled while a worker thread inflates its body: the thread's later
    charges would have no one to release them, so they are refused."""
    budget = Budget(100)
    account = budget.account()
    account.charge(10)
    account.close()
    with pytest.raises(OverloadedError, match="ended"):
        account.charge(10)
    assert budget.in_flight == 0


def test_threads_charging_at_once_never_pass_the_limit() -> None:
    budget = Budget(64 * 1024)
    refusals = []
    start = threading.Barrier(8)

    def work() -> None:
        start.wait()
        for _ in range(200):
            with budget.account() as account:
                try:
                    for _ in range(4):
                        account.charge(4096)
                except OverloadedError:
                    refusals.append(1)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert budget.in_flight == 0
    assert budget.high_water <= budget.limit


def test_charge_without_an_account_is_a_no_op_and_bad_limits_are_refused() -> None:
    charge(None, 10**12)
    assert shared.limit >= 96 * 2**20  # the middleware's two default limits together
    with pytest.raises(ValueError, match="SOME_SETTING"):
        Budget(0, setting="SOME_SETTING")
