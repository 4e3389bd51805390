"""Recipe nodes as stored (`toolref_server.storage.recipes`): encoded and read back as they
were, edits kept as ranges and entries and replayed to the same recipe, and bytes no
version wrote read as not held."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.edits.test_edits import EDITS, HEADERS, body_of, conversation, edited
from toolref.edits.edit import diff
from toolref.edits.request import cut
from toolref_server.storage.recipe_cache import RecipeCache
from toolref_server.storage.recipes import Held, RecipeNode, replayed, stored_edit

ENTRIES = st.lists(
    st.one_of(
        st.binary(min_size=16, max_size=16).map(lambda b: b"\x00" + b),
        st.binary(max_size=63).map(lambda b: b"\x01" + b),
    ),
    max_size=20,
)


@given(ENTRIES, st.integers(0, 2**40))
def test_a_snapshot_comes_back_as_written(entries: list[bytes], refreshed: int) -> None:
    node = RecipeNode(None, tuple(entries), (), refreshed)
    assert RecipeNode.decode(node.encode()) == node


@given(st.integers(1, 25), st.integers(0, 10**6), st.lists(EDITS, min_size=1, max_size=8))
@settings(max_examples=100, deadline=None)
def test_edits_stored_replay_to_the_same_recipe(turns: int, seed: int, hows: list[str]) -> None:
    """The chain snapshot -> edit -> edit ... written as a delta node and read back gives
    every recipe of the chain exactly."""
    rng = random.Random(seed)
    messages = conversation(turns, seed)
    first = cut(HEADERS, body_of(messages, {}, "compact").encode(), "messages")
    assert first is not None
    base, edits = first, []
    for how in hows:
        messages = edited(messages, how, rng)
        new = cut(HEADERS, body_of(messages, {}, "compact").encode(), "messages")
        assert new is not None
        ops = diff(base.entries, new.entries, new.segments)
        edits.append(stored_edit(ops, new.entries))
        base = new
    node = RecipeNode("tb_" + "a" * 26, (), tuple(edits), 5)
    read = RecipeNode.decode(node.encode())
    assert read == node
    entries = list(first.entries)
    for edit in read.edits:
        entries = replayed(entries, edit)
    assert entries == base.entries


def test_bytes_no_version_wrote_are_not_a_node() -> None:
    for data in [b"", b"\x00", b"\x01", b"\x01\x80", b"\x01\x81\xa1r\xa1x", b"\x02abc"]:
        assert RecipeNode.decode(data) is None
    good = RecipeNode(None, (b"\x01x",), (), 1).encode()
    assert RecipeNode.decode(good[:-1]) is None
    bad_entry = RecipeNode(None, (b"\x00short",), (), 1).encode()
    assert RecipeNode.decode(bad_entry) is None


def test_the_cache_is_bounded_by_bytes_and_keeps_tenants_apart() -> None:
    cache: RecipeCache[Held] = RecipeCache(1000)
    cache.keep_pieces("a", [(b"1", b"x" * 600), (b"2", b"y" * 600)])
    assert cache.piece("a", b"1") is None  # dropped for the bound
    assert cache.piece("a", b"2") == b"y" * 600
    assert cache.piece("b", b"2") is None
    cache.keep_pieces("a", [(b"3", b"z" * 2000)])  # larger than the bound: not kept
    assert cache.piece("a", b"3") is None
    assert RecipeCache(0).piece("a", b"2") is None
