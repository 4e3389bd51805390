"""Edits of version 8 (issue 39): the model's segment as copies of the answer it writes back
(record kind 8, `toolref.edits.copies`), exact for any segment and answer, a few bytes
where the agent wrote the answer back unchanged, read back only where the edit's version
and answer allow, refused whole where its instructions do not make the segment."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.edits.test_brotli_records import record_kinds
from toolref.edits import copies, isolated, wire
from toolref.edits.answer import answer_id
from toolref.edits.edit import Inline, Keep, Op
from toolref.kit.varints import read_varint, varint
from toolref.wire.errors import MalformedBodyError

ANSWER = (
    b'{"role":"assistant","content":[{"type":"text","text":"Let me read src/edit.py. '
    b'The keep ranges look wrong."},{"type":"tool_use","id":"toolu_01AbCdEfGhIjKlMnOpQrStUv",'
    b'"name":"read_file","input":{"path":"src/edit.py"}}]}'
)


def pieces_of(answer: bytes) -> st.SearchStrategy[bytes]:
    """Segments made of spans of `answer` and bytes of their own, in any order."""
    spans = st.tuples(st.integers(0, len(answer)), st.integers(0, 80)).map(
        lambda p: answer[p[0] : p[0] + p[1]]
    )
    return st.lists(st.one_of(spans, st.binary(max_size=20)), max_size=8).map(b"".join)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), answer=st.one_of(st.just(ANSWER), st.binary(max_size=300)))
def test_any_segment_reads_back_exactly_from_its_copies(data: st.DataObject, answer: bytes) -> None:
    segment = data.draw(pieces_of(answer))
    made = copies.encode(segment, answer)
    if made is None:
        return  # nothing to copy: the sender keeps its other records
    assert made[0] == copies.KIND
    size, at = read_varint(made, 1)
    assert size is not None
    assert len(made) == at + size
    assert copies.decode(made[at:], answer, len(segment), None, "segment 1") == segment


def test_a_segment_written_back_unchanged_costs_a_few_bytes() -> None:
    made = copies.encode(ANSWER, ANSWER)
    assert made is not None
    assert len(made) <= 6  # kind, size, one copy: its length and offset
    changed = ANSWER.replace(b'"text":"Let', b'"text": "Let')  # the agent's own spacing
    edited = copies.encode(changed, ANSWER)
    assert edited is not None
    assert len(edited) <= 12
    assert copies.encode(b"nothing of the answer", ANSWER) is None
    assert copies.encode(ANSWER, b"") is None


def test_the_model_s_segments_travel_as_copies_where_the_version_allows() -> None:
    segments = [b"", ANSWER, b',{"role":"user","content":"' + ANSWER + b'"}']
    lengths = [len(s) for s in segments]
    before = isolated.pack(segments, answer=ANSWER, answered=[1], with_shipped=True)
    packed = isolated.pack(
        segments, answer=ANSWER, answered=[1], with_shipped=True, with_copies=True
    )
    kinds = record_kinds(packed, lengths)
    assert kinds[1] == copies.KIND
    assert copies.KIND not in record_kinds(before, lengths)
    assert kinds[2] != copies.KIND  # a user's text, however like the answer, never
    assert len(packed) < len(before)
    version_8 = {"runs": True, "with_brotli": True, "with_shipped": True}
    read = isolated.unpack(packed, lengths, None, ANSWER, **version_8, with_copies=True)
    assert read == segments
    with pytest.raises(MalformedBodyError, match="known kind"):
        isolated.unpack(packed, lengths, None, ANSWER, **version_8)  # version 7
    with pytest.raises(MalformedBodyError, match="known kind"):
        isolated.unpack(packed, lengths, None, None, **version_8, with_copies=True)  # no answer


def test_version_8_edits_name_their_answer_and_read_back() -> None:
    base = "tb_" + "a" * 26
    ops: list[Op] = [Inline(b""), Keep(0, 3), Inline(ANSWER), Inline(b"x" * 30)]
    made = wire.encode_isolated(base, ops, answer=ANSWER, answered=[1], version=8)
    assert made[0] == 8
    header, blob = wire.read(made, 1 << 20)
    assert header.version == 8
    assert header.answer == answer_id(ANSWER)
    assert record_kinds(blob, header.lengths)[1] == copies.KIND
    assert wire.inline(header, blob, b"", None, ANSWER) == [b"", ANSWER, b"x" * 30]
    older = wire.encode_isolated(base, ops, answer=ANSWER, answered=[1], version=7)
    assert older[0] == 7
    assert len(made) < len(older)
    refused = bytes([7]) + made[1:]  # kind 8 in an edit that says version 7
    header, blob = wire.read(refused, 1 << 20)
    with pytest.raises(MalformedBodyError, match="known kind"):
        wire.inline(header, blob, b"", None, ANSWER)


def copy(size: int, offset: int) -> bytes:
    return varint(size << 1 | 1) + varint(offset)


def literal(data: bytes) -> bytes:
    return varint(len(data) << 1) + data


@pytest.mark.parametrize(
    ("instructions", "length", "fact"),
    [
        (copy(10, len(ANSWER) - 5), 10, "past the answer"),
        (copy(5, 0) + literal(b"abc")[:-1], 8, "past the record"),
        (copy(5, 0), 6, "make 5 bytes, not its 6"),
        (copy(5, 0) + copy(5, 0), 8, "past the segment"),
        (varint(1), 1, "empty"),  # a copy of no bytes
        (varint(0), 1, "empty"),  # no bytes as they are
        (bytes([0x8B]), 5, "cut short"),  # a varint that never ends
        (varint(5 << 1 | 1), 5, "past the answer"),  # a copy with no offset
    ],
)
def test_instructions_that_do_not_make_the_segment_are_refused(
    instructions: bytes, length: int, fact: str
) -> None:
    with pytest.raises(MalformedBodyError, match=fact):
        copies.decode(instructions, ANSWER, length, None, "segment 1")
    record = bytes([copies.KIND]) + varint(len(instructions)) + instructions
    with pytest.raises(MalformedBodyError, match="kind 8"):
        isolated.unpack(record, [length], None, ANSWER, runs=True, with_copies=True)


def test_what_copies_make_is_charged_before_it_is_made() -> None:
    """A record of a few bytes copying a long answer many times over is charged first: a
    request's budget refuses it before a byte is made."""
    charged: list[int] = []

    class Meter:
        def charge(self, size: int) -> None:
            charged.append(size)
            if size > 100:
                raise OverBudget

    class OverBudget(Exception):
        pass

    instructions = copy(len(ANSWER), 0) * 50
    with pytest.raises(OverBudget):
        copies.decode(instructions, ANSWER, len(ANSWER) * 50, Meter(), "segment 1")
    assert charged == [len(ANSWER) * 50]
    assert copies.decode(copy(20, 0), ANSWER, 20, Meter(), "segment 1") == ANSWER[:20]
    assert charged[-1] == 20


def test_a_segment_far_from_the_answer_is_not_scanned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Copies win only by the frame's own bytes: where kind 3's record is long (the segment
    mostly its own bytes), the sender does not scan for them (their cost, O(segment)
    dictionary steps in Python, buys nothing there)."""
    scanned: list[bytes] = []
    real = copies.encode

    def counted(segment: bytes, answer: bytes) -> bytes | None:
        scanned.append(segment)
        return real(segment, answer)

    monkeypatch.setattr(copies, "encode", counted)
    own = bytes(range(256)) * 4  # incompressible, nothing of the answer
    packed = isolated.pack([b"", own, ANSWER], answer=ANSWER, answered=[1, 2], with_copies=True)
    assert scanned == [ANSWER]
    assert record_kinds(packed, [0, len(own), len(ANSWER)])[2] == copies.KIND
