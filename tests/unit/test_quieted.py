"""`toolref.kit.quieted.Quieted`: a warning that recurs on every request goes out once per
interval, the ones held back counted in the next (before: one line a request while the store
was down or a summarizer's breaker open)."""

from __future__ import annotations

import logging

import pytest

from toolref.kit.quieted import Quieted


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_recurring_warning_goes_out_once_an_interval_counting_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    quiet = Quieted(logging.getLogger("test.quieted"), every=60.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="test.quieted"):
        for n in range(100):
            quiet.warning("the store failed (%s)", f"error {n}")
        assert [r.getMessage() for r in caplog.records] == ["the store failed (error 0)"]
        clock.now += 59.0
        quiet.warning("the store failed (%s)", "error 100")
        assert len(caplog.records) == 1
        clock.now += 2.0
        quiet.warning("the store failed (%s)", "error 101")
        assert caplog.records[-1].getMessage() == (
            "the store failed (error 101) (100 more like it in the last 61 s not logged)"
        )
        assert caplog.records[-1].levelno == logging.WARNING
        clock.now += 61.0
        quiet.warning("the store failed (%s)", "error 102")  # none held: said as it is
        assert caplog.records[-1].getMessage() == "the store failed (error 102)"


def test_each_kind_has_its_own_interval(caplog: pytest.LogCaptureFixture) -> None:
    quiet = Quieted(logging.getLogger("test.quieted"), clock=Clock())
    with caplog.at_level(logging.WARNING, logger="test.quieted"):
        quiet.warning("recipe %s not kept: %s", "a", "down")
        quiet.warning("summarizer %s not asked for %s: %s", "m", "s", "open")
        quiet.warning("recipe %s not kept: %s", "b", "down")
    assert [r.getMessage() for r in caplog.records] == [
        "recipe a not kept: down",
        "summarizer m not asked for s: open",
    ]
