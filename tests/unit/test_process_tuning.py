"""`toolref.kit.allocator` and `toolref.kit.collector`: the relay's start tunes both (its
turns must not pay for the size of what it remembers, nor page faults for its bodies)."""

from __future__ import annotations

import gc
import sys

import pytest

from toolref.kit import allocator, collector


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's (Linux)")
def test_the_allocator_threshold_is_set_on_glibc() -> None:
    assert allocator.tune() is True  # this machine's C library is glibc


def test_the_collector_is_tuned_once() -> None:
    collector.tune()
    assert gc.get_threshold() == collector.THRESHOLDS
    frozen = gc.get_freeze_count()
    collector.tune()  # the second time freezes nothing more
    assert gc.get_freeze_count() <= frozen
