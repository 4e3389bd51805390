"""ToolBuffer on ToolChunks directly (no adapter): the sequence rules it enforces, how a call's
status is decided, ids, kinds, argument patches, the events `feed` returns, the hand-off to
the registry (`ToolCall.invocation` / `.ref`), and `partial_arguments` (notes/streaming.md
§8.2, §9)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import toolref.streaming.event as event_module
from toolref.streaming import (
    ABORTED,
    TRUNCATED,
    ArgPatch,
    ArgumentsProgress,
    CallCompleted,
    CallFailed,
    CallStarted,
    CallStatus,
    ToolBuffer,
    ToolCall,
    ToolChunk,
    ToolEvent,
    accumulate,
    partial_arguments,
)
from toolref.wire.canonical import digest_of
from toolref.wire.errors import ChunkSequenceError, UnusableToolCallError
from toolref.wire.models import Invocation

# --- helpers -----------------------------------------------------------------------------


class FakeClock:
    """A clock the test moves by hand; counts how often the buffer reads it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


def quiet() -> ToolBuffer:
    """A buffer that reports no ArgumentsProgress events."""
    return ToolBuffer(progress_interval=None)


def finished(text: str | None, *, name: str | None = "f", **fields: Any) -> ToolCall:
    """The call that one opening chunk (with `text` as its arguments) and a close give."""
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="call_1", name=name, args_delta=text, **fields))
    buffer.feed(ToolChunk(index=0, done=True))
    [call] = buffer.close()
    return call


def only(events: Sequence[ToolEvent], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def patch(*path: str | int, value: Any, append: bool = False) -> tuple[ArgPatch, ...]:
    return (ArgPatch(tuple(path), value, append),)


# --- sequence errors ----------------------------------------------------------------------


@pytest.mark.parametrize("ending", ["close", "abort"])
@pytest.mark.parametrize(
    "late",
    [
        ToolChunk(index=0, args_delta="{}"),
        ToolChunk(index=1, id="call_2", name="g"),
        ToolChunk(index=0, meta={"sig": "x"}),
        ToolChunk(done=True, finish_reason="stop"),
    ],
    ids=["arguments", "new-call", "meta", "turn-finish"],
)
def test_any_chunk_after_close_or_abort_is_refused(ending: str, late: ToolChunk) -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="call_1", name="f", args_delta="{}"))
    calls = buffer.close() if ending == "close" else buffer.abort()
    with pytest.raises(ChunkSequenceError, match=r"after close\(\) or abort\(\)"):
        buffer.feed(late)
    assert buffer.calls() == calls


@pytest.mark.parametrize("index", [-1, -7])
def test_a_negative_call_index_is_refused(index: int) -> None:
    buffer = quiet()
    with pytest.raises(ChunkSequenceError, match="not a non-negative integer"):
        buffer.feed(ToolChunk(index=index, id="call_1", name="f"))
    assert buffer.close() == []


@pytest.mark.parametrize(
    "content",
    [
        {"id": "call_1"},
        {"name": "f"},
        {"args_delta": '{"a"'},
        {"args_snapshot": '{"a": 1}'},
        {"args_snapshot": {"a": 1}},
        {"args_patch": patch("a", value=1)},
    ],
    ids=["id", "name", "delta", "text-snapshot", "object-snapshot", "patch"],
)
def test_call_content_in_a_turn_level_chunk_is_refused(content: dict[str, Any]) -> None:
    buffer = quiet()
    with pytest.raises(ChunkSequenceError, match="without a call index carries call content"):
        buffer.feed(ToolChunk(index=None, **content))


@pytest.mark.parametrize(
    "ender",
    [
        ToolChunk(turn=0, done=True, finish_reason="tool_calls"),
        ToolChunk(turn=0, error="cut off", error_type=TRUNCATED),
    ],
    ids=["finish", "error"],
)
def test_a_new_call_after_its_turn_finished_is_refused(ender: ToolChunk) -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, turn=0, id="call_1", name="f", args_delta="{}"))
    buffer.feed(ender)
    with pytest.raises(ChunkSequenceError, match="started after that turn finished"):
        buffer.feed(ToolChunk(index=1, turn=0, id="call_2", name="g"))
    # Other turns are not affected.
    buffer.feed(ToolChunk(index=1, turn=1, id="call_3", name="h", args_delta="{}"))
    assert [(c.turn, c.index, c.id) for c in buffer.close()] == [(0, 0, "call_1"), (1, 1, "call_3")]


@pytest.mark.parametrize(
    "content",
    [
        {"args_delta": " "},
        {"args_snapshot": '{"b": 2}'},
        {"args_snapshot": {"b": 2}},
        {"args_patch": patch("b", value=2)},
        {"error": "late failure", "error_type": ABORTED},
        {"name": "other"},
        {"id": "call_other"},
    ],
    ids=["delta", "text-snapshot", "object-snapshot", "patch", "error", "name", "id"],
)
def test_more_content_after_a_call_closed_is_refused(content: dict[str, Any]) -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="call_1", name="f", args_delta='{"a": 1}', done=True))
    with pytest.raises(ChunkSequenceError, match="more content after it closed"):
        buffer.feed(ToolChunk(index=0, **content))
    [call] = buffer.close()
    assert (call.id, call.name, call.arguments) == ("call_1", "f", {"a": 1})


def test_a_conflicting_id_on_an_open_call_is_refused() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="call_1", name="f"))
    buffer.feed(ToolChunk(index=0, id="call_1", args_delta="{}"))  # a repeat is fine
    with pytest.raises(ChunkSequenceError, match="a call has one id"):
        buffer.feed(ToolChunk(index=0, id="call_2", args_delta=""))


def test_a_closing_chunk_may_replace_the_id() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="fc_item", name="f", args_delta="{}"))
    [completed] = buffer.feed(ToolChunk(index=0, id="call_final", done=True))
    assert isinstance(completed, CallCompleted)
    assert completed.call.id == "call_final"
    assert [c.id for c in buffer.close()] == ["call_final"]


def test_text_then_patches_is_refused() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="call_1", name="f", args_delta='{"a": '))
    with pytest.raises(ChunkSequenceError, match="argument text and object arguments"):
        buffer.feed(ToolChunk(index=0, args_patch=patch("a", value=1)))


def test_patches_then_text_is_refused() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="call_1", name="f", args_patch=patch("a", value=1)))
    with pytest.raises(ChunkSequenceError, match="argument text and object arguments"):
        buffer.feed(ToolChunk(index=0, args_delta=', "b": 2}'))


def test_whitespace_text_then_patches_is_not_mixing() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="call_1", name="f", args_delta=" \n"))
    buffer.feed(ToolChunk(index=0, args_patch=patch("a", value=1), done=True))
    assert buffer.close()[0].arguments == {"a": 1}


def test_a_snapshot_switches_between_text_and_patches() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="call_1", name="f", args_delta='{"a": '))
    buffer.feed(ToolChunk(index=0, args_snapshot={"a": 1}))
    buffer.feed(ToolChunk(index=0, args_patch=patch("b", value=2)))
    buffer.feed(ToolChunk(index=0, args_snapshot='{"c": '))
    buffer.feed(ToolChunk(index=0, args_delta="3}", done=True))
    assert buffer.close()[0].arguments == {"c": 3}


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (patch("a", "b", value=1), patch("a", 0, value=2)),  # an index into an object
        (patch("a", 0, value=1), patch("a", "b", value=2)),  # a name into an array
        (patch("a", 0, value=1), patch("a", -1, value=2)),  # a negative array index
    ],
    ids=["int-into-object", "name-into-array", "negative-index"],
)
def test_a_patch_path_of_the_wrong_shape_is_refused(
    first: tuple[ArgPatch, ...], second: tuple[ArgPatch, ...]
) -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="call_1", name="f", args_patch=first))
    with pytest.raises(ChunkSequenceError, match="a patch must follow the shape"):
        buffer.feed(ToolChunk(index=0, args_patch=second))


@pytest.mark.parametrize("filled", [False, True], ids=["empty-array", "filled-array"])
def test_a_negative_index_inside_a_patch_path_is_refused(filled: bool) -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="call_1", name="f"))
    if filled:
        buffer.feed(ToolChunk(index=0, args_patch=patch("a", 0, "x", value=1)))
    with pytest.raises(ChunkSequenceError, match="a patch must follow the shape"):
        buffer.feed(ToolChunk(index=0, args_patch=patch("a", -1, "y", value=2)))


def test_a_patch_with_an_empty_path_is_refused() -> None:
    buffer = quiet()
    with pytest.raises(ChunkSequenceError, match="non-empty path"):
        buffer.feed(ToolChunk(index=0, id="call_1", name="f", args_patch=(ArgPatch((), 1),)))


@pytest.mark.parametrize("scalar", ["x", 5, True], ids=["string", "number", "bool"])
def test_a_patch_path_through_a_scalar_is_refused(scalar: Any) -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="call_1", name="f", args_patch=patch("a", value=scalar)))
    with pytest.raises(ChunkSequenceError, match="a patch must follow the shape"):
        buffer.feed(ToolChunk(index=0, args_patch=patch("a", "b", value=1)))
    [call] = buffer.close()
    assert call.arguments == {"a": scalar}


# --- metadata after close -----------------------------------------------------------------


def test_a_meta_only_chunk_after_close_merges_into_the_finished_call() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="call_1", name="f", meta={"google": {"a": 1}}))
    [completed] = buffer.feed(ToolChunk(index=0, args_delta="{}", done=True))
    assert isinstance(completed, CallCompleted)
    buffer.feed(ToolChunk(done=True, finish_reason="stop"))  # even after the turn finished

    events = buffer.feed(ToolChunk(index=0, meta={"google": {"b": 2}, "thought_signature": "s"}))
    assert list(events) == []
    assert list(buffer.feed(ToolChunk(index=0, meta={"late": True}, done=True))) == []

    [call] = buffer.close()
    assert call.meta == {"google": {"a": 1, "b": 2}, "thought_signature": "s", "late": True}
    assert (call.id, call.status, call.arguments) == ("call_1", CallStatus.COMPLETE, {})
    # The call already delivered is a value: it does not change under a late merge.
    assert completed.call.meta == {"google": {"a": 1}}


def test_meta_is_copied_not_shared_with_the_chunk() -> None:
    meta: dict[str, Any] = {"nested": {"k": [1]}}
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="call_1", name="f", meta=meta, args_delta="{}"))
    meta["nested"]["k"].append(2)
    assert buffer.close()[0].meta == {"nested": {"k": [1]}}


# --- statuses -----------------------------------------------------------------------------


@pytest.mark.parametrize("text", [None, "", "   ", " \n\t "])
def test_empty_or_whitespace_arguments_are_an_empty_object(text: str | None) -> None:
    call = finished(text)
    assert call.status is CallStatus.COMPLETE
    assert call.arguments == {}
    assert call.raw_arguments == (text or "")
    assert call.error is None
    assert call.runnable


def test_an_object_is_complete_and_keeps_its_raw_text() -> None:
    text = '{"city": "Zoë 🌍", "days": [1, 2.5, null, true], "q": "a\\"b\\n\\u00e9"}'
    call = finished(text)
    assert call.status is CallStatus.COMPLETE
    assert call.arguments == {
        "city": "Zoë 🌍",
        "days": [1, 2.5, None, True],
        "q": 'a"b\né',
    }
    assert call.raw_arguments == text


@pytest.mark.parametrize(
    ("text", "kind"),
    [("[1]", "list"), ('"x"', "str"), ("null", "NoneType"), ("1", "int"), ("true", "bool")],
)
def test_arguments_that_are_not_an_object_are_invalid(text: str, kind: str) -> None:
    call = finished(text)
    assert call.status is CallStatus.INVALID
    assert call.arguments is None
    assert call.raw_arguments == text
    assert call.error == f"arguments are a JSON {kind}, not an object"
    assert call.error_type is None
    assert not call.runnable


@pytest.mark.parametrize(
    "text",
    ['{"a":1}{"b":2}', '{"a": 1} {"b": 2}', '{"a": 1,}', '{"a": ', '{"loc', "{'a': 1}", "x"],
)
def test_text_that_a_strict_parse_rejects_is_invalid(text: str) -> None:
    """The final parse is strict: trailing data (two calls merged into one slot) is not
    quietly dropped as a partial parser would."""
    call = finished(text)
    assert call.status is CallStatus.INVALID
    assert call.arguments is None
    assert call.raw_arguments == text
    assert call.error is not None
    assert call.error.startswith("arguments are not valid JSON")


@pytest.mark.parametrize(
    "text",
    ['{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', '{"a": [1, {"b": NaN}]}'],
)
def test_nan_and_infinity_are_rejected(text: str) -> None:
    call = finished(text)
    assert call.status is CallStatus.INVALID
    assert call.arguments is None
    assert call.error is not None
    assert "not JSON" in call.error


@pytest.mark.parametrize("text", ['{"a": 1e999}', '{"a": -1e400}', '{"a": [1E+309]}'])
def test_numbers_that_overflow_to_infinity_are_rejected(text: str) -> None:
    """They would parse to inf: a complete call whose ref cannot be computed."""
    call = finished(text)
    assert call.status is CallStatus.INVALID
    assert call.arguments is None
    assert call.error is not None
    assert call.error.startswith("arguments are not valid JSON")


def test_large_finite_numbers_are_kept() -> None:
    call = finished(f'{{"a": 1.7976931348623157e308, "b": -5e-324, "c": {10**40}}}')
    assert call.arguments == {"a": 1.7976931348623157e308, "b": -5e-324, "c": 10**40}
    assert call.ref(None) == Invocation(name="f", args=call.arguments, result=None).digest().ref


@pytest.mark.parametrize("name", [None, ""])
def test_a_call_without_a_name_is_invalid(name: str | None) -> None:
    call = finished('{"a": 1}', name=name)
    assert call.status is CallStatus.INVALID
    assert call.name == ""
    assert call.arguments is None
    assert call.raw_arguments == '{"a": 1}'
    assert call.error == "no tool name arrived for this call"


def test_a_name_may_arrive_after_the_arguments() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, args_delta='{"a": 1}'))
    buffer.feed(ToolChunk(index=0, name="late", done=True))
    [call] = buffer.close()
    assert (call.name, call.status) == ("late", CallStatus.COMPLETE)


def test_a_turn_error_makes_that_turns_open_calls_incomplete_and_nothing_else() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, turn=0, id="a", name="f", args_delta='{"x": 1}', done=True))
    buffer.feed(ToolChunk(index=2, turn=0, id="c", name="f", args_delta='{"x": 3'))
    buffer.feed(ToolChunk(index=1, turn=0, id="b", name="f", args_delta='{"x": 2}'))
    buffer.feed(ToolChunk(index=0, turn=1, id="d", name="g", args_delta='{"y": 4}'))

    events = buffer.feed(ToolChunk(turn=0, error="max tokens", error_type=TRUNCATED))

    assert [type(e) for e in events] == [CallFailed, CallFailed]
    failed = [e.call for e in events if isinstance(e, CallFailed)]
    assert [c.id for c in failed] == ["b", "c"]  # in call order
    for call in failed:
        assert call.status is CallStatus.INCOMPLETE
        assert call.arguments is None
        assert (call.error, call.error_type) == ("max tokens", TRUNCATED)
        assert not call.runnable
    assert [c.raw_arguments for c in failed] == ['{"x": 2}', '{"x": 3']
    assert buffer.errors == {0: (TRUNCATED, "max tokens")}

    calls = buffer.close()
    assert [(c.turn, c.index, c.status) for c in calls] == [
        (0, 0, CallStatus.COMPLETE),  # closed before the error: untouched
        (0, 1, CallStatus.INCOMPLETE),
        (0, 2, CallStatus.INCOMPLETE),
        (1, 0, CallStatus.COMPLETE),  # another turn: untouched
    ]
    assert calls[0].arguments == {"x": 1}
    assert calls[3].arguments == {"y": 4}
    assert buffer.has_tool_calls


def test_a_call_level_error_makes_only_that_call_incomplete() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="a", name="f", args_delta='{"x": 1}'))
    buffer.feed(ToolChunk(index=1, id="b", name="f", args_delta='{"x": 2}'))
    [failed] = buffer.feed(ToolChunk(index=0, error="cut", error_type=TRUNCATED))
    assert isinstance(failed, CallFailed)
    assert failed.call.status is CallStatus.INCOMPLETE
    assert failed.call.error_type == TRUNCATED
    assert [c.status for c in buffer.close()] == [CallStatus.INCOMPLETE, CallStatus.COMPLETE]


def test_the_turn_finish_closes_open_calls_and_records_the_reason() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=1, id="b", name="f", args_delta="{}"))
    buffer.feed(ToolChunk(index=0, id="a", name="f", args_delta='{"a":'))
    events = buffer.feed(ToolChunk(done=True, finish_reason="stop"))
    assert [type(e) for e in events] == [CallFailed, CallCompleted]
    assert [e.call.index for e in events if isinstance(e, CallFailed | CallCompleted)] == [0, 1]
    assert buffer.finish_reasons == {0: "stop"}
    assert buffer.errors == {}
    # The turn is over: the calls are final before close().
    assert [c.status for c in buffer.calls()] == [CallStatus.INVALID, CallStatus.COMPLETE]


def test_close_finalizes_open_calls_normally() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="a", name="f", args_delta='{"a": 1}'))
    buffer.feed(ToolChunk(index=1, id="b", name="g", args_delta='{"b": '))
    buffer.feed(ToolChunk(index=2, id="c", name="h"))
    assert buffer.calls() == []  # nothing closed yet
    calls = buffer.close()
    assert [(c.id, c.status) for c in calls] == [
        ("a", CallStatus.COMPLETE),
        ("b", CallStatus.INVALID),  # closed as it stands: invalid, not incomplete
        ("c", CallStatus.COMPLETE),
    ]
    assert calls[0].arguments == {"a": 1}
    assert calls[2].arguments == {}
    assert all(c.error_type is None for c in calls)
    assert buffer.close() == calls  # idempotent
    assert buffer.abort() == calls  # already closed: nothing changes


def test_abort_makes_open_calls_incomplete() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="a", name="f", args_delta='{"a": 1}', done=True))
    buffer.feed(ToolChunk(index=1, id="b", name="f", args_delta='{"b": 2}'))
    calls = buffer.abort()
    assert [(c.id, c.status, c.error_type) for c in calls] == [
        ("a", CallStatus.COMPLETE, None),
        ("b", CallStatus.INCOMPLETE, ABORTED),
    ]
    assert calls[1].error == "the stream was aborted"
    assert calls[1].raw_arguments == '{"b": 2}'
    assert buffer.close() == calls
    assert buffer.has_tool_calls


def test_abort_takes_a_reason() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="a", name="f"))
    [call] = buffer.abort("client disconnected")
    assert (call.error, call.error_type) == ("client disconnected", ABORTED)


# --- ids ----------------------------------------------------------------------------------


def test_missing_ids_are_synthesized() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, name="f", args_delta="{}"))
    buffer.feed(ToolChunk(index=1, name="g", args_delta="{}"))
    buffer.feed(ToolChunk(index=2, id="call_real", name="h", args_delta="{}"))
    calls = buffer.close()
    assert [c.id for c in calls] == ["call_toolref_1", "call_toolref_2", "call_real"]
    assert [c.meta.get("synthesized_id") for c in calls] == [True, True, None]
    assert all(c.status is CallStatus.COMPLETE for c in calls)


def test_a_synthesized_id_skips_ids_already_taken() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="call_toolref_2", name="f", args_delta="{}", done=True))
    buffer.feed(ToolChunk(index=1, name="g", args_delta="{}", done=True))
    calls = buffer.close()
    assert [c.id for c in calls] == ["call_toolref_2", "call_toolref_2_2"]
    assert "original_id" not in calls[1].meta


def test_a_synthesized_id_is_the_calls_place_whatever_order_calls_close_in() -> None:
    """Gemini keeps a whole call open until the turn ends while Vertex closes streamed calls
    at once: the first call is still call_toolref_1."""
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, name="f", args_snapshot={}))
    buffer.feed(ToolChunk(index=1, name="g", args_delta="{}", done=True))
    buffer.feed(ToolChunk(index=None, done=True))
    assert [c.id for c in buffer.close()] == ["call_toolref_1", "call_toolref_2"]


def test_many_repeats_of_one_id_get_distinct_suffixes_in_order() -> None:
    buffer = ToolBuffer(progress_interval=None, max_calls=2000)
    for index in range(2000):
        buffer.feed(ToolChunk(index=index, id="dup", name="f", args_delta="{}", done=True))
    ids = [c.id for c in buffer.close()]
    assert ids[:3] == ["dup", "dup_2", "dup_3"]
    assert ids[-1] == "dup_2000"
    assert len(set(ids)) == 2000


def test_duplicate_ids_are_renamed_and_keep_the_original() -> None:
    buffer = quiet()
    for index in range(3):
        buffer.feed(ToolChunk(index=index, id="dup", name="f", args_delta="{}"))
    calls = buffer.close()
    assert [c.id for c in calls] == ["dup", "dup_2", "dup_3"]
    assert [c.meta.get("original_id") for c in calls] == [None, "dup", "dup"]


def test_a_renamed_id_avoids_ids_already_taken() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="dup_2", name="f", args_delta="{}"))
    buffer.feed(ToolChunk(index=1, id="dup", name="f", args_delta="{}"))
    buffer.feed(ToolChunk(index=2, id="dup", name="f", args_delta="{}"))
    calls = buffer.close()
    assert [c.id for c in calls] == ["dup_2", "dup", "dup_3"]
    assert len({c.id for c in calls}) == 3


def test_ids_are_unique_across_turns() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, turn=0, id="call_1", name="f", args_delta="{}"))
    buffer.feed(ToolChunk(index=0, turn=1, id="call_1", name="f", args_delta="{}"))
    buffer.feed(ToolChunk(index=1, turn=1, name="f", args_delta="{}"))
    buffer.feed(ToolChunk(index=0, turn=2, name="f", args_delta="{}"))
    calls = buffer.close()
    assert [(c.turn, c.id) for c in calls] == [
        (0, "call_1"),
        (1, "call_1_2"),
        (1, "call_toolref_3"),
        (2, "call_toolref_4"),
    ]
    assert calls[1].meta["original_id"] == "call_1"


# --- kinds and provider-executed calls ----------------------------------------------------


@pytest.mark.parametrize(
    "text", ["print('hi')\n", "", "{not json", '{"a": 1}'], ids=["code", "empty", "brace", "json"]
)
def test_a_custom_call_takes_its_raw_input_as_is(text: str) -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="c", name="code_exec", kind="custom", args_delta=text))
    [call] = buffer.close()
    assert call.kind == "custom"
    assert call.status is CallStatus.COMPLETE
    assert call.arguments == {"input": text}
    assert call.raw_arguments == text
    assert call.runnable


def test_a_responses_custom_tool_call_takes_its_raw_input() -> None:
    item = {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_1", "name": "code"}
    events = [
        {"type": "response.output_item.added", "output_index": 0, "item": {**item, "input": ""}},
        {"type": "response.custom_tool_call_input.delta", "output_index": 0, "delta": "print("},
        {"type": "response.custom_tool_call_input.delta", "output_index": 0, "delta": "1)"},
        {"type": "response.custom_tool_call_input.done", "output_index": 0, "input": "print(1)"},
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {**item, "input": "print(1)", "status": "completed"},
        },
        {"type": "response.completed", "response": {"status": "completed", "output": []}},
    ]
    [call] = accumulate(events, "openai_responses")
    assert call.status is CallStatus.COMPLETE
    assert call.arguments == {"input": "print(1)"}


def test_provider_executed_calls_are_not_runnable() -> None:
    buffer = quiet()
    buffer.feed(
        ToolChunk(
            index=0,
            id="srvtoolu_1",
            name="web_search",
            kind="server_tool_use",
            provider_executed=True,
            args_delta='{"query": "x"}',
            done=True,
        )
    )
    assert not buffer.has_tool_calls
    [server] = buffer.calls()
    assert server.status is CallStatus.COMPLETE
    assert server.provider_executed
    assert server.kind == "server_tool_use"
    assert not server.runnable

    buffer.feed(ToolChunk(index=1, id="toolu_1", name="f", args_delta="{"))
    buffer.feed(ToolChunk(index=2, id="toolu_2", name="g", error="x", error_type=ABORTED))
    assert not buffer.has_tool_calls  # an invalid or incomplete call does not count either
    buffer.close()
    assert not buffer.has_tool_calls

    runnable = quiet()
    runnable.feed(ToolChunk(index=0, id="toolu_3", name="f", args_delta="{}", done=True))
    assert runnable.has_tool_calls


# --- argument patches ---------------------------------------------------------------------


def test_patches_build_nested_objects_and_arrays() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="call_1", name="f", args_patch=patch("title", value="Ré")))
    buffer.feed(
        ToolChunk(
            index=0,
            args_patch=(
                ArgPatch(("items", 0, "name"), "apple"),
                ArgPatch(("items", 0, "tags", 0), "red"),
                ArgPatch(("items", 1, "name"), "pear"),
                ArgPatch(("deep", "a", "b"), None),
                ArgPatch(("sparse", 2), 3),
                ArgPatch(("flag",), True),
            ),
        )
    )
    buffer.feed(ToolChunk(index=0, args_patch=patch("items", 0, "tags", 1, value="round")))
    buffer.feed(ToolChunk(index=0, args_patch=patch("title", value="Replaced")))
    buffer.feed(ToolChunk(index=0, done=True))
    [call] = buffer.close()
    expected = {
        "title": "Replaced",
        "items": [{"name": "apple", "tags": ["red", "round"]}, {"name": "pear"}],
        "deep": {"a": {"b": None}},
        "sparse": [None, None, 3],
        "flag": True,
    }
    assert call.status is CallStatus.COMPLETE
    assert call.arguments == expected
    assert call.raw_arguments == (
        '{"title":"Replaced","items":[{"name":"apple","tags":["red","round"]},{"name":"pear"}],'
        '"deep":{"a":{"b":null}},"sparse":[null,null,3],"flag":true}'
    )


def test_patches_fill_nulls_and_array_gaps() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="call_1", name="f", args_patch=patch("a", value=None)))
    buffer.feed(ToolChunk(index=0, args_patch=patch("a", "b", value=1)))
    buffer.feed(ToolChunk(index=0, args_patch=patch("items", 1, value="second")))
    buffer.feed(ToolChunk(index=0, args_patch=patch("items", 0, "name", value="first")))
    buffer.feed(ToolChunk(index=0, done=True))
    assert buffer.close()[0].arguments == {"a": {"b": 1}, "items": [{"name": "first"}, "second"]}


def test_append_patches_concatenate_strings() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="call_1", name="f"))
    buffer.feed(ToolChunk(index=0, args_patch=patch("text", value="Hel", append=True)))
    buffer.feed(ToolChunk(index=0, args_patch=patch("text", value="lo, ", append=True)))
    buffer.feed(ToolChunk(index=0, args_patch=patch("text", value="wörld", append=True)))
    buffer.feed(ToolChunk(index=0, args_patch=patch("list", 0, value="a", append=True)))
    buffer.feed(ToolChunk(index=0, args_patch=patch("list", 0, value="b", append=True)))
    buffer.feed(ToolChunk(index=0, args_patch=patch("n", value=1)))
    buffer.feed(ToolChunk(index=0, args_patch=patch("n", value="x", append=True)))
    buffer.feed(ToolChunk(index=0, done=True))
    [call] = buffer.close()
    # Appending to a non-string (or to nothing) sets the value.
    assert call.arguments == {"text": "Hello, wörld", "list": ["ab"], "n": "x"}


def test_a_patched_call_without_a_name_is_invalid() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, args_patch=patch("a", value=1), done=True))
    [call] = buffer.close()
    assert call.status is CallStatus.INVALID
    assert call.raw_arguments == '{"a":1}'


def test_an_object_snapshot_is_copied_from_the_chunk() -> None:
    arguments: dict[str, Any] = {"a": {"b": [1]}}
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="call_1", name="f", args_snapshot=arguments))
    buffer.feed(ToolChunk(index=0, args_patch=patch("a", "c", value=2), done=True))
    arguments["a"]["b"].append(99)
    assert buffer.close()[0].arguments == {"a": {"b": [1], "c": 2}}
    assert arguments == {"a": {"b": [1, 99]}}


def test_a_text_snapshot_replaces_the_text_so_far() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="call_1", name="f", args_delta='{"a": "garbled'))
    buffer.feed(ToolChunk(index=0, args_snapshot='{"a": "final"}', done=True))
    [call] = buffer.close()
    assert call.arguments == {"a": "final"}
    assert call.raw_arguments == '{"a": "final"}'


# --- events -------------------------------------------------------------------------------


def test_call_started_is_reported_once_per_call() -> None:
    buffer = ToolBuffer(progress_interval=0)
    events = buffer.feed_all(
        [
            ToolChunk(index=0, id="a", name="f"),
            ToolChunk(index=1, args_delta="{"),
            ToolChunk(index=0, args_delta="{}"),
            ToolChunk(index=1, id="b", name="g", args_delta="}"),
            ToolChunk(index=1, meta={"k": 1}),
            ToolChunk(turn=1, index=0, id="c", name="h", args_delta="{}", done=True),
            ToolChunk(done=True),
        ]
    )
    started = only(events, CallStarted)
    # What the provider had sent when the call opened (call 1 had no id or name yet).
    assert started == [
        CallStarted(0, 0, "a", "f"),
        CallStarted(0, 1, None, None),
        CallStarted(1, 0, "c", "h"),
    ]
    assert [type(e) for e in buffer.feed(ToolChunk(turn=2, index=0, done=True))] == [
        CallStarted,
        CallFailed,  # no name: invalid
    ]


def test_completed_and_failed_events_carry_the_final_calls() -> None:
    buffer = quiet()
    opened = buffer.feed(ToolChunk(index=0, id="a", name="f", args_delta='{"x": 1}', done=True))
    assert [type(e) for e in opened] == [CallStarted, CallCompleted]
    buffer.feed(ToolChunk(index=1, id="b", name="f", args_delta="[]"))
    buffer.feed(ToolChunk(index=2, id="c", name="f", args_delta="{"))
    [invalid] = buffer.feed(ToolChunk(index=1, done=True))
    [incomplete] = buffer.feed(ToolChunk(index=2, error="gone", error_type=ABORTED))
    assert isinstance(opened[1], CallCompleted)
    assert isinstance(invalid, CallFailed)
    assert isinstance(incomplete, CallFailed)
    assert invalid.call.status is CallStatus.INVALID
    assert incomplete.call.status is CallStatus.INCOMPLETE
    assert [opened[1].call, invalid.call, incomplete.call] == buffer.close()


def test_a_close_reports_nothing_but_returns_the_calls() -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="a", name="f", args_delta="{}"))
    assert [c.id for c in buffer.close()] == ["a"]


def test_progress_is_throttled_per_call_by_the_clock() -> None:
    clock = FakeClock()
    buffer = ToolBuffer(progress_interval=0.5, clock=clock)

    def progress(chunk: ToolChunk) -> list[tuple[int, str]]:
        return [(e.index, e.text) for e in only(buffer.feed(chunk), ArgumentsProgress)]

    assert progress(ToolChunk(index=0, id="a", name="f", args_delta="{")) == [(0, "{")]
    clock.now = 0.25
    assert progress(ToolChunk(index=0, args_delta='"k"')) == []
    # Each call has its own interval: call 1's first delta is reported at once.
    assert progress(ToolChunk(index=1, id="b", name="g", args_delta="[")) == [(1, "[")]
    clock.now = 0.5  # exactly one interval after call 0's last report
    assert progress(ToolChunk(index=0, args_delta=":")) == [(0, '{"k":')]
    assert progress(ToolChunk(index=1, args_delta="]")) == []
    clock.now = 0.75
    assert progress(ToolChunk(index=1, args_delta=" ")) == [(1, "[] ")]
    assert progress(ToolChunk(index=0, args_delta="1")) == []
    clock.now = 10.0
    # Snapshots and patches grow the arguments too; chunks without arguments do not.
    assert progress(ToolChunk(index=0, args_snapshot='{"k": 2')) == [(0, '{"k": 2')]
    assert progress(ToolChunk(index=2, id="c", name="h")) == []
    assert progress(ToolChunk(index=2, meta={"m": 1})) == []
    assert progress(ToolChunk(index=2, args_patch=patch("p", value=1))) == [(2, "")]
    # A closing chunk reports the close, not progress.
    clock.now = 20.0
    assert progress(ToolChunk(index=0, args_delta="}", done=True)) == []


def test_a_zero_interval_reports_every_argument_chunk() -> None:
    clock = FakeClock()  # never moves
    buffer = ToolBuffer(progress_interval=0, clock=clock)
    texts = []
    for piece in ['{"a"', ": ", "1", "}"]:
        [update] = only(
            buffer.feed(ToolChunk(index=0, name="f", args_delta=piece)), ArgumentsProgress
        )
        texts.append(update.text)
    assert texts == ['{"a"', '{"a": ', '{"a": 1', '{"a": 1}']


def test_no_interval_reports_no_progress_and_never_reads_the_clock() -> None:
    clock = FakeClock()
    buffer = ToolBuffer(progress_interval=None, clock=clock)
    events = buffer.feed_all(
        [
            ToolChunk(index=0, id="a", name="f", args_delta='{"a": '),
            ToolChunk(index=0, args_delta="1}"),
            ToolChunk(index=1, id="b", name="g", args_patch=patch("x", value=1)),
            ToolChunk(index=1, args_snapshot={"y": 2}),
        ]
    )
    assert only(events, ArgumentsProgress) == []
    assert [type(e) for e in events] == [CallStarted, CallStarted]
    assert clock.reads == 0


def test_the_opening_chunk_reports_start_then_progress() -> None:
    buffer = ToolBuffer(progress_interval=0, clock=FakeClock())
    events = buffer.feed(ToolChunk(index=0, id="a", name="f", args_delta='{"q": "x'))
    assert [type(e) for e in events] == [CallStarted, ArgumentsProgress]
    update = events[1]
    assert isinstance(update, ArgumentsProgress)
    assert (update.turn, update.index, update.name) == (0, 0, "f")
    assert update.value == {"q": "x"}


def test_progress_shows_the_text_as_it_was_at_the_event() -> None:
    buffer = ToolBuffer(progress_interval=0, clock=FakeClock())
    [_, first] = buffer.feed(ToolChunk(index=0, id="a", name="f", args_delta='{"city": "Pa'))
    [second] = buffer.feed(ToolChunk(index=0, args_delta='ris", "days": 1'))
    [third] = buffer.feed(ToolChunk(index=0, args_snapshot='{"city": "Rome"'))
    buffer.feed(ToolChunk(index=0, args_delta=', "days": 2}'))
    [fourth] = buffer.feed(ToolChunk(index=0, args_snapshot="{}"))
    buffer.feed(ToolChunk(index=0, done=True))
    updates = [first, second, third, fourth]
    assert all(isinstance(u, ArgumentsProgress) for u in updates)
    # Read only now, after more chunks, a snapshot and the close.
    assert [u.text for u in updates if isinstance(u, ArgumentsProgress)] == [
        '{"city": "Pa',
        '{"city": "Paris", "days": 1',
        '{"city": "Rome"',
        "{}",
    ]
    assert [u.value for u in updates if isinstance(u, ArgumentsProgress)] == [
        {"city": "Pa"},
        {"city": "Paris", "days": 1},
        {"city": "Rome"},
        {},
    ]
    assert buffer.close()[0].arguments == {}


def test_progress_of_a_patched_call_shows_the_object_as_it_was() -> None:
    buffer = ToolBuffer(progress_interval=0, clock=FakeClock())
    [_, first] = buffer.feed(ToolChunk(index=0, id="a", name="f", args_patch=patch("a", value=1)))
    [second] = buffer.feed(ToolChunk(index=0, args_patch=patch("b", "c", value="x")))
    buffer.feed(ToolChunk(index=0, args_patch=patch("b", "c", value="y", append=True), done=True))
    assert isinstance(first, ArgumentsProgress)
    assert isinstance(second, ArgumentsProgress)
    assert first.value == {"a": 1}
    assert second.value == {"a": 1, "b": {"c": "x"}}
    assert buffer.close()[0].arguments == {"a": 1, "b": {"c": "xy"}}


def test_progress_text_and_value_are_computed_only_when_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed: list[str] = []

    def counting(text: str) -> dict[str, Any] | None:
        parsed.append(text)
        return partial_arguments(text)

    monkeypatch.setattr(event_module, "partial_arguments", counting)
    buffer = ToolBuffer(progress_interval=0, clock=FakeClock())
    events = buffer.feed_all(ToolChunk(index=0, name="f", args_delta=p) for p in ['{"a"', ":1"])
    updates = only(events, ArgumentsProgress)
    assert len(updates) == 2
    assert parsed == []  # feeding parsed nothing
    assert updates[0].value == {}
    assert parsed == ['{"a"']
    assert updates[1].value == {"a": 1}
    assert parsed == ['{"a"', '{"a":1']


def test_calls_are_ordered_by_turn_and_index_whatever_the_completion_order() -> None:
    buffer = quiet()
    order = [(1, 1), (0, 2), (1, 0), (0, 0), (0, 1)]
    for turn, index in order:
        buffer.feed(ToolChunk(turn=turn, index=index, id=f"c{turn}{index}", name="f"))
    seen = []
    for turn, index in order:
        buffer.feed(ToolChunk(turn=turn, index=index, args_delta="{}", done=True))
        seen.append([(c.turn, c.index) for c in buffer.calls()])
    assert seen[1] == [(0, 2), (1, 1)]
    expected = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    assert seen[-1] == expected
    assert [(c.turn, c.index) for c in buffer.close()] == expected


# --- hand-off to the registry -------------------------------------------------------------


def test_invocation_and_ref_of_a_complete_call() -> None:
    call = finished(f'{{"path": "src/app.py", "n": [1, {2**64}]}}')
    result = {"lines": ["print('hi')"], "note": "Zoë 🌍"}
    invocation = call.invocation(result)
    assert invocation == Invocation(name="f", args=call.arguments, result=result, is_error=False)
    assert call.ref(result) == Invocation(name="f", args=call.arguments, result=result).digest().ref
    wire = {"name": "f", "args": {"path": "src/app.py", "n": [1, 2**64]}, "result": result}
    assert call.ref(result) == digest_of(wire).ref


def test_is_error_is_part_of_the_ref() -> None:
    call = finished('{"cmd": "ls"}')
    failed = call.invocation("boom", is_error=True)
    assert failed.is_error
    expected = Invocation(name="f", args={"cmd": "ls"}, result="boom", is_error=True).digest().ref
    assert call.ref("boom", is_error=True) == expected
    assert call.ref("boom", is_error=True) != call.ref("boom")


def test_a_custom_calls_ref_covers_its_input() -> None:
    call = finished("print(1)", kind="custom")
    assert call.ref(1) == Invocation(name="f", args={"input": "print(1)"}, result=1).digest().ref


@pytest.mark.parametrize(
    ("text", "error", "status"),
    [
        ('{"a": ', None, "invalid"),
        ("[1]", None, "invalid"),
        ('{"a": 1}', "cut off", "incomplete"),
        ('{"a": 1', "cut off", "incomplete"),
    ],
)
def test_an_unusable_call_has_no_invocation_or_ref(
    text: str, error: str | None, status: str
) -> None:
    buffer = quiet()
    buffer.feed(ToolChunk(index=0, id="call_9", name="f", args_delta=text))
    if error is not None:
        buffer.feed(ToolChunk(index=0, error=error, error_type=TRUNCATED))
    [call] = buffer.close()
    assert call.status.value == status
    with pytest.raises(UnusableToolCallError, match=status) as caught:
        call.invocation("result")
    assert caught.value.extra == {"callId": "call_9", "status": status}
    with pytest.raises(UnusableToolCallError):
        call.ref("result")


def test_a_call_without_a_name_has_no_invocation() -> None:
    call = finished("{}", name=None)
    with pytest.raises(UnusableToolCallError, match="unnamed"):
        call.invocation(None)


# --- partial_arguments (display only) -----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("  \n", {}),
        ("{", {}),
        ('{"loc', {}),
        ('{"location": "San Fra', {"location": "San Fra"}),
        ('{"location": "SF", "days": 1', {"location": "SF", "days": 1}),
        ('{"location": "SF", "days": 12.', {"location": "SF"}),
        ('{"a": [1, 2, {"b": tr', {"a": [1, 2, {}]}),
        ('{"a": "x\\', {"a": "x"}),
        ('{"a": 1}{"b": 2}', {"a": 1}),  # trailing data ignored: display only
        ('{"a": 1} trailing', {"a": 1}),
        ('{"a": "Zoë 🌍", "b": {"c": ["d', {"a": "Zoë 🌍", "b": {"c": ["d"]}}),
        ('{"a": 1,}', None),  # a real syntax error
        ("garbage", None),
        ("[1, 2", None),  # not an object
        ('"str', None),
        ("null", None),
    ],
)
def test_partial_arguments(text: str, expected: dict[str, Any] | None) -> None:
    assert partial_arguments(text) == expected
