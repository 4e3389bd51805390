"""`toolref.asgi.budget`: one process's bytes of request bodies in flight, charged by accounts,
refused at once past the limit, released whole."""

from __future__ import annotations

import threading

import pytest

from toolref.asgi.budget import Budget, charge, shared
from toolref.wire.errors import OverloadedError, QuotaExceededError


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


# --- a tenant's share (review: one tenant's bodies) ---


def test_past_its_share_a_tenant_is_refused_429_while_another_tenant_is_served() -> None:
    budget = Budget(1000, setting="TOOLREF_ALL", per_tenant=400, tenant_setting="TOOLREF_ONE")
    a1, a2, b, anyone = (
        budget.account("a"),
        budget.account("a"),
        budget.account("b"),
        budget.account(),
    )
    a1.charge(300)
    a2.charge(100)
    with pytest.raises(QuotaExceededError) as caught:
        a2.charge(1)
    b.charge(400)
    anyone.charge(200)  # no tenant: the budget alone
    assert (budget.of("a"), budget.of("b"), budget.in_flight) == (400, 400, 1000)
    error = caught.value
    assert (error.status, error.slug) == (429, "quota-exceeded")
    assert error.extra == {"quota": "inflatedBytesInFlight", "limit": 400}
    assert error.http_headers() == {"Retry-After": "1"}
    assert "TOOLREF_ONE" in error.detail
    assert "TOOLREF_ALL" in error.detail
    a1.close()
    a2.charge(300)  # room again once another of its requests ended
    for account in (a2, b, anyone):
        account.close()
    assert budget.in_flight == 0
    assert budget.tenants_holding == 0  # no entry outlives a tenant's bytes


def test_an_account_bound_late_counts_what_it_holds_for_its_tenant() -> None:
    """The registry's REST routes: the account opens before the key is checked."""
    budget = Budget(1000, per_tenant=500)
    with budget.account() as account:
        account.charge(100)
        account.bind("a")
        account.bind("b")  # bound once: stays a's
        assert budget.of("a") == 100
        with pytest.raises(QuotaExceededError):
            account.charge(401)
        account.charge(400)
    assert budget.tenants_holding == 0
    closed = budget.account()
    closed.close()
    closed.bind("a")  # a closed account stays as it is
    assert budget.tenants_holding == 0


def test_a_share_must_fit_the_budget() -> None:
    with pytest.raises(ValueError, match=r"share of 2000 bytes \(TOOLREF_ONE\).*TOOLREF_ALL"):
        Budget(1000, setting="TOOLREF_ALL", per_tenant=2000, tenant_setting="TOOLREF_ONE")


def test_threads_of_one_tenant_never_pass_its_share() -> None:
    budget = Budget(64 * 1024, per_tenant=16 * 1024)
    start = threading.Barrier(8)

    def work(tenant: str) -> None:
        start.wait()
        for _ in range(2000):
            with budget.account(tenant) as account:
                try:
                    account.charge(1024)
                    account.charge(1024)
                except QuotaExceededError:
                    pass
                assert budget.of(tenant) <= 16 * 1024

    threads = [threading.Thread(target=work, args=("ab"[n % 2],)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert budget.in_flight == 0
    assert budget.tenants_holding == 0
