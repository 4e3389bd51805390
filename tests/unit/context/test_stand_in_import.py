"""A stand-in context editing pins, as `toolref-server cache import` checks it: every one
`stand_in` can write for a summary id passes (whatever the tool's name, arguments, size
and the summary's characters; as text or as any format's result), and a text longer than
the longest one cannot.

Found: import held a stand-in (`stand-in:<summarizer>:<chars>`) to `<chars>`, as a
summary, so each stand-in context editing kept refused its whole export.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolref.formats import FORMATS
from toolref.wire.canonical import digest_of
from toolref.wire.models import MAX_SUMMARY_CHARS
from toolref_server.context.replacing import (
    ARGS_SHOWN,
    NAME_SHOWN,
    PINNED,
    SIZE_DIGITS,
    as_json,
    longest_pinned,
    stand_in,
)
from toolref_server.export import check_item

REF = digest_of({"name": "read", "args": {}, "result": "x", "isError": False}).ref
TTL = 3_600_000
# what JSON writes longest (`\u0000`, a lone surrogate's `\ud800`), a quote, plain text
CHARACTERS = st.sampled_from(["\x00", "\x1f", "\ud800", '"', "\\", "\n", "a", "é", "😀"])


def item(chars: int, text: str, summarizer: str = "extractive") -> list[object]:
    key = f"tr:acme:s:{REF.key}:{PINNED}{summarizer}:{chars}"
    return [key.encode(), text.encode("utf-8"), TTL]


@settings(max_examples=200, deadline=None)
@given(
    chars=st.integers(40, 400),
    name=st.text(CHARACTERS, max_size=2 * NAME_SHOWN),
    args=st.text(CHARACTERS, max_size=2 * ARGS_SHOWN),
    size=st.integers(0, 10**SIZE_DIGITS - 1),
    fill=st.data(),
    text_result=st.sampled_from([f.text_result for f in FORMATS.values()]),
)
def test_every_stand_in_stand_in_writes_passes(
    chars: int,
    name: str,
    args: str,
    size: int,
    fill: st.DataObject,
    text_result: Callable[[str], Any],
) -> None:
    summary = fill.draw(st.text(CHARACTERS, max_size=chars), label="summary")
    pinned = as_json(text_result(stand_in(name, args, size, summary)))
    assert check_item(item(chars, pinned), "acme") is None


@pytest.mark.parametrize("chars", [40, 200, MAX_SUMMARY_CHARS])
def test_the_longest_stand_in_passes_and_one_character_more_does_not(chars: int) -> None:
    widest = "\x00"
    text = stand_in(widest * NAME_SHOWN, widest * ARGS_SHOWN, 10**SIZE_DIGITS - 1, widest * chars)
    longest = max(len(as_json(f.text_result(text))) for f in FORMATS.values())
    assert longest == longest_pinned(chars) > 6 * chars
    assert check_item(item(chars, "x" * longest), "acme") is None
    refused = check_item(item(chars, "x" * (longest + 1)), "acme")
    assert refused is not None
    assert f"stand-in of {longest + 1} characters, over the {longest}" in refused


def test_a_stand_in_s_name_and_arguments_are_shown_cut_to_their_bounds() -> None:
    text = stand_in("n" * 1000, "a" * 1000, 1, "s")
    assert "n" * (NAME_SHOWN - 3) + "...(" + "a" * (ARGS_SHOWN - 3) + "...)" in text
    assert "n" * (NAME_SHOWN - 2) not in text
    assert stand_in("", "{}", 1, "s") == stand_in("tool", "{}", 1, "s")


def test_a_summary_or_a_dialogue_s_is_held_to_its_own_characters() -> None:
    """Only a stand-in has a head: a summary, and a dialogue's, are held to their ids'."""
    summary = [f"tr:acme:s:{REF.key}:extractive:v1:40".encode(), b"y" * 41, TTL]
    dialogue = [f"tr:acme:d:{REF.key}:{PINNED}extractive:40".encode(), b"y" * 41, TTL]
    assert "over its budget of 40" in (check_item(summary, "acme") or "")
    assert "over its budget of 40" in (check_item(dialogue, "acme") or "")
    assert check_item([summary[0], b"y" * 40, TTL], "acme") is None


@pytest.mark.parametrize("budget", ["²", "٣", "9" * 5000, "00000000040"])
def test_a_budget_that_is_no_plain_number_is_held_to_the_largest(budget: str) -> None:
    """Found: `int()` of a budget `isdigit` passed (`²`, or 4,301 digits) raised a bare
    `ValueError` out of the check: the CLI's traceback, not its refusal naming the item."""
    key = f"tr:acme:s:{REF.key}:extractive:v1:{budget}".encode()
    assert check_item([key, b"y" * MAX_SUMMARY_CHARS, TTL], "acme") is None
    over = check_item([key, b"y" * (MAX_SUMMARY_CHARS + 1), TTL], "acme")
    assert over is not None
    assert f"over its budget of {MAX_SUMMARY_CHARS}" in over
