"""Edits of version 4: the compact header (`toolref.edits.compact`) says what the JSON header
line says, in a fraction of its bytes; anything else is refused as a JSON header would be,
saying what is wrong, before anything is built."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolref.edits import compact, wire
from toolref.edits.edit import Inline, Keep, Named, Op, apply_segments, diff
from toolref.edits.recipe import ID_BYTES, recipe_ref_of
from toolref.edits.request import cut
from toolref.kit.varints import varint
from toolref.wire.errors import DecompressedTooLargeError, MalformedBodyError, TooManyItemsError

BASE = recipe_ref_of(bytes(range(ID_BYTES)))
PIECE = bytes(range(100, 100 + ID_BYTES))

ops_strategy = st.lists(
    st.one_of(
        st.binary(min_size=1, max_size=40).map(Inline),
        st.tuples(st.integers(0, 10**6), st.integers(1, 500)).map(
            lambda p: Keep(p[0], p[0] + p[1])
        ),
        st.just(Named(PIECE)),
    ),
    max_size=30,
)


@given(ops_strategy, st.booleans(), st.booleans())
def test_a_compact_edit_reads_as_its_json_twin(ops: list[Op], based: bool, guard: bool) -> None:
    ops = [Inline(b"headers: 1\r\n"), *ops]
    base = BASE if based or any(isinstance(op, Keep) for op in ops) else None
    four = wire.encode_isolated(base, ops, version=4, compress=guard)
    three = wire.encode_isolated(base, ops, version=3, compress=guard)
    assert four[:1] == compact.MARK
    header4, blob4 = wire.read(four, 1 << 30, 1 << 30)
    header3, blob3 = wire.read(three, 1 << 30, 1 << 30)
    assert (header4.base, header4.ops, header4.inline, header4.entries) == (
        header3.base,
        header3.ops,
        header3.inline,
        header3.entries,
    )
    assert wire.inline(header4, blob4, b"", None) == wire.inline(header3, blob3, b"", None)
    assert len(four) <= len(three)


def test_a_continuation_turn_s_header_is_a_few_dozen_bytes() -> None:
    body = b'{"model":"m","messages":[' + b",".join(
        b'{"role":"user","content":"%s"}' % (b"turn %d " % n * 40) for n in range(30)
    )
    first = cut([("content-type", "application/json")], body + b"]}", "messages")
    later = cut(
        [("content-type", "application/json")],
        body + b',{"role":"user","content":"and one more"}]}',
        "messages",
    )
    assert first is not None
    assert later is not None
    ops = diff(first.entries, later.entries, later.segments)
    four = wire.encode_isolated(first.ref, ops, version=4)
    three = wire.encode_isolated(first.ref, ops, version=3)
    header_bytes = len(four) - (len(three) - three.index(b"\n") - 1)
    assert header_bytes <= 30, header_bytes
    assert three.index(b"\n") + 1 >= 2.5 * header_bytes
    header, blob = wire.read(four, 1 << 20)
    segments = apply_segments(first.segments, header.ops, wire.inline(header, blob, b"", None))
    assert b"".join(segments[1:]) == b"".join(later.segments[1:])


def test_an_answer_id_travels_as_eight_bytes() -> None:
    data = compact.encode(BASE, [0, Keep(0, 3), 5], "0123456789abcdef") + b"\x00hello"
    header, blob = wire.read(data, 1 << 20)
    assert header.answer == "0123456789abcdef"
    assert header.base == BASE
    assert header.version == 4
    assert blob == b"\x00hello"
    assert wire.described(data) == {
        "v": 4,
        "b": BASE,
        "o": [0, [0, 3], 5],
        "n": 5,
        "a": "0123456789abcdef",
    }


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"\x04", "version byte"),
        (b"\x04\x08\x01\x00", "flags"),
        (b"\x04\x01" + b"\x00" * 5, "base or answer id"),
        (b"\x04\x00", "count of ops"),
        (b"\x04\x00\x02\x00", "within op 1"),
        (b"\x04\x00\x01\x03", "no known kind"),
        (b"\x04\x00\x01\x02" + b"\x00" * 3, "no known kind"),  # a piece id cut short
        (b"\x04\x01" + bytes(16) + b"\x02\x00\x05\x00", "keeps no entries"),
        (b"\x04\x00\x00", "lists no ops"),
        (b"\x04\x00\x02\x00\x00", "is empty"),
        (b"\x04\x00\x02\x00\x05\x01", "keeps nothing"),  # a keep with no base
        (b"\x04\x02" + bytes(8) + b"\x01\x00", "has a base"),  # an answer with no base
    ],
)
def test_a_malformed_compact_header_is_refused_saying_what(data: bytes, said: str) -> None:
    with pytest.raises(MalformedBodyError) as found:
        wire.read(data, 1 << 20)
    assert said in found.value.detail


def test_entries_and_inline_bytes_are_bounded_before_anything_is_built() -> None:
    many = b"\x04\x00" + varint(1_000_000) + b"\x00" * 10
    with pytest.raises(TooManyItemsError):
        wire.read(many, 1 << 20, 50_000)
    keeps = b"\x04\x01" + bytes(16) + varint(2) + varint(1) + varint(10**9) + varint(4 << 2)
    with pytest.raises(TooManyItemsError):
        wire.read(keeps, 1 << 20, 50_000)
    large = b"\x04\x00\x01" + varint((1 << 21) << 2)
    with pytest.raises(DecompressedTooLargeError):
        wire.read(large, 1 << 20)
