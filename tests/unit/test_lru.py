"""`toolref.kit.lru.LRU`: bounded by its entries and by its values' total size."""

from __future__ import annotations

from toolref.kit.lru import LRU


def test_a_value_larger_than_the_size_bound_is_not_kept_and_drops_nothing_else() -> None:
    dropped: list[str] = []
    lru: LRU[str, bytes] = LRU(10, 100, len, lambda key, _: dropped.append(key))
    lru.put("a", b"x" * 40)
    lru.put("b", b"x" * 40)
    lru.put("huge", b"x" * 101)
    assert list(lru) == ["a", "b"]
    assert lru.size == 80
    assert dropped == ["huge"]


def test_an_oversized_value_replacing_a_kept_one_leaves_neither() -> None:
    lru: LRU[str, bytes] = LRU(10, 100, len)
    lru.put("a", b"x" * 40)
    lru.put("a", b"x" * 101)
    assert "a" not in lru
    assert lru.size == 0


def test_the_size_counts_each_value_as_weighed_when_kept() -> None:
    """A value whose weight changes while kept (a list that grows) gives back what it was
    counted for: the total never drifts, so the bound keeps holding."""
    lru: LRU[str, list[int]] = LRU(10, 100, len)
    grows = [1] * 10
    lru.put("grows", grows)
    lru.put("other", [1] * 10)
    grows.extend([1] * 50)
    lru.pop("grows")
    assert lru.size == 10
    lru.put("big", [1] * 90)
    assert list(lru) == ["other", "big"]
    assert lru.size == 100


def test_both_bounds_drop_the_least_recently_used_first() -> None:
    lru: LRU[str, bytes] = LRU(2, 100, len)
    lru.put("a", b"1")
    lru.put("b", b"2")
    assert lru.get("a") == b"1"
    lru.put("c", b"3")
    assert list(lru) == ["a", "c"]
    lru.put("d", b"x" * 98)
    assert list(lru) == ["c", "d"]
    assert lru.size == 99
