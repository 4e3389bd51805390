"""Found in review (streaming bounds): a hostile stream costs the buffer and the OpenAI Chat
adapter work linear in its length, and memory within the buffer's limits (`max_calls`,
`max_argument_chars`), each refused with `ChunkSequenceError` naming the setting."""

from __future__ import annotations

from typing import Any

import pytest

import toolref.streaming.adapters.openai_chat as openai_chat_module
import toolref.streaming.arguments as arguments_module
import toolref.streaming.buffer as buffer_module
from tests.unit.streaming.steps import growth
from toolref.streaming import (
    ArgPatch,
    ArgumentsProgress,
    CallCompleted,
    CallStatus,
    ToolBuffer,
    ToolChunk,
    accumulate,
)
from toolref.streaming.arguments import apply_patch
from toolref.wire.errors import ChunkSequenceError, ConfigurationError


def quiet(**limits: Any) -> ToolBuffer:
    return ToolBuffer(progress_interval=None, **limits)


# --- linear work ---


def one_call_per_turn(turns: int) -> list[Any]:
    """A response with `turns` choices, each holding one call and then its finish."""
    buffer = quiet()
    for turn in range(turns):
        buffer.feed(ToolChunk(turn=turn, index=0, id=f"c{turn}", name="f", args_delta="{}"))
        buffer.feed(ToolChunk(turn=turn, done=True, finish_reason="tool_calls"))
    return buffer.close()


def test_finishing_many_turns_is_linear() -> None:
    """Each finished turn walked every call of the response (sorted them all, then picked
    its own): 4,000 one-call turns took 0.32 s, 40,000 about 30 s."""
    calls = one_call_per_turn(300)
    assert [(c.turn, c.id, c.status) for c in calls] == [
        (turn, f"c{turn}", CallStatus.COMPLETE) for turn in range(300)
    ]
    assert growth(one_call_per_turn, 300, buffer_module) < 2.2


def test_a_finished_turn_closes_its_own_open_calls_in_index_order() -> None:
    buffer = quiet()
    for turn, index in [(0, 2), (1, 0), (0, 0), (0, 1)]:
        buffer.feed(ToolChunk(turn=turn, index=index, id=f"c{turn}{index}", name="f"))
    buffer.feed(ToolChunk(turn=0, index=1, args_delta="{}", done=True))
    events = buffer.feed(ToolChunk(turn=0, done=True))
    assert [e.call.id for e in events if isinstance(e, CallCompleted)] == ["c00", "c02"]
    assert len(events) == 2
    assert buffer.feed(ToolChunk(turn=0, done=True)) == []  # nothing left open in it
    assert [c.id for c in buffer.close()] == ["c00", "c01", "c02", "c10"]


def openai_choices(turns: int) -> list[Any]:
    events: list[Any] = []
    for turn in range(turns):
        fragment = {"index": 0, "id": f"c{turn}", "function": {"name": "f", "arguments": "{}"}}
        events.append({"choices": [{"index": turn, "delta": {"tool_calls": [fragment]}}]})
        events.append({"choices": [{"index": turn, "delta": {}, "finish_reason": "tool_calls"}]})
    return accumulate(events, "openai_chat")


def test_an_openai_stream_of_many_choices_is_linear() -> None:
    assert len(openai_choices(200)) == 200
    assert growth(openai_choices, 200, buffer_module, openai_chat_module) < 2.2


def openai_indexes(calls: int, shared_id: bool) -> list[Any]:
    """One choice with `calls` calls, each at a new index with an id: a new index with an id
    looked at every earlier call of the turn for that id (LocalAI's resends)."""
    fragments = [
        {
            "index": n,
            "id": "call_0" if shared_id else f"call_{n}",
            "function": {"name": "f", "arguments": f'{{"n": {n}}}'},
        }
        for n in range(calls)
    ]
    events = [{"choices": [{"index": 0, "delta": {"tool_calls": [f]}}]} for f in fragments]
    return accumulate([*events, "[DONE]"], "openai_chat")


@pytest.mark.parametrize("shared_id", [False, True], ids=["own-ids", "one-id-for-all"])
def test_a_new_index_with_an_id_costs_the_same_however_many_calls_came_before(
    shared_id: bool,
) -> None:
    calls = openai_indexes(200, shared_id)
    assert [c.arguments for c in calls] == [{"n": n} for n in range(200)]
    ids = ["call_0", *(f"call_0_{n + 1}" for n in range(1, 200))] if shared_id else None
    assert [c.id for c in calls] == (ids or [f"call_{n}" for n in range(200)])
    assert growth(lambda n: openai_indexes(n, shared_id), 200, openai_chat_module) < 2.2


# --- max_calls ---


def test_max_calls_refuses_the_call_past_it() -> None:
    buffer = quiet(max_calls=3)
    for index in range(3):
        buffer.feed(ToolChunk(index=index, id=f"c{index}", name="f", args_delta="{}"))
    with pytest.raises(ChunkSequenceError, match=r"max_calls=3.*ToolBuffer\(max_calls=") as info:
        buffer.feed(ToolChunk(index=3, id="c3", name="f"))
    assert info.value.extra == {"limit": "max_calls", "maximum": 3}
    buffer.feed(ToolChunk(index=2, args_delta=" ", done=True))  # the calls it holds go on
    assert [c.id for c in buffer.close()] == ["c0", "c1", "c2"]


def test_max_calls_counts_the_calls_of_every_turn() -> None:
    buffer = quiet(max_calls=2)
    buffer.feed(ToolChunk(turn=0, index=0, name="f"))
    buffer.feed(ToolChunk(turn=0, done=True))
    buffer.feed(ToolChunk(turn=1, index=0, name="f"))
    with pytest.raises(ChunkSequenceError, match="max_calls"):
        buffer.feed(ToolChunk(turn=2, index=0, name="f"))


def test_the_default_max_calls_is_1024() -> None:
    buffer = quiet()
    for index in range(1024):
        buffer.feed(ToolChunk(index=index, name="f"))
    with pytest.raises(ChunkSequenceError, match="max_calls=1024"):
        buffer.feed(ToolChunk(index=1024, name="f"))


# --- max_argument_chars ---


def test_argument_text_past_max_argument_chars_is_refused() -> None:
    buffer = quiet(max_argument_chars=10)
    buffer.feed(ToolChunk(index=0, name="f", args_delta='{"a":'))
    buffer.feed(ToolChunk(index=0, args_delta='"xyz"'))  # 10 characters: at the limit
    with pytest.raises(
        ChunkSequenceError, match=r"11 characters.*max_argument_chars=10.*ToolBuffer\("
    ) as info:
        buffer.feed(ToolChunk(index=0, args_delta="}"))
    assert info.value.extra == {"limit": "max_argument_chars", "maximum": 10}
    [call] = buffer.close()
    assert call.raw_arguments == '{"a":"xyz"'  # the refused delta was not kept


def test_max_argument_chars_is_for_the_whole_response() -> None:
    buffer = quiet(max_argument_chars=8)
    buffer.feed(ToolChunk(turn=0, index=0, name="f", args_delta='{"a":1}', done=True))
    with pytest.raises(ChunkSequenceError, match="max_argument_chars"):
        buffer.feed(ToolChunk(turn=1, index=0, name="f", args_delta="{}"))


def test_a_snapshot_replaces_what_it_counts() -> None:
    """A cumulative server resends the whole text: what the buffer holds is the last one."""
    buffer = quiet(max_argument_chars=10)
    for text in ['{"a"', '{"a":', '{"a":"xyz"', '{"a":"xyz"']:
        buffer.feed(ToolChunk(index=0, name="f", args_snapshot=text))
    with pytest.raises(ChunkSequenceError, match="max_argument_chars"):
        buffer.feed(ToolChunk(index=0, args_snapshot='{"a":"xyz"}'))


def test_object_arguments_count_as_their_json() -> None:
    buffer = quiet(max_argument_chars=12)
    buffer.feed(ToolChunk(index=0, name="f", args_snapshot={"a": "xyz"}))  # {"a":"xyz"}
    buffer.feed(ToolChunk(index=0, args_patch=(ArgPatch(("a",), "!", append=True),)))
    with pytest.raises(ChunkSequenceError, match="max_argument_chars"):
        buffer.feed(ToolChunk(index=0, args_patch=(ArgPatch(("b",), 12),)))
    [call] = buffer.close()
    assert call.arguments == {"a": "xyz!"}


def test_a_leaf_set_again_counts_its_new_value_not_both() -> None:
    """A patch that sets a leaf again replaces its value: what the call holds is the last
    value, however often it was set (re-setting a 10-character value 1,000 times is not
    10,000 characters)."""
    buffer = quiet(max_argument_chars=40)
    buffer.feed(ToolChunk(index=0, name="f", args_patch=(ArgPatch(("a",), {"b": [1, 2]}),)))
    for n in range(1000):
        value = f"{n:08d}"  # "00000042": 10 characters as JSON
        buffer.feed(ToolChunk(index=0, args_patch=(ArgPatch(("a", "b"), value),)))
        buffer.feed(ToolChunk(index=0, args_patch=(ArgPatch(("s",), value),)))
        buffer.feed(ToolChunk(index=0, args_patch=(ArgPatch(("s",), "x", append=True),)))
    buffer.feed(ToolChunk(index=0, args_patch=(ArgPatch(("a",), "y" * 10),)))  # a subtree
    buffer.feed(ToolChunk(index=0, args_patch=(ArgPatch(("t",), "z" * 15),)))  # 12+11+17
    with pytest.raises(ChunkSequenceError, match=r"41 characters.*max_argument_chars=40"):
        buffer.feed(ToolChunk(index=0, args_patch=(ArgPatch(("u",), 1),)))
    [call] = buffer.close()
    assert call.arguments == {"a": "y" * 10, "s": "00000999x", "t": "z" * 15}


def test_leaves_set_again_within_one_chunk_are_measured_as_they_stand() -> None:
    """Patches of one chunk that set the same leaf (or a leaf and the object above it): the
    call holds what the last one left."""
    buffer = quiet(max_argument_chars=30)
    buffer.feed(ToolChunk(index=0, name="f", args_patch=(ArgPatch(("a",), "x" * 8),)))
    for n in range(200):
        patches = (
            ArgPatch(("a",), "x" * 8),
            ArgPatch(("a",), {"b": "y" * 4}),
            ArgPatch(("a", "b"), f"{n:06d}"),
            ArgPatch(("a", "b"), "!", append=True),
        )
        buffer.feed(ToolChunk(index=0, args_patch=patches))
    buffer.feed(ToolChunk(index=0, args_patch=(ArgPatch(("t",), "z" * 19),)))  # 9 + 21 held
    with pytest.raises(ChunkSequenceError, match=r"31 characters.*max_argument_chars=30"):
        buffer.feed(ToolChunk(index=0, args_patch=(ArgPatch(("u",), 1),)))
    [call] = buffer.close()
    assert call.arguments == {"a": {"b": "000199!"}, "t": "z" * 19}


def test_leaves_set_again_cost_linear_work() -> None:
    """Each patch costs its path and the value it replaces (dropped by it): an object set
    again and again, its leaves set again between, is linear in the stream."""

    def resets(n: int) -> object:
        buffer = quiet()
        buffer.feed(ToolChunk(index=0, name="f", args_patch=(ArgPatch(("a",), {}),)))
        for k in range(n):
            patches = [ArgPatch(("a", f"k{k % 20}"), "v" * 8) for _ in range(2)]
            if k % 20 == 19:
                patches.append(ArgPatch(("a",), {"b": [1, 2, 3]}))
            buffer.feed(ToolChunk(index=0, args_patch=tuple(patches)))
        return buffer.close()

    assert growth(resets, 400, buffer_module, arguments_module) < 2.2


def test_a_limit_must_be_a_positive_count() -> None:
    for limits in ({"max_calls": 0}, {"max_argument_chars": -1}, {"max_calls": 2.5}):
        with pytest.raises(ConfigurationError, match="ToolBuffer"):
            ToolBuffer(**limits)


def test_a_long_string_appended_in_pieces_is_joined_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Vertex streams a long string as many `stringValue`s for one path (`append` patches):
    each was concatenated to the string so far, copying it (2 MB in 5-character pieces took
    38 s). The pieces are kept and joined once, when the object is read."""
    copied: list[int] = []

    def counting(obj: dict[str, Any], patch: ArgPatch, *limits: int) -> bool:
        held = obj.get("s") if patch.path == ("s",) else None
        copied.append(len(held) if patch.append and isinstance(held, str) else 0)
        return apply_patch(obj, patch, *limits)

    monkeypatch.setattr("toolref.streaming.buffer.apply_patch", counting)
    buffer = ToolBuffer(progress_interval=None)
    buffer.feed(ToolChunk(index=0, id="c", name="f", args_patch=(ArgPatch(("s",), ""),)))
    for n in range(2000):
        piece = ArgPatch(("s",), f"{n % 10}" * 5, append=True)
        buffer.feed(ToolChunk(index=0, args_patch=(piece, ArgPatch(("n",), n))))
        if n == 999:  # another path between two runs: each run is joined, in order
            buffer.feed(ToolChunk(index=0, args_patch=(ArgPatch(("t",), "x", append=True),)))
    [call] = buffer.close()
    expected = "".join(f"{n % 10}" * 5 for n in range(2000))
    assert call.arguments == {"s": expected, "n": 1999, "t": "x"}
    assert sum(copied) <= 3 * len(expected), sum(copied)  # was 2,000 copies: 10 million


def test_progress_shows_the_pieces_appended_so_far() -> None:
    buffer = ToolBuffer(progress_interval=0)
    buffer.feed(ToolChunk(index=0, id="c", name="f", args_patch=(ArgPatch(("s",), "a"),)))
    events = [
        buffer.feed(ToolChunk(index=0, args_patch=(ArgPatch(("s",), p, append=True),)))
        for p in "bcd"
    ]
    shown = [e.value for [e] in events if isinstance(e, ArgumentsProgress)]
    assert shown == [{"s": "ab"}, {"s": "abc"}, {"s": "abcd"}]
    buffer.feed(ToolChunk(index=0, args_snapshot={"s": "z"}))
    buffer.feed(ToolChunk(index=0, args_patch=(ArgPatch(("s",), "y", append=True),)))
    [call] = buffer.close()
    assert call.arguments == {"s": "zy"}
