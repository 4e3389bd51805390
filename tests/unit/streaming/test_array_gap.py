"""Found in review (linear and bounded, second pass): an argument patch that sets an array
element past the array's end fills the gap with nulls, and nothing bounded the gap, so one
Vertex `partialArgs` entry with the path `$.a[1600000]` (a 200-byte event) held 29 MB, and
memory grew with the index's value, not the stream (4x the index, 4x the memory); the nulls
count toward no limit (`max_argument_chars` counts leaves). An element more than
`max_array_gap` (default 1024) past the end is refused now, naming the setting."""

from __future__ import annotations

from typing import Any

import pytest

from toolref.streaming import ToolBuffer, accumulate
from toolref.streaming.arguments import MAX_ARRAY_GAP
from toolref.streaming.chunk import ArgPatch, ToolChunk
from toolref.wire.errors import ChunkSequenceError


def at(*path: Any) -> ToolChunk:
    return ToolChunk(index=0, id="call_1", name="f", args_patch=(ArgPatch(path, 1),))


def test_an_element_far_past_the_end_is_refused_naming_the_setting() -> None:
    buffer = ToolBuffer(progress_interval=None)
    with pytest.raises(ChunkSequenceError, match="max_array_gap=1024") as info:
        buffer.feed(at("a", 10**6))
    assert info.value.extra == {"limit": "max_array_gap", "maximum": MAX_ARRAY_GAP}


def test_an_element_within_the_gap_is_set_after_nulls() -> None:
    buffer = ToolBuffer(progress_interval=None)
    buffer.feed(at("a", MAX_ARRAY_GAP))  # the last one the default takes
    buffer.feed(at("a", 2 * MAX_ARRAY_GAP + 1, "b"))  # a gap on the way to a deeper leaf
    buffer.feed(ToolChunk(index=0, done=True))
    [call] = buffer.close()
    assert call.arguments is not None
    assert len(call.arguments["a"]) == 2 * MAX_ARRAY_GAP + 2
    assert call.arguments["a"][-1] == {"b": 1}


def test_max_array_gap_is_a_setting() -> None:
    buffer = ToolBuffer(progress_interval=None)
    buffer.max_array_gap = 2
    buffer.feed(at("a", 2))
    with pytest.raises(ChunkSequenceError, match="max_array_gap=2"):
        buffer.feed(at("a", 6))


def test_a_vertex_path_with_a_huge_index_is_refused() -> None:
    partial = {"jsonPath": "$.a[1000000]", "numberValue": 1}
    call = {"name": "f", "willContinue": True, "partialArgs": [partial]}
    event = {"candidates": [{"content": {"parts": [{"functionCall": call}]}}]}
    with pytest.raises(ChunkSequenceError, match="max_array_gap"):
        accumulate([event], "gemini")
