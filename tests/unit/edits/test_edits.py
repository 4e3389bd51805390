"""toolref.edits: a request cut into segments and put back byte for byte, edits between
any two requests applied to give the second exactly, and their wire format, for any JSON
any writer writes (compact, spaced, pretty, ASCII-escaped, raw UTF-8, every number
spelling, repeated keys, lone surrogates)."""

from __future__ import annotations

import gzip
import json
import random
from typing import Any

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from toolref.edits import isolated, wire
from toolref.edits.edit import Inline, Keep, Named, apply, dictionary, dictionary_order, diff
from toolref.edits.recipe import PIECE_MIN, RUN_MIN, entry_of, is_piece, piece_of, recipe_ref
from toolref.edits.request import cut, restore
from toolref.edits.segments import cut_body, header_lines, header_segment, restore_headers
from toolref.kit.varints import varint
from toolref.wire import compression
from toolref.wire.errors import (
    DecompressedTooLargeError,
    DictionaryMismatchError,
    MalformedBodyError,
)

HEADERS = [
    ("Content-Type", "application/json"),
    ("x-api-key", "sk-secret"),
    ("anthropic-version", "2023-06-01"),
    ("User-Agent", "claude-cli/2.1"),
    ("Authorization", "Bearer tok"),
]

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
NUMBERS = st.sampled_from(
    ["1e5", "1E-7", "-0", "-0.0", "1.0", "1e400", "123456789012345678901234567890", "0.1e+2"]
)


def written(value: Any, style: str) -> str:
    """`value` as one of the writers clients use."""
    if style == "compact":
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if style == "spaced":
        return json.dumps(value, ensure_ascii=False)
    if style == "pretty":
        return json.dumps(value, indent=2, ensure_ascii=False)
    return json.dumps(value)  # ASCII-escaped


STYLES = st.sampled_from(["compact", "spaced", "pretty", "ascii"])


def body_of(messages: list[Any], extra: dict[str, Any], style: str) -> str:
    return written({"model": "m", **extra, "messages": messages}, style)


@given(
    st.lists(JSON_VALUES, max_size=6),
    st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=3),
    STYLES,
)
@settings(max_examples=200, deadline=None)
def test_a_body_cut_is_the_body_joined(
    messages: list[Any], extra: dict[str, Any], style: str
) -> None:
    text = body_of(messages, extra, style)
    parts = cut_body(text, "messages")
    assert parts is not None
    assert "".join(parts) == text


@given(st.integers(min_value=0, max_value=5), STYLES)
@settings(max_examples=60, deadline=None)
def test_a_cut_says_where_each_message_is(count: int, style: str) -> None:
    """`Cut.messages`: for each message, in order, the index of its largest segment, what
    it says, its id and cache mark aside (the client tells conversations apart by them)."""
    messages = [
        {
            "type": "message",
            "id": f"msg_{k}_{'9' * k}",
            "content": [{"type": "text", "text": f"said-{k}. " * 12}],
        }
        for k in range(count)
    ]
    made = cut(HEADERS, body_of(messages, {"model": "m"}, style).encode(), "messages")
    assert made is not None
    assert len(made.messages) == count
    for k, index in enumerate(made.messages):
        said = made.segments[index]
        assert f"said-{k}. ".encode() in said
        assert b"msg_" not in said
    assert list(made.messages) == sorted(made.messages)


MARKED = '{"role":"user","content":[{"type":"text","text":"%s"%s}]}'


@pytest.mark.parametrize("spacing", ["", " ", "\n  "])
def test_a_cache_mark_moving_off_a_message_leaves_its_piece(spacing: str) -> None:
    """Issue 30: a message with a cache mark and the same message without it share their
    piece; the mark and the closing brackets are glue (before, every turn a mark moved sent
    and stored the marked message again)."""
    mark = f',{spacing}"cache_control":{spacing}{{"type": "ephemeral"}}'
    text = "read " * 40
    marked = '{"messages":[%s]}' % (MARKED % (text, mark))
    plain = '{"messages":[%s]}' % (MARKED % (text, ""))
    one, two = (cut(HEADERS, body.encode(), "messages") for body in (marked, plain))
    assert one is not None
    assert two is not None
    assert one.body == marked.encode()
    assert two.body == plain.encode()
    assert one.segments[one.messages[0]] == two.segments[two.messages[0]]
    assert b"cache_control" not in one.segments[one.messages[0]]
    assert len(one.segments[one.messages[0]]) > RUN_MIN  # it identifies the message


def keeps_its_piece(message: str, spacing: str) -> None:
    """A body holding `message` with a mark where it says `<mark>`, and the same without:
    each restored byte for byte, the message's piece the same in both."""
    mark = f',{spacing}"cache_control":{spacing}{{"type": "ephemeral"}}'
    marked, plain = (
        f'{{"model":"m","messages":[{message.replace("<mark>", m)}]}}'.encode() for m in (mark, "")
    )
    one, two = (cut(HEADERS, body, "messages") for body in (marked, plain))
    assert one is not None
    assert two is not None
    for made, body in ((one, marked), (two, plain)):
        assert made.body == body
        back = restore(made.segments, made.secrets)
        assert back is not None
        assert back.body == body
    assert one.segments[one.messages[0]] == two.segments[two.messages[0]]
    assert b"cache_control" not in one.segments[one.messages[0]]
    assert len(one.segments[one.messages[0]]) > RUN_MIN  # it identifies the message


@pytest.mark.parametrize("spacing", ["", " ", "\n  "])
def test_a_mark_after_a_first_id_leaves_its_piece(spacing: str) -> None:
    """A mark right after a message's first member, its id: the id's cut (with the comma
    after it) and the mark's (with the comma before it) overlap; both are glue."""
    said = "said " * 40
    keeps_its_piece(f'{{"id":"msg_1"<mark>,{spacing}"role":"user","content":"{said}"}}', spacing)


@pytest.mark.parametrize("spacing", ["", " ", "\n  "])
@pytest.mark.parametrize(
    "value", ['[{"type":"text","text":"<out>"}]', '{"text":"<out>","more":[1,{}]}', '"<out>"']
)
def test_a_mark_after_a_bracket_leaves_its_piece(spacing: str, value: str) -> None:
    """A mark after a member whose value ends in a bracket (a `tool_result` whose content
    is a list): the brackets before the mark close the message as those after it do, glue."""
    content = value.replace("<out>", "out " * 40)
    block = f'{{"type":"tool_result","tool_use_id":"t1","content":{content}<mark>}}'
    keeps_its_piece(f'{{"role":"user","content":[{block}]}}', spacing)


def test_a_mark_inside_a_string_is_text() -> None:
    """A `, "cache_control":` inside a string is escaped text, never a cut."""
    inner = json.dumps('x, "cache_control": {} ' * 10)
    body = f'{{"messages":[{{"role":"user","content":{inner}}}]}}'
    made = cut(HEADERS, body.encode(), "messages")
    assert made is not None
    assert made.segments[made.messages[0]] == b'{"role":"user","content":' + inner.encode()


@given(NUMBERS, st.sampled_from(['"\\ud83d"', '"\\udc00x"', '"é"', '"\\u00e9"']), STYLES)
def test_spellings_json_parsers_change_are_kept(number: str, string: str, style: str) -> None:
    """Numbers no double holds, exponent spellings, negative zero, lone surrogate escapes
    and repeated keys: a slice of the text, never written again."""
    gap = {"compact": "", "spaced": " ", "pretty": "\n  ", "ascii": ""}[style]
    text = (
        f'{{"model":{gap}"m",{gap}"n":{gap}{number},{gap}"n":{gap}2,{gap}"messages":{gap}'
        f'[{{"role":"user","content":{string}}},{gap}{{"x":{number}}}]}}'
    )
    made = cut(HEADERS, text.encode(), "messages")
    assert made is not None
    assert made.body == text.encode()
    back = restore(made.segments, made.secrets)
    assert back is not None
    assert back.body == text.encode()


def test_what_is_not_one_json_object_is_not_cut() -> None:
    for text in ["[1,2]", '{"a":1} x', "{", "", '{"a":1}{"b":2}', '"s"']:
        assert cut_body(text, "messages") is None
    assert cut(HEADERS, b'{"a":"\xff"}', "messages") is None  # not UTF-8


def test_messages_and_large_members_are_segments_of_their_own() -> None:
    tools = [{"name": f"tool{i}", "description": "x" * 40} for i in range(10)]
    text = json.dumps({"model": "m", "tools": tools, "messages": [{"a": 1}, {"b": 2}], "t": 1})
    parts = cut_body(text, "messages")
    assert parts is not None
    assert json.dumps(tools) in parts
    assert '{"a": 1' in parts  # a message less its closing brace (glue)
    assert '{"b": 2' in parts


def test_credentials_travel_apart_and_come_back_in_their_place() -> None:
    segment, secrets = header_segment([*HEADERS, ("Content-Length", "10"), ("Host", "h")])
    assert b"sk-secret" not in segment
    assert b"Bearer" not in segment
    assert b"content-length" not in segment.lower()
    assert secrets == [("x-api-key", "sk-secret"), ("Authorization", "Bearer tok")]
    assert restore_headers(segment, secrets) == HEADERS
    assert restore_headers(segment, secrets[:1]) is None  # a credential missing
    assert restore_headers(b"not headers", []) is None


def test_segments_become_pieces_from_their_size() -> None:
    assert not is_piece(entry_of(b"x" * (PIECE_MIN - 1)))
    assert is_piece(entry_of(b"x" * PIECE_MIN))
    assert recipe_ref([entry_of(b"a"), entry_of(b"b")]) != recipe_ref([entry_of(b"ab")])


ROLES = ("user", "assistant")


def conversation(turns: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {
            "role": ["user", "assistant"][n % 2],
            "content": f"turn {n} " + "w" * rng.randrange(1, 300),
        }
        for n in range(turns)
    ]


EDITS = st.sampled_from(
    ["append", "edit-middle", "delete-middle", "insert-middle", "mark", "compact", "same"]
)


def edited(messages: list[dict[str, Any]], how: str, rng: random.Random) -> list[dict[str, Any]]:
    out = [dict(m) for m in messages]
    middle = len(out) // 2
    if how == "append":
        out += [{"role": "user", "content": "new " * 30}, {"role": "assistant", "content": "ok"}]
    elif how == "edit-middle" and out:
        out[middle]["content"] = "edited " + out[middle]["content"]
    elif how == "delete-middle" and out:
        del out[middle]
    elif how == "insert-middle":
        out.insert(middle, {"role": "user", "content": "inserted " * 20})
    elif how == "mark" and out:
        out[-1] = {**out[-1], "cache_control": {"type": "ephemeral"}}
        if len(out) > 2:
            out[-3].pop("cache_control", None)
    elif how == "compact":
        out = [{"role": "user", "content": "summary " * 40}, *out[-2:]]
    return out


@given(st.integers(1, 30), st.integers(0, 10**6), st.lists(EDITS, min_size=1, max_size=4), STYLES)
@settings(max_examples=150, deadline=None)
def test_an_edit_applied_gives_the_new_request_exactly(
    turns: int, seed: int, hows: list[str], style: str
) -> None:
    rng = random.Random(seed)
    messages = conversation(turns, seed)
    base = cut(HEADERS, body_of(messages, {"tools": ["t" * 300]}, style).encode(), "messages")
    assert base is not None
    store = dict(zip(base.entries, base.segments, strict=True))
    for how in hows:
        messages = edited(messages, how, rng)
        new = cut(HEADERS, body_of(messages, {"tools": ["t" * 300]}, style).encode(), "messages")
        assert new is not None
        ops = diff(base.entries, new.entries, new.segments)
        entries = apply(base.entries, ops)
        assert entries == new.entries
        assert recipe_ref(entries) == new.ref
        inline = sum(len(op.data) for op in ops if isinstance(op, Inline))
        before = set(base.entries)
        pairs = zip(new.entries, new.segments, strict=True)
        changed = sum(len(segment) for entry, segment in pairs if entry not in before)
        # What travels inline is at most what the base lacks, and per op a literal too
        # short to start a run (glue: a comma, a bracket).
        assert inline <= changed + RUN_MIN * len(ops)
        # Through the wire, compressed against the base's segments, on both sides.
        order = dictionary_order(len(base.entries), ops)
        size = min(sum(map(len, base.segments)), 64 << 10)
        words = dictionary(order, base.segments.__getitem__, size)
        data = wire.encode(base.ref, ops, words)
        header, blob = wire.read(data, 1 << 30)
        assert header.base == base.ref
        pieces = iter(wire.inline(header, blob, words, None))
        rebuilt = []
        for op in header.ops:
            if isinstance(op, Keep):
                rebuilt += base.segments[op.start : op.end]
            elif isinstance(op, Named):
                rebuilt.append(store[b"\x00" + op.piece])
            else:
                rebuilt.append(next(pieces))
        assert b"".join(rebuilt[1:]) == new.body
        store.update(zip(new.entries, new.segments, strict=True))
        base = new


def test_a_piece_held_elsewhere_is_named() -> None:
    big = b"p" * PIECE_MIN
    ops = diff([], [entry_of(big)], [big], held={piece_of(entry_of(big))})
    assert ops == [Named(piece_of(entry_of(big)))]


def test_a_moved_mark_compresses_against_the_segment_it_replaced() -> None:
    messages = conversation(40, 7)
    before = cut(HEADERS, body_of(messages, {}, "compact").encode(), "messages")
    messages[-1] = {**messages[-1], "cache_control": {"type": "ephemeral"}}
    after = cut(HEADERS, body_of(messages, {}, "compact").encode(), "messages")
    assert before is not None
    assert after is not None
    ops = diff(before.entries, after.entries, after.segments)
    order = dictionary_order(len(before.entries), ops)
    words = dictionary(order, lambda i: before.segments[i], 16 << 10)
    data = wire.encode(before.ref, ops, words)
    assert len(data) < 200  # the whole message travels inline, as a few bytes


@pytest.mark.parametrize(
    "line",
    [
        b"no newline",
        b"not json\n",
        b'{"v":2,"b":null,"o":[],"n":0}\n',
        b'{"v":1,"b":"th_x","o":[],"n":0}\n',
        b'{"v":1,"b":null,"o":[[0,1]],"n":0}\n',
        b'{"v":1,"b":null,"o":[5],"n":4}\n',
        b'{"v":1,"b":null,"o":[[3,1]],"n":0}\n',
        b'{"v":1,"b":null,"o":["tp_x"],"n":0}\n',
        b'{"v":1,"b":null,"o":[],"n":0,"z":-1}\n',
    ],
)
def test_a_malformed_edit_is_refused_saying_what(line: bytes) -> None:
    with pytest.raises(MalformedBodyError) as found:
        wire.read(line, 1 << 20)
    assert "toolref.edits.wire.encode" in found.value.detail


def test_a_dictionary_past_its_bound_is_refused_before_the_base_is_read() -> None:
    """`z` takes at most `wire.MAX_DICTIONARY` bytes of the base (what a sender uses): a
    header of a few bytes cannot make a receiver copy a base of 64 MiB into a dictionary
    on each request."""
    words = b"the base's last bytes " * (wire.MAX_DICTIONARY // 22 + 1)
    at_most = wire.encode(None, [Inline(b"new text")], words[: wire.MAX_DICTIONARY])
    assert wire.read(at_most, 1 << 20)[0].dictionary == wire.MAX_DICTIONARY
    with pytest.raises(MalformedBodyError) as found:
        wire.read(
            wire.encode(None, [Inline(b"new text")], words[: wire.MAX_DICTIONARY + 1]), 1 << 20
        )
    assert f"`z` is {wire.MAX_DICTIONARY + 1}" in found.value.detail


def test_inline_bytes_against_another_dictionary_are_a_mismatch() -> None:
    data = wire.encode(None, [Inline(b"the base is long, " * 40)], b"the base is long, " * 50)
    header, blob = wire.read(data, 1 << 20)
    with pytest.raises(DictionaryMismatchError):
        wire.inline(header, blob, b"another base, another text " * 50, None)


@pytest.mark.parametrize("first", [True, False])
def test_a_message_with_a_new_id_keeps_its_piece(first: bool) -> None:
    """Issue 31 item 5: Codex gives every message a new id on each run of a prompt; the id
    is glue, so a repeated session's messages are pieces the registry holds (before, a
    repeat shared nothing with the run before and its first turn travelled whole)."""
    text = "the same instructions " * 20

    def body(message_id: str) -> bytes:
        own = f'"id":"{message_id}"'
        rest = f'"role":"developer","content":"{text}"'
        message = "{" + (f"{own},{rest}" if first else f'"type":"message",{own},{rest}') + "}"
        return ('{"model":"m","input":[%s]}' % message).encode()  # noqa: UP031

    one, two = (cut(HEADERS, body(i), "input") for i in ("msg_aaaa", "msg_bbbbbbbb"))
    assert one is not None
    assert two is not None
    assert one.body == body("msg_aaaa")
    assert two.body == body("msg_bbbbbbbb")
    assert one.segments[one.messages[0]] == two.segments[two.messages[0]]
    assert len(one.segments[one.messages[0]]) > RUN_MIN  # it identifies the message


def test_isolated_records_read_back_each_kind_and_refuse_what_does_not_fit() -> None:
    """Version-2 records: as they are, a zstd frame alone, a gzip member alone (what a
    browser sends); a frame that inflates past its op's length, a cut record or an unknown
    kind are refused before more is read."""
    segments = [b"", b"x" * 10, b'{"role":"user","content":"' + b"hello " * 40 + b'"}']
    packed = isolated.pack(segments)
    assert isolated.unpack(packed, [len(s) for s in segments], None) == segments
    member = gzip.compress(segments[2])
    gzipped = bytes([isolated.GZIP]) + bytes([len(member)]) + member
    assert isolated.unpack(gzipped, [len(segments[2])], None) == [segments[2]]
    with pytest.raises(DecompressedTooLargeError):
        isolated.unpack(gzipped, [10], None)
    for bad in (gzipped[:-3], b"\x07\x01x", b"\x00ab"):
        with pytest.raises(MalformedBodyError):
            isolated.unpack(bad, [len(segments[2])], None)


@pytest.mark.parametrize(
    "segment",
    [b"bad name: 1\r\n", b"x-a: a\x00b\r\n", b"x-a: a\x7fb\r\n", b"(x): 1\r\n", b": 1\r\n"],
)
def test_a_header_line_no_http_request_carries_is_no_headers_segment(segment: bytes) -> None:
    """A name that is no token, a value with a control character: not headers (the
    receiver answers 400; h11 refused to send such a line on, which read as the upstream
    unreachable, 502)."""
    assert header_lines(segment) is None


def test_header_lines_take_what_http_allows() -> None:
    line = b"x-app_1.v~: caf\xc3\xa9 \t(ok)\r\nauthorization:\r\n"
    assert header_lines(line) == [("x-app_1.v~", "caf\xc3\xa9 \t(ok)"), ("authorization", None)]


def test_isolated_records_cost_one_decompressor_per_edit_not_per_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Making a zstd decompressor costs about 8 us, more than inflating a small frame:
    made per record, 50,000 one-segment frames (1.4 MB of edit, under the inline bytes
    that put the work in a thread) held the event loop about 0.5 s, 25 times what the same
    segments as they are cost. One for the frames alone and one for the answer's, per edit."""
    answer = b'{"role":"assistant","content":[{"type":"text","text":"' + b"fine " * 40 + b'"}]}'
    segments = [b"segment %05d of the edit, alone" % i for i in range(500)]
    plain = zstandard.ZstdCompressor(write_checksum=True)

    def record(kind: int, frame: bytes) -> bytes:
        return bytes([kind]) + varint(len(frame)) + frame

    alone = b"".join(record(isolated.ALONE, plain.compress(s)) for s in segments)
    against = b"".join(
        record(isolated.ANSWER, compression.compress(s, answer, 3)) for s in segments
    )
    made = 0
    real = zstandard.ZstdDecompressor

    def counted(*args: Any, **kwargs: Any) -> zstandard.ZstdDecompressor:
        nonlocal made
        made += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(zstandard, "ZstdDecompressor", counted)
    lengths = [len(s) for s in segments]
    assert isolated.unpack(alone, lengths, None) == segments
    assert made <= 1
    made = 0
    assert isolated.unpack(against + alone, lengths * 2, None, answer) == segments * 2
    assert made <= 2


_SEGMENTS = st.lists(
    st.one_of(
        st.binary(max_size=60),
        st.sampled_from(
            [b'{"role":"assistant","content":"fine, done: ' + b"ok " * n + b'"}' for n in (4, 20)]
        ),
    ),
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(
    segments=_SEGMENTS,
    picks=st.sets(st.integers(0, 9)),
    run=st.tuples(st.integers(0, 7), st.integers(0, 4)),
)
def test_both_packings_are_each_packing_alone(
    segments: list[bytes], picks: set[int], run: tuple[int, int]
) -> None:
    """`pack_both` (what a sender weighs: plain records, and with the answer and runs)
    gives exactly what `pack` gives for each, and each reads back: the frames compressed
    once for both, with this thread's compressor, are the ones a fresh compressor makes."""
    answer = b'{"role":"assistant","content":"fine, done: ' + b"ok " * 12 + b'"}'
    first = min(run[0], len(segments))
    runs = [(first, min(run[1], len(segments) - first))]  # within the segments, as a sender's
    plain, against = isolated.pack_both(segments, answer=answer, answered=picks, runs=runs)
    assert plain == isolated.pack(segments)
    assert against == isolated.pack(segments, answer=answer, answered=picks, runs=runs)
    lengths = [len(s) for s in segments]
    assert isolated.unpack(plain, lengths, None) == segments
    assert isolated.unpack(against, lengths, None, answer, runs=True) == segments
    fresh = zstandard.ZstdCompressor(level=isolated.LEVEL, write_checksum=True)
    for segment in segments:
        if len(segment) >= isolated.MIN_COMPRESSED:
            frame = fresh.compress(segment)
            expected = min(b"\x00" + segment, b"\x01" + varint(len(frame)) + frame, key=len)
            assert expected in plain
