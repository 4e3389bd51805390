"""CircuitBreaker: closed -> open -> half-open (one probe) -> closed or open again."""

from __future__ import annotations

import pytest

from toolref.kit.breaker import BreakerState, CircuitBreaker


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def state(breaker: CircuitBreaker) -> BreakerState:
    """The breaker's state now (a call, so mypy does not narrow it across calls)."""
    return breaker.state


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def opened(clock: FakeClock, threshold: int = 3, reset: float = 10.0) -> CircuitBreaker:
    breaker = CircuitBreaker(failure_threshold=threshold, reset_timeout=reset, clock=clock)
    for _ in range(threshold):
        assert breaker.allow()
        breaker.failure()
    assert state(breaker) is BreakerState.OPEN
    return breaker


def test_a_new_breaker_is_closed_and_lets_every_call_through(clock: FakeClock) -> None:
    breaker = CircuitBreaker(failure_threshold=2, reset_timeout=1.0, clock=clock)
    assert state(breaker) is BreakerState.CLOSED
    assert all(breaker.allow() for _ in range(50))
    assert breaker.retry_in() == 0.0


def test_it_opens_after_threshold_consecutive_failures_and_not_before(clock: FakeClock) -> None:
    breaker = CircuitBreaker(failure_threshold=3, reset_timeout=10.0, clock=clock)
    breaker.failure()
    breaker.failure()
    assert state(breaker) is BreakerState.CLOSED
    assert breaker.allow()
    breaker.failure()
    assert state(breaker) is BreakerState.OPEN
    assert not breaker.allow()


def test_a_success_resets_the_failure_count(clock: FakeClock) -> None:
    breaker = CircuitBreaker(failure_threshold=3, reset_timeout=10.0, clock=clock)
    for _ in range(5):  # never three in a row
        breaker.failure()
        breaker.failure()
        breaker.success()
        assert state(breaker) is BreakerState.CLOSED
    breaker.failure()
    breaker.failure()
    assert breaker.allow()
    breaker.failure()
    assert state(breaker) is BreakerState.OPEN


def test_open_refuses_every_call_until_reset_timeout_passes(clock: FakeClock) -> None:
    breaker = opened(clock, reset=10.0)
    assert breaker.retry_in() == pytest.approx(10.0)
    clock.advance(9.99)
    assert state(breaker) is BreakerState.OPEN
    assert not any(breaker.allow() for _ in range(20))
    assert breaker.retry_in() == pytest.approx(0.01)
    clock.advance(0.01)
    assert state(breaker) is BreakerState.HALF_OPEN
    assert breaker.retry_in() == 0.0


def test_half_open_allows_exactly_one_probe(clock: FakeClock) -> None:
    breaker = opened(clock, reset=10.0)
    clock.advance(10.0)
    assert breaker.allow()  # the probe
    assert state(breaker) is BreakerState.HALF_OPEN
    assert [breaker.allow() for _ in range(20)] == [False] * 20
    clock.advance(5.0)  # still waiting for the probe's answer
    assert not breaker.allow()


def test_probe_success_closes_the_breaker(clock: FakeClock) -> None:
    breaker = opened(clock, threshold=3, reset=10.0)
    clock.advance(10.0)
    assert breaker.allow()
    breaker.success()
    assert state(breaker) is BreakerState.CLOSED
    assert all(breaker.allow() for _ in range(10))
    # Closed again with a fresh count: it takes a full threshold to reopen.
    breaker.failure()
    breaker.failure()
    assert state(breaker) is BreakerState.CLOSED
    breaker.failure()
    assert state(breaker) is BreakerState.OPEN


def test_probe_failure_reopens_for_another_full_reset_timeout(clock: FakeClock) -> None:
    breaker = opened(clock, threshold=3, reset=10.0)
    clock.advance(25.0)  # well past the first timeout: the new one counts from the probe
    assert breaker.allow()
    clock.advance(2.0)
    breaker.failure()  # one failure is enough in half-open, whatever the threshold
    assert state(breaker) is BreakerState.OPEN
    assert not breaker.allow()
    assert breaker.retry_in() == pytest.approx(10.0)
    clock.advance(9.9)
    assert not breaker.allow()
    clock.advance(0.1)
    assert breaker.allow()  # the next probe
    assert not breaker.allow()


def test_a_probe_that_never_reports_does_not_keep_it_shut(clock: FakeClock) -> None:
    breaker = opened(clock, reset=10.0)
    clock.advance(10.0)
    assert breaker.allow()  # this probe is cancelled: no success(), no failure()
    clock.advance(9.9)
    assert not breaker.allow()
    clock.advance(0.1)
    assert breaker.allow()  # a new probe, a full reset_timeout after the lost one
    assert not breaker.allow()
    breaker.success()
    assert state(breaker) is BreakerState.CLOSED


def test_reset_timeout_zero_probes_at_once(clock: FakeClock) -> None:
    breaker = CircuitBreaker(failure_threshold=1, reset_timeout=0, clock=clock)
    breaker.failure()
    assert state(breaker) is BreakerState.HALF_OPEN
    assert breaker.allow()
    breaker.failure()
    assert breaker.allow()  # with no timeout, the next call probes again
    breaker.success()
    assert state(breaker) is BreakerState.CLOSED


def test_it_uses_the_monotonic_clock_by_default() -> None:
    breaker = CircuitBreaker(failure_threshold=1, reset_timeout=3600)
    breaker.failure()
    assert not breaker.allow()
    assert 3590 < breaker.retry_in() <= 3600


@pytest.mark.parametrize(("threshold", "reset"), [(0, 1.0), (-1, 1.0), (1, -0.5), (0, -1.0)])
def test_constructor_rejects_impossible_settings(threshold: int, reset: float) -> None:
    with pytest.raises(ValueError, match="failure_threshold") as info:
        CircuitBreaker(failure_threshold=threshold, reset_timeout=reset)
    assert str(threshold) in str(info.value)


@pytest.mark.parametrize(
    ("threshold", "reset"), [(1, float("inf")), (1, float("nan")), (float("nan"), 1.0)]
)
def test_constructor_rejects_settings_that_never_open_or_never_close(
    threshold: float, reset: float
) -> None:
    """NaN compares false and an infinite timeout never passes: such a breaker would never
    open, or once open never probe the registry again."""
    with pytest.raises(ValueError, match="finite") as info:
        CircuitBreaker(failure_threshold=threshold, reset_timeout=reset)  # type: ignore[arg-type]
    assert f"{threshold} and {reset}" in str(info.value)


def test_constructor_accepts_the_edges() -> None:
    breaker = CircuitBreaker(failure_threshold=1, reset_timeout=0)
    assert (breaker.failure_threshold, breaker.reset_timeout) == (1, 0)
    defaults = CircuitBreaker()
    assert (defaults.failure_threshold, defaults.reset_timeout) == (5, 5.0)


def test_retry_in_counts_an_in_flight_probe(clock: FakeClock) -> None:
    breaker = opened(clock, reset=10.0)
    clock.advance(10.0)
    assert breaker.allow()  # the probe goes out
    clock.advance(4.0)
    assert not breaker.allow()
    assert breaker.retry_in() == pytest.approx(6.0)  # the probe's own timeout


def test_an_abandoned_probe_lets_the_next_call_probe_at_once(clock: FakeClock) -> None:
    """A probe that told nothing (never sent: no connection came free) must not hold the
    breaker shut for another cool-down (review: summary model calls)."""
    breaker = opened(clock)
    clock.advance(10.0)
    assert breaker.allow()  # the probe
    assert not breaker.allow()  # one at a time
    breaker.abandon()
    assert state(breaker) is BreakerState.HALF_OPEN
    assert breaker.allow()  # the next call probes, the clock unmoved
    breaker.failure()
    assert state(breaker) is BreakerState.OPEN  # its failure opens it again, as any probe's
    assert breaker.retry_in() == 10.0


def test_an_old_probe_abandoned_leaves_a_newer_one_alone(clock: FakeClock) -> None:
    """A probe outliving its cool-down lets a second probe out; the first one, abandoned
    then, must not clear the second's place (before: a third call probed beside it)."""
    breaker = opened(clock)
    clock.advance(10.0)
    assert breaker.allow()
    first = breaker.probe
    clock.advance(10.0)  # the first probe hangs past its own timeout
    assert breaker.allow()  # a second probe
    second = breaker.probe
    assert second != first
    breaker.abandon(first)  # the first one ends, never sent
    assert not breaker.allow()  # the second still holds the one place
    breaker.abandon(second)
    assert breaker.allow()  # now the next call probes
