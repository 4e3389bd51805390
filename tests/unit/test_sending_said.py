"""`toolref.sending.said`: which edits version a sender writes from what its receiver said
recently (the relay's and the SDK's rule; JS's `edits/said.ts` is tested on the same cases in
client_sdk/js/test/rollback.test.ts). The clock is the caller's: readings passed in."""

from __future__ import annotations

import pytest

from toolref.sending.said import RECENT, Said


def test_the_lowest_recent_below_written_else_the_highest_recent_else_the_last() -> None:
    said = Said()
    assert said.version(0) is None
    said.said(6, 0)
    said.said(5, 1)
    assert said.version(2) == 6  # 5 and 6 write the same bytes: 6's taps kept
    said.said(4, 2)
    assert said.version(3) == 4  # replicas of 4 and 6: what both read
    assert said.version(2 + RECENT) == 4  # nothing recent: the last said
    said.said(6, 10 + RECENT)
    assert said.version(10 + RECENT) == 6  # 4 no longer recent: rolled forward
    said.said(99, 20 + RECENT)  # above the highest this SDK writes: counts as 7
    assert said.version(20 + RECENT) == 6  # 6 (5's bytes) still recent: what both read
    said.said(0, 21 + RECENT)  # below every version, or none: nothing said
    said.said(None, 21 + RECENT)
    assert said.version(21 + RECENT) == 6


def test_an_unreadable_edit_says_the_version_below_its_bytes() -> None:
    """Version 6 writes 5's bytes: refused, 4 is said; down to 1, below which nothing is (a
    refusal there is not a rollback)."""
    said = Said()
    assert said.unreadable(6, 0)
    assert said.version(0) == 4
    assert said.unreadable(2, 1)
    assert said.version(1) == 1
    assert not said.unreadable(1, 2)
    assert said.version(2) == 1


def test_a_sender_of_a_lower_version_counts_higher_ones_as_its_own() -> None:
    """`highest`: what a sender writes at most (the JS SDK's 6, replayed by its vectors): a
    receiver's 7 counts as 6, and an edit for 7 refused steps down below 6's bytes."""
    said = Said(highest=6)
    said.said(7, 0)
    assert said.version(0) == 6
    assert said.unreadable(7, 1)  # written as 6, so as 5's bytes: 4 is said
    assert said.version(1) == 4
    assert Said().unreadable(7, 0)
    assert Said().unreadable(8, 0)  # a rolled-back receiver of 7: 7 is said
    with pytest.raises(ValueError, match="edits version 9"):
        Said(highest=9)
