"""The tool results of one message, each compressed alone (docs/reliability.md, "Sizes";
`toolref.edits.isolated`'s split records): where the cut says each result starts
(`Cut.splits`), what a split record holds (a frame per piece, never brotli, never in a
run), and that the receiver restores every request exactly, turn after turn."""

from __future__ import annotations

import json
import random
from itertools import pairwise
from typing import Any

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.edits.oracle import Registry, send
from toolref.edits import isolated
from toolref.edits.request import cut
from toolref.kit.varints import read_varint, varint
from toolref.sending.editor import Editor

HEADERS = [("content-type", "application/json"), ("x-api-key", "k")]


def anthropic(contents: list[str], text: str | None = None) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [
        {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": content}
        for n, content in enumerate(contents)
    ]
    if text is not None:
        blocks.append({"type": "text", "text": text})
    return {"role": "user", "content": blocks}


def gemini(contents: list[str]) -> dict[str, Any]:
    parts = [{"functionResponse": {"name": "read", "response": {"r": c}}} for c in contents]
    return {"role": "user", "parts": parts}


def lines(tag: str, count: int) -> str:
    return "".join(f"{tag} line {n}: é value = {n * 7919 % 10007}\n" for n in range(count))


@pytest.mark.parametrize("window", [False, True])
@pytest.mark.parametrize("shape", ["anthropic", "gemini"])
def test_the_cut_says_where_each_tool_result_starts(shape: str, window: bool) -> None:
    """Each offset of a split is where a block of a message holding two or more tool
    results starts, or where its last block ends; a message with one result, or none, has
    none. The segments are what they are without (a cut knows them, no more)."""
    key = "messages" if shape == "anthropic" else "contents"
    make = anthropic if shape == "anthropic" else gemini
    long = lines("file", 200 if window else 3)
    messages = [
        {"role": "user", "content": "go"},
        make(["only one " + long]),
        make(["file " + long, "page " + lines("page", 150), "third"]),
    ]
    if shape == "anthropic":
        messages.append(anthropic(["a " + long, "b"], text="and a question " + long))
    data = json.dumps({"model": "m", key: messages}, ensure_ascii=False).encode()
    made = cut(HEADERS, data, key, window=window)
    assert made is not None
    assert made.body == data
    starts = [b'{"type": "tool_result"', b'{"functionResponse"', b'{"type": "text"']
    found = 0
    for index, offsets in made.splits.items():
        segment = made.segments[index]
        assert list(offsets) == sorted(offsets)
        for offset in offsets:
            assert 0 < offset < len(segment)
            head = segment[offset:]
            assert any(head.startswith(s) for s in starts) or segment[offset - 1 : offset] == b"}"
            found += 1
    messages_split = {made.owners[index] for index in made.splits} if window else None
    assert found >= (5 if shape == "anthropic" else 3)
    if window:  # the long message's pieces: those holding a start; never the lone result's
        assert messages_split is not None
        assert 1 not in messages_split
    else:
        assert len(made.splits) == (2 if shape == "anthropic" else 1)
    unsplit = cut(HEADERS, data.replace(b'"tool_result"', b'"tool_RESULT"'), key, window=window)
    if shape == "anthropic":
        assert unsplit is not None
        assert not unsplit.splits
        assert [len(s) for s in unsplit.segments] == [len(s) for s in made.segments]


def records(blob: bytes, lengths: list[int]) -> list[tuple[int, int, bytes]]:
    """(kind, how many segments, its payload) of each record `isolated.pack` wrote."""
    found: list[tuple[int, int, bytes]] = []
    at = index = 0
    while index < len(lengths):
        kind = blob[at]
        at += 1
        if kind == isolated.RAW:
            found.append((kind, 1, blob[at : at + lengths[index]]))
            at += lengths[index]
            index += 1
            continue
        count: int | None = 1
        if kind in (isolated.JOINED, isolated.BROTLI_JOINED):
            count, at = read_varint(blob, at)
        size, at = read_varint(blob, at)
        assert count is not None
        assert size is not None
        size += isolated.CRC_BYTES if kind in (isolated.BROTLI, isolated.BROTLI_JOINED) else 0
        found.append((kind, count, blob[at : at + size]))
        at += size
        index += count
    assert at == len(blob)
    return found


_PIECES = st.lists(
    st.lists(st.sampled_from([b"abc ", b"secret=", b'{"k":1}', b"\n", b"\xc3\xa9"]), max_size=40),
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(_PIECES, min_size=1, max_size=6),
    st.sets(st.integers(0, 6)),
    st.sets(st.integers(0, 6)),
    st.booleans(),
)
def test_split_records_read_back_exactly_each_piece_a_frame(
    segments_pieces: list[list[list[bytes]]], split: set[int], answered: set[int], brotli: bool
) -> None:
    """A split segment's record is its bytes as they are or a frame per piece, back to
    back (never brotli, against the answer or in a run), whichever is smaller; every other
    record is what it is unsplit; all read back exactly."""
    segments = [b"".join(b"".join(piece) for piece in pieces) for pieces in segments_pieces]
    splits: dict[int, tuple[int, ...]] = {}
    for index, pieces in enumerate(segments_pieces):
        if index in split:
            ends = [len(b"".join(b"".join(p) for p in pieces[: n + 1])) for n in range(len(pieces))]
            splits[index] = tuple(ends[:-1])
    answer = b"abc secret=abc " * 4
    runs = [(0, len(segments))]
    made = isolated.pack(
        segments, answer=answer, answered=answered, runs=runs, with_brotli=brotli, splits=splits
    )
    lengths = [len(s) for s in segments]
    back = isolated.unpack(made, lengths, None, answer, runs=True, with_brotli=True)
    assert back == segments
    plain = isolated.pack(segments, with_brotli=brotli)
    fresh = zstandard.ZstdCompressor(level=isolated.LEVEL, write_checksum=True)
    index = 0
    for kind, count, payload in records(made, lengths):
        if index in splits:
            assert count == 1
            segment = segments[index]
            bounds = (0, *splits[index], len(segment))
            frames = b"".join(fresh.compress(segment[a:b]) for a, b in pairwise(bounds) if b > a)
            alone = bytes([isolated.ALONE]) + varint(len(frames)) + frames
            expected = b"\x00" + segment
            if len(segment) >= isolated.MIN_COMPRESSED:
                expected = min(expected, alone, key=len)
            assert bytes([kind]) + (varint(len(payload)) if kind else b"") + payload == expected
        else:
            assert not any(i in splits for i in range(index, index + count))
        index += count
    if not splits:
        assert isolated.pack(segments, with_brotli=brotli, splits=splits) == plain


def parallel_turns(seed: int, shape: str, turns: int) -> list[bytes]:
    """A conversation whose tool calls run in parallel: each turn the model asks for two to
    four results, which come back in one message (long ones cut by the long window)."""
    pick = random.Random(seed)
    key = "messages" if shape == "anthropic" else "contents"
    messages: list[dict[str, Any]] = [{"role": "user", "content": "start " * 10}]
    bodies = []
    for turn in range(turns):
        said = "calling tools " * pick.randint(1, 5)
        if shape == "anthropic":
            messages.append({"role": "assistant", "content": said})
        else:
            messages.append({"role": "model", "parts": [{"text": said}]})
        contents = [
            lines(f"t{turn}r{n}", pick.choice([1, 5, 150])) for n in range(pick.randint(2, 4))
        ]
        text = "and this" if shape == "anthropic" and pick.random() < 0.5 else None
        messages.append(anthropic(contents, text) if shape == "anthropic" else gemini(contents))
        if shape == "anthropic" and pick.random() < 0.3:  # a cache mark on a result
            messages[-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
        bodies.append(json.dumps({"model": "m", key: messages}, ensure_ascii=False).encode())
    return bodies


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(["anthropic", "gemini"]), st.sampled_from([3, 4, 5]))
def test_every_turn_of_parallel_tool_results_is_restored_exactly(
    seed: int, shape: str, version: int
) -> None:
    """Turn after turn through a guarded editor (versions 3 to 5, the long window on):
    the receiver restores each request byte for byte from edits carrying split records."""
    key = "messages" if shape == "anthropic" else "contents"
    editor, registry = Editor(version=version), Registry()
    split = 0
    for data in parallel_turns(seed, shape, 5):
        turn = send(editor, registry, HEADERS, data, key)
        assert turn.answer.body == data
        assert len(turn.sent) == 1
        made = cut(HEADERS, data, key, window=True)
        assert made is not None
        split += len(made.splits)
    assert split > 0
