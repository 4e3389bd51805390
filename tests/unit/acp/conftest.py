"""Trackers whose every notification passes the conformance check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.acp.conformance import check
from toolref.acp import ToolCallTracker


class Clock:
    """A hand-driven clock for coalescing tests."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sent() -> list[dict[str, Any]]:
    """Every notification any tracker of this test emitted, in order."""
    return []


@pytest.fixture
def make_tracker(sent: list[dict[str, Any]], clock: Clock) -> Callable[..., ToolCallTracker]:
    def make(**options: Any) -> ToolCallTracker:
        def sink(notification: dict[str, Any]) -> None:
            check(notification)
            sent.append(notification)

        options.setdefault("clock", clock)
        return ToolCallTracker(options.pop("session_id", "sess_1"), sink=sink, **options)

    return make
