"""Found in review (streaming bounds): the tracker's `kinds` checked where given, and a
location's `line` held to the schema's uint32 (refused from the caller, dropped when it
comes from the model's arguments)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from toolref.acp import ToolCallTracker, ToolKind, locations_for, text_content, tool_kind
from toolref.acp.state import ToolCallState
from toolref.streaming import CallStatus, ToolCall
from toolref.wire.errors import AcpError

MakeTracker = Callable[..., ToolCallTracker]
Sent = list[dict[str, Any]]
UINT32_MAX = 2**32 - 1


def complete(call_id: str, name: str, arguments: dict[str, Any]) -> ToolCall:
    return ToolCall(
        index=0,
        id=call_id,
        name=name,
        status=CallStatus.COMPLETE,
        arguments=arguments,
        raw_arguments="{}",
    )


# --- kinds ---


@pytest.mark.parametrize(
    ("kinds", "says"),
    [
        ({"Bash": "shell"}, r"kinds\['Bash'\] is 'shell'.*read, edit, delete, move, search"),
        ({"Bash": None}, r"kinds\['Bash'\] is None"),
        ({3: "read"}, r"tool name 3"),
        ([("Bash", "read")], r"a mapping of tool name to kind"),
    ],
    ids=["no-such-kind", "none", "name-not-a-string", "not-a-mapping"],
)
def test_kinds_are_checked_when_the_tracker_is_made(
    make_tracker: MakeTracker, kinds: Any, says: str
) -> None:
    """An invalid kind raised a plain ValueError at the first `start_call` of that tool,
    mid-session, with nothing sent for the call."""
    with pytest.raises(AcpError, match=says):
        make_tracker(kinds=kinds)


def test_kinds_given_are_copied(make_tracker: MakeTracker, sent: Sent) -> None:
    kinds = {"deploy": "execute"}
    tracker = make_tracker(kinds=kinds)
    kinds["deploy"] = "shell"  # a later change by the caller neither leaks nor breaks it
    tracker.start_call(complete("call_a", "deploy", {}))
    assert sent[-1]["update"]["kind"] == "execute"


def test_tool_kind_refuses_an_override_acp_lacks() -> None:
    with pytest.raises(AcpError, match=r"'shell'.*switch_mode, other"):
        tool_kind("Bash", overrides={"Bash": "shell"})
    assert tool_kind("Bash", overrides={"Bash": ToolKind.THINK}) is ToolKind.THINK


# --- locations: line is a uint32 ---


@pytest.mark.parametrize("line", [UINT32_MAX + 1, 2**64, -1])
def test_a_line_outside_uint32_from_the_caller_is_refused(
    make_tracker: MakeTracker, sent: Sent, line: int
) -> None:
    tracker = make_tracker()
    with pytest.raises(AcpError, match="from 0 to 4294967295"):
        tracker.start("call_1", "read", locations=[{"path": "/a.py", "line": line}])
    tracker.start("call_1", "read")
    with pytest.raises(AcpError, match="from 0 to 4294967295"):
        tracker.update("call_1").add_location("/a.py", line)
    with pytest.raises(AcpError, match="from 0 to 4294967295"):
        tracker.update("call_1").set_locations([{"path": "/a.py", "line": line}])
    assert len(sent) == 1  # only the start without locations went out


def test_the_largest_uint32_line_is_taken(make_tracker: MakeTracker, sent: Sent) -> None:
    tracker = make_tracker()
    tracker.start("call_1", "read", locations=[{"path": "/a.py", "line": UINT32_MAX}])
    assert sent[-1]["update"]["locations"] == [{"path": "/a.py", "line": UINT32_MAX}]


@pytest.mark.parametrize("key", ["line", "offset"])
def test_a_model_line_outside_uint32_is_dropped_and_the_path_kept(
    make_tracker: MakeTracker, sent: Sent, key: str
) -> None:
    """The schema reads a bad `line` as absent (default on error): the model's argument is
    dropped, as a negative one was, and the call still announced with its file."""
    arguments = {"file_path": "/a.py", key: UINT32_MAX + 1}
    assert locations_for(arguments) == [{"path": "/a.py"}]
    assert locations_for({"file_path": "/a.py", key: UINT32_MAX}) == [
        {"path": "/a.py", "line": UINT32_MAX}
    ]
    make_tracker().start_call(complete("call_a", "read_file", arguments))
    assert sent[-1]["update"]["locations"] == [{"path": "/a.py"}]


def test_a_change_that_raises_midway_still_reaches_the_client(
    make_tracker: MakeTracker, sent: Sent
) -> None:
    """Found in review: the state is changed in place, and a change that raised after it
    changed a field (a caller's own `Change`) left that field out of the ones to hash, so
    the client never got what `state()` showed, not even with the call's final update."""
    tracker = make_tracker()
    tracker.start("call_1", "read")

    def half_done(state: ToolCallState) -> None:
        state.content.append(text_content("partial"))
        raise ValueError("the caller's change failed")

    with pytest.raises(ValueError, match="failed"):
        tracker.apply("call_1", [half_done])
    shown = tracker.state("call_1").content
    tracker.update("call_1").status("completed").send()
    assert sent[-1]["update"].get("content") == shown == [text_content("partial")]


# --- rawInput / rawOutput depth ---


def _deep_list(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("field", ["raw_input", "raw_output"])
def test_a_raw_value_nested_past_the_item_depth_is_refused_where_given(
    make_tracker: MakeTracker, sent: Sent, field: str
) -> None:
    """Found in review: `rawInput` / `rawOutput` were checked only for a JSON form (up to
    1,000 levels), but the tracker copies them with `copy.deepcopy`, which raised
    RecursionError at about 500 levels, at start or later. Now, as for content items, past
    124 levels (3 more make a JSON-RPC line of serde_json's 127: test_review_envelope)
    `AcpError` names the field, the limit and the fix, where the value is given; the call
    is left as it was, and a value within the limit is carried."""
    tracker = make_tracker()
    deep = _deep_list(700)
    with pytest.raises(AcpError, match=r"nested past 124 levels.*flatten") as caught:
        tracker.start("a", "bash", **{field: deep})
    assert caught.value.extra["limit"] == 124
    assert caught.value.extra["field"] in {"rawInput", "rawOutput"}
    assert sent == []  # nothing announced: the id stays free
    tracker.start("a", "bash")
    builder = tracker.update("a")
    with pytest.raises(AcpError, match=r"nested past 124 levels"):
        getattr(builder, field)(_deep_list(125))
    builder.title("still usable").send()
    assert sent[-1]["update"]["title"] == "still usable"
    within = _deep_list(124)
    getattr(tracker.update("a"), field)(within).status("completed").send()
    wire = "rawInput" if field == "raw_input" else "rawOutput"
    assert sent[-1]["update"][wire] == within
    assert getattr(tracker.state("a"), field) == within


def test_a_start_past_max_running_carries_the_count_and_the_fix(
    make_tracker: MakeTracker,
) -> None:
    """Found in review: the refusal said the count in its text only; now its fields carry
    the calls running and the maximum, and the text names both fixes."""
    tracker = make_tracker(max_running=2)
    tracker.start("a", "bash")
    tracker.start("b", "bash")
    with pytest.raises(AcpError, match=r"running call 3, over max_running=2") as caught:
        tracker.start("c", "bash")
    assert caught.value.extra["running"] == 2
    assert caught.value.extra["maximum"] == 2
    assert "completed or failed" in str(caught.value)
    assert "ToolCallTracker(max_running=...)" in str(caught.value)
    assert "max_running" in (ToolCallTracker.__doc__ or "")
    assert "larger `max_running`" in (ToolCallTracker.__doc__ or "")
