"""ToolCallTracker: `tool_call` once, then `tool_call_update`s holding exactly what changed.

Every tracker here comes from `make_tracker`, whose sink runs the conformance check (official
v1 schema, no keys outside the spec, no nulls, pydantic round trip) on every notification.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

import pytest

from tests.unit.acp.conftest import Clock
from toolref.acp import (
    ToolCallStatus,
    ToolCallTracker,
    ToolKind,
    UpdateBuilder,
    diff_content,
    jsonrpc,
    location,
    locations_for,
    plan_entries,
    terminal_content,
    text_content,
    title_for,
    tool_kind,
)
from toolref.kit.kinds import Kind, KindTable
from toolref.streaming import CallStatus, ToolCall
from toolref.wire.errors import AcpError, DuplicateToolCallError, UnknownToolCallError

MakeTracker = Callable[..., ToolCallTracker]
Sent = list[dict[str, Any]]
Step = Callable[[UpdateBuilder], UpdateBuilder]

CALL = "call_1"
HEAD = {"sessionUpdate": "tool_call_update", "toolCallId": CALL}


def size(value: Any) -> int:
    """Compact JSON bytes, as the counters and the done-when thresholds measure them."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def updates(sent: Sent) -> list[dict[str, Any]]:
    return [note["update"] for note in sent]


# --- a call with one field of every type, to change one at a time ---


def content() -> list[dict[str, Any]]:
    return [
        text_content("one"),
        diff_content("/src/app.py", "new = 1\n", "old = 1\n"),
        terminal_content("term_1"),
    ]


def locations() -> list[dict[str, Any]]:
    return [location("/src/app.py", 3), location("/src/lib.py")]


def raw_input() -> dict[str, Any]:
    return {"path": "/src/app.py", "edits": [{"old": "abc", "new": "xyz"}], "all": False}


def raw_output() -> dict[str, Any]:
    return {"lines": [1, 2, 3], "ok": True, "meta": {"tool": "edit"}}


def begin(make_tracker: MakeTracker, sent: Sent, **options: Any) -> ToolCallTracker:
    """A tracker with CALL announced (fully populated); `sent` emptied afterwards."""
    tracker = make_tracker(**options)
    tracker.start(
        CALL,
        "Edit /src/app.py",
        kind="edit",
        status="in_progress",
        content=content(),
        locations=locations(),
        raw_input=raw_input(),
        raw_output=raw_output(),
    )
    sent.clear()
    return tracker


def full_state(**changes: Any) -> dict[str, Any]:
    """The `tool_call_update` a full-object update of the `begin` call (with changes) is."""
    state = {
        "title": "Edit /src/app.py",
        "kind": "edit",
        "status": "in_progress",
        "content": content(),
        "locations": locations(),
        "rawInput": raw_input(),
        "rawOutput": raw_output(),
    }
    return {**HEAD, **state, **changes}


# --- announcing: tool_call once, with a title, before any update ---


def test_start_sends_one_tool_call_with_title(make_tracker: MakeTracker, sent: Sent) -> None:
    tracker = make_tracker()
    notes = tracker.start(CALL, "Read /src/app.py", kind="read")
    assert notes == sent
    assert sent == [
        {
            "sessionId": "sess_1",
            "update": {
                "sessionUpdate": "tool_call",
                "toolCallId": CALL,
                "title": "Read /src/app.py",
                "kind": "read",
                "status": "pending",
            },
        }
    ]
    assert tracker.notifications == 1


def test_start_carries_every_initial_field(make_tracker: MakeTracker, sent: Sent) -> None:
    tracker = make_tracker(session_id="sess_2")
    tracker.start(
        "call_2",
        "Edit /src/app.py",
        kind=ToolKind.EDIT,
        status=ToolCallStatus.IN_PROGRESS,
        content=content(),
        locations=locations(),
        raw_input=raw_input(),
        raw_output=raw_output(),
    )
    assert sent == [
        {
            "sessionId": "sess_2",
            "update": {**full_state(), "sessionUpdate": "tool_call", "toolCallId": "call_2"},
        }
    ]


def test_the_first_update_comes_after_the_tool_call(make_tracker: MakeTracker, sent: Sent) -> None:
    tracker = make_tracker()
    tracker.start(CALL, "bash: ls")
    tracker.update(CALL).status("in_progress").send()
    assert [u["sessionUpdate"] for u in updates(sent)] == ["tool_call", "tool_call_update"]


def test_start_twice_is_refused(make_tracker: MakeTracker, sent: Sent) -> None:
    tracker = make_tracker()
    tracker.start(CALL, "bash: ls")
    with pytest.raises(DuplicateToolCallError) as raised:
        tracker.start(CALL, "bash: ls -la")
    assert isinstance(raised.value, AcpError)
    assert raised.value.extra == {"toolCallId": CALL}
    assert len(sent) == 1
    assert tracker.state(CALL).title == "bash: ls"


@pytest.mark.parametrize(("call_id", "title"), [("", "bash: ls"), (CALL, ""), (None, "t")])
def test_empty_id_or_title_is_refused(
    make_tracker: MakeTracker, sent: Sent, call_id: Any, title: str
) -> None:
    tracker = make_tracker()
    with pytest.raises(AcpError):
        tracker.start(call_id, title)
    assert sent == []
    assert tracker.notifications == 0
    # A refused start announces nothing, so the id is still free.
    tracker.start(CALL, "bash: ls")
    assert len(sent) == 1


def test_invalid_kind_or_status_at_start_announces_nothing(
    make_tracker: MakeTracker, sent: Sent
) -> None:
    tracker = make_tracker()
    with pytest.raises(AcpError, match="tool kind 'shell' is not one of ACP v1's"):
        tracker.start(CALL, "t", kind="shell")
    with pytest.raises(AcpError, match="status 'cancelled' is not one of ACP v1's"):
        tracker.start(CALL, "t", status="cancelled")  # v2 only
    assert sent == []
    tracker.start(CALL, "t")


UNKNOWN_OPERATIONS: list[Callable[[ToolCallTracker], object]] = [
    lambda tracker: tracker.update("call_nope"),
    lambda tracker: tracker.flush("call_nope"),
    lambda tracker: tracker.state("call_nope"),
    lambda tracker: tracker.pending("call_nope"),
    lambda tracker: tracker.apply("call_nope", []),
]


@pytest.mark.parametrize("operation", UNKNOWN_OPERATIONS)
def test_unknown_id_is_refused_and_nothing_is_sent(
    make_tracker: MakeTracker, sent: Sent, operation: Callable[[ToolCallTracker], object]
) -> None:
    tracker = make_tracker(window=1.0)
    with pytest.raises(UnknownToolCallError) as raised:
        operation(tracker)
    assert isinstance(raised.value, AcpError)
    assert raised.value.extra == {"toolCallId": "call_nope"}
    tracker.start(CALL, "bash: ls")
    tracker.update(CALL).title("bash: ls -la").send()  # held
    with pytest.raises(UnknownToolCallError):
        operation(tracker)
    assert tracker.flush() == [sent[1]]
    assert [u["toolCallId"] for u in updates(sent)] == [CALL, CALL]
    assert tracker.notifications == 2


def test_update_for_an_id_announced_later_is_refused_first(
    make_tracker: MakeTracker, sent: Sent
) -> None:
    tracker = make_tracker()
    with pytest.raises(UnknownToolCallError):
        tracker.update(CALL).status("completed").send()
    assert sent == []
    tracker.start(CALL, "bash: ls")
    assert tracker.update(CALL).status("completed").send() == [sent[1]]


# --- change detection: exactly the changed fields, collections whole ---

CHANGES: list[tuple[str, Step, dict[str, Any]]] = [
    ("title", lambda b: b.title("Edit /src/lib.py"), {"title": "Edit /src/lib.py"}),
    ("kind", lambda b: b.kind("delete"), {"kind": "delete"}),
    ("kind enum", lambda b: b.kind(ToolKind.MOVE), {"kind": "move"}),
    ("status", lambda b: b.status("completed"), {"status": "completed"}),
    ("status enum", lambda b: b.status(ToolCallStatus.FAILED), {"status": "failed"}),
    (
        "content: item added",
        lambda b: b.text("two"),
        {"content": [*content(), text_content("two")]},
    ),
    (
        "content: one item's text edited in place, same length",
        lambda b: b.set_content([text_content("two"), *content()[1:]]),
        {"content": [text_content("two"), *content()[1:]]},
    ),
    (
        "content: a diff's newText edited",
        lambda b: b.set_content(
            [content()[0], diff_content("/src/app.py", "new = 2\n", "old = 1\n"), content()[2]]
        ),
        {
            "content": [
                content()[0],
                diff_content("/src/app.py", "new = 2\n", "old = 1\n"),
                content()[2],
            ]
        },
    ),
    (
        "content: reordered",
        lambda b: b.set_content(content()[::-1]),
        {"content": content()[::-1]},
    ),
    (
        "content: terminal id changed",
        lambda b: b.set_content([*content()[:2], terminal_content("term_2")]),
        {"content": [*content()[:2], terminal_content("term_2")]},
    ),
    (
        "content: terminal added",
        lambda b: b.terminal("term_2"),
        {"content": [*content(), terminal_content("term_2")]},
    ),
    (
        "content: new-file diff added",
        lambda b: b.diff("/src/new.py", "x = 1\n"),
        {"content": [*content(), {"type": "diff", "path": "/src/new.py", "newText": "x = 1\n"}]},
    ),
    ("content: cleared", lambda b: b.clear_content(), {"content": []}),
    (
        "locations: a line changed",
        lambda b: b.set_locations([location("/src/app.py", 4), location("/src/lib.py")]),
        {"locations": [location("/src/app.py", 4), location("/src/lib.py")]},
    ),
    (
        "locations: a path changed, same length",
        lambda b: b.set_locations([location("/src/apq.py", 3), location("/src/lib.py")]),
        {"locations": [location("/src/apq.py", 3), location("/src/lib.py")]},
    ),
    (
        "locations: line 0 added",
        lambda b: b.add_location("/src/new.py", 0),
        {"locations": [*locations(), {"path": "/src/new.py", "line": 0}]},
    ),
    (
        "locations: reordered",
        lambda b: b.set_locations(locations()[::-1]),
        {"locations": locations()[::-1]},
    ),
    ("locations: cleared", lambda b: b.clear_locations(), {"locations": []}),
    (
        "rawInput: nested edit, same size",
        lambda b: b.raw_input({**raw_input(), "edits": [{"old": "abc", "new": "xyw"}]}),
        {"rawInput": {**raw_input(), "edits": [{"old": "abc", "new": "xyw"}]}},
    ),
    (
        "rawInput: a bool flipped",
        lambda b: b.raw_input({**raw_input(), "all": True}),
        {"rawInput": {**raw_input(), "all": True}},
    ),
    (
        "rawOutput: nested edit, same size",
        lambda b: b.raw_output({**raw_output(), "lines": [1, 2, 4]}),
        {"rawOutput": {**raw_output(), "lines": [1, 2, 4]}},
    ),
    (
        "rawOutput: deeper edit, same size",
        lambda b: b.raw_output({**raw_output(), "meta": {"tool": "edjt"}}),
        {"rawOutput": {**raw_output(), "meta": {"tool": "edjt"}}},
    ),
    (
        "rawOutput: a JSON null inside",
        lambda b: b.raw_output({**raw_output(), "ok": None}),
        {"rawOutput": {**raw_output(), "ok": None}},
    ),
    ("rawOutput: another type", lambda b: b.raw_output("done"), {"rawOutput": "done"}),
    (
        "several fields at once",
        lambda b: b.status("completed").text("two").raw_output({"ok": True}),
        {
            "status": "completed",
            "content": [*content(), text_content("two")],
            "rawOutput": {"ok": True},
        },
    ),
]


@pytest.mark.parametrize(
    ("step", "expected"), [pytest.param(s, e, id=name) for name, s, e in CHANGES]
)
def test_an_update_holds_exactly_the_changed_fields(
    make_tracker: MakeTracker, sent: Sent, step: Step, expected: dict[str, Any]
) -> None:
    tracker = begin(make_tracker, sent)
    notes = step(tracker.update(CALL)).send()
    assert notes == sent
    assert updates(sent) == [{**HEAD, **expected}]
    assert tracker.state(CALL).fields() == {
        k: v for k, v in full_state(**expected).items() if k not in HEAD
    }
    assert not tracker.pending(CALL)
    assert tracker.update(CALL).send() == []


@pytest.mark.parametrize(
    ("step", "expected"), [pytest.param(s, e, id=name) for name, s, e in CHANGES]
)
def test_full_objects_mode_sends_the_whole_state(
    make_tracker: MakeTracker, sent: Sent, step: Step, expected: dict[str, Any]
) -> None:
    tracker = begin(make_tracker, sent, full_objects=True)
    step(tracker.update(CALL)).send()
    assert updates(sent) == [full_state(**expected)]


UNCHANGED: list[tuple[str, Step]] = [
    ("nothing", lambda b: b),
    ("same title", lambda b: b.title("Edit /src/app.py")),
    ("same kind", lambda b: b.kind(ToolKind.EDIT)),
    ("same status", lambda b: b.status("in_progress")),
    ("equal content, new objects", lambda b: b.set_content(content())),
    ("equal locations, new objects", lambda b: b.set_locations(locations())),
    ("equal rawInput", lambda b: b.raw_input(raw_input())),
    ("rawInput keys reordered", lambda b: b.raw_input(dict(reversed(raw_input().items())))),
    ("equal rawOutput", lambda b: b.raw_output(raw_output())),
    ("title and back", lambda b: b.title("x").title("Edit /src/app.py")),
    ("status and back", lambda b: b.status("completed").status("in_progress")),
    ("kind and back", lambda b: b.kind("read").kind("edit")),
    ("content added and reset", lambda b: b.text("two").set_content(content())),
    ("content cleared and reset", lambda b: b.clear_content().set_content(content())),
    ("location added and reset", lambda b: b.add_location("/x").set_locations(locations())),
    ("rawOutput and back", lambda b: b.raw_output(1).raw_output(raw_output())),
]


@pytest.mark.parametrize("full_objects", [False, True], ids=["minimal", "full"])
@pytest.mark.parametrize("step", [pytest.param(s, id=name) for name, s in UNCHANGED])
def test_an_update_that_changes_nothing_is_dropped(
    make_tracker: MakeTracker, sent: Sent, step: Step, full_objects: bool
) -> None:
    tracker = begin(make_tracker, sent, full_objects=full_objects)
    before = (tracker.bytes_sent, tracker.bytes_full, tracker.notifications)
    assert step(tracker.update(CALL)).send() == []
    assert sent == []
    assert (tracker.bytes_sent, tracker.bytes_full, tracker.notifications) == before
    assert not tracker.pending(CALL)


def test_clearing_an_empty_collection_is_dropped(make_tracker: MakeTracker, sent: Sent) -> None:
    tracker = make_tracker()
    tracker.start(CALL, "bash: ls")
    assert tracker.update(CALL).clear_content().clear_locations().send() == []
    assert len(sent) == 1


def test_streamed_text_resends_the_whole_content(make_tracker: MakeTracker, sent: Sent) -> None:
    """Content replaces in v1: each edit of the growing output carries every item."""
    tracker = make_tracker()
    tracker.start(CALL, "bash: make", kind="execute")
    tracker.update(CALL).diff("/src/a.py", "a").text("out: 1").send()
    tracker.update(CALL).set_content(
        [diff_content("/src/a.py", "a"), text_content("out: 12")]
    ).send()
    assert updates(sent)[1:] == [
        {**HEAD, "content": [diff_content("/src/a.py", "a"), text_content("out: 1")]},
        {**HEAD, "content": [diff_content("/src/a.py", "a"), text_content("out: 12")]},
    ]


def test_successive_updates_each_hold_only_their_change(
    make_tracker: MakeTracker, sent: Sent
) -> None:
    tracker = make_tracker()
    tracker.start(CALL, "bash: ls", kind="execute", raw_input={"command": "ls"})
    tracker.update(CALL).status("in_progress").send()
    tracker.update(CALL).text("a.py").send()
    tracker.update(CALL).status("in_progress").text("b.py").send()
    tracker.update(CALL).status("completed").raw_output({"exit": 0}).send()
    tracker.update(CALL).status("completed").raw_output({"exit": 0}).send()  # dropped
    assert updates(sent)[1:] == [
        {**HEAD, "status": "in_progress"},
        {**HEAD, "content": [text_content("a.py")]},
        {**HEAD, "content": [text_content("a.py"), text_content("b.py")]},
        {**HEAD, "status": "completed", "rawOutput": {"exit": 0}},
    ]


@pytest.mark.parametrize(
    "step",
    [
        pytest.param(lambda b: b.title(cast(Any, None)), id="title"),
        pytest.param(lambda b: b.raw_input(None), id="raw_input"),
        pytest.param(lambda b: b.raw_output(None), id="raw_output"),
    ],
)
def test_setting_null_is_refused(make_tracker: MakeTracker, sent: Sent, step: Step) -> None:
    """v1 reads null as 'no change': a value once sent cannot be cleared."""
    tracker = begin(make_tracker, sent)
    builder = tracker.update(CALL).status("completed")
    with pytest.raises(AcpError, match="null"):
        step(builder)
    assert sent == []
    assert tracker.state(CALL).fields() == {k: v for k, v in full_state().items() if k not in HEAD}


def test_invalid_kind_or_status_in_an_update_is_refused(make_tracker: MakeTracker) -> None:
    tracker = make_tracker()
    tracker.start(CALL, "t")
    with pytest.raises(AcpError, match="status 'cancelled' is not one of ACP v1's"):
        tracker.update(CALL).status("cancelled")
    with pytest.raises(AcpError, match="tool kind 'write' is not one of ACP v1's"):
        tracker.update(CALL).kind("write")


def test_caller_mutations_after_sending_do_not_leak(make_tracker: MakeTracker, sent: Sent) -> None:
    tracker = make_tracker()
    arguments: dict[str, Any] = {"command": ["ls"]}
    item = text_content("a")
    tracker.start(CALL, "bash: ls", raw_input=arguments, content=[item])
    arguments["command"].append("-la")
    item["content"]["text"] = "b"
    assert not tracker.pending(CALL)
    tracker.update(CALL).status("in_progress").send()
    assert updates(sent)[1] == {**HEAD, "status": "in_progress"}


def test_null_optional_keys_in_items_are_not_sent(make_tracker: MakeTracker, sent: Sent) -> None:
    tracker = make_tracker()
    tracker.start(CALL, "Edit /a.py")
    tracker.update(CALL).set_locations([{"path": "/a.py", "line": None}]).set_content(
        [{"type": "diff", "path": "/a.py", "newText": "x", "oldText": None}]
    ).send()
    assert updates(sent)[1] == {
        **HEAD,
        "content": [diff_content("/a.py", "x")],
        "locations": [location("/a.py")],
    }


# --- the fluent builder ---


def test_every_builder_method_returns_the_builder(make_tracker: MakeTracker) -> None:
    tracker = make_tracker()
    tracker.start(CALL, "t")
    builder = tracker.update(CALL)
    steps: list[Step] = [
        lambda b: b.status("in_progress"),
        lambda b: b.title("t2"),
        lambda b: b.kind("read"),
        lambda b: b.add_content(text_content("a")),
        lambda b: b.set_content([text_content("a")]),
        lambda b: b.clear_content(),
        lambda b: b.text("a"),
        lambda b: b.diff("/a.py", "x"),
        lambda b: b.terminal("term_1"),
        lambda b: b.set_locations([location("/a.py")]),
        lambda b: b.add_location("/b.py", 2),
        lambda b: b.clear_locations(),
        lambda b: b.raw_input({"a": 1}),
        lambda b: b.raw_output({"b": 2}),
    ]
    for step in steps:
        assert step(builder) is builder


def test_builder_chain_applies_in_order_and_send_returns_the_notification(
    make_tracker: MakeTracker, sent: Sent
) -> None:
    tracker = make_tracker()
    tracker.start(CALL, "t")
    notes = (
        tracker.update(CALL)
        .status("in_progress")
        .title("Edit /a.py")
        .kind("edit")
        .add_content(text_content("dropped"), text_content("also dropped"))
        .clear_content()
        .add_content(text_content("a"), text_content("b"))
        .text("c")
        .diff("/a.py", "new", "old")
        .terminal("term_1")
        .set_locations([location("/gone.py")])
        .clear_locations()
        .add_location("/a.py", 7)
        .add_location("/b.py")
        .raw_input({"path": "/a.py"})
        .raw_output({"ok": True})
        .send()
    )
    assert notes == sent[1:]
    assert notes == [
        {
            "sessionId": "sess_1",
            "update": {
                **HEAD,
                "title": "Edit /a.py",
                "kind": "edit",
                "status": "in_progress",
                "content": [
                    text_content("a"),
                    text_content("b"),
                    text_content("c"),
                    {"type": "diff", "path": "/a.py", "newText": "new", "oldText": "old"},
                    {"type": "terminal", "terminalId": "term_1"},
                ],
                "locations": [{"path": "/a.py", "line": 7}, {"path": "/b.py"}],
                "rawInput": {"path": "/a.py"},
                "rawOutput": {"ok": True},
            },
        }
    ]


def test_set_content_replaces_and_add_content_appends(
    make_tracker: MakeTracker, sent: Sent
) -> None:
    tracker = begin(make_tracker, sent)
    tracker.update(CALL).set_content([text_content("only")]).send()
    tracker.update(CALL).add_content(text_content("more")).send()
    tracker.update(CALL).set_locations([location("/x.py", 1)]).add_location("/y.py").send()
    assert updates(sent) == [
        {**HEAD, "content": [text_content("only")]},
        {**HEAD, "content": [text_content("only"), text_content("more")]},
        {**HEAD, "locations": [{"path": "/x.py", "line": 1}, {"path": "/y.py"}]},
    ]


def test_content_constructors() -> None:
    assert text_content("hi") == {"type": "content", "content": {"type": "text", "text": "hi"}}
    assert diff_content("/a", "n") == {"type": "diff", "path": "/a", "newText": "n"}
    assert diff_content("/a", "n", "") == {
        "type": "diff",
        "path": "/a",
        "newText": "n",
        "oldText": "",
    }
    assert terminal_content("t") == {"type": "terminal", "terminalId": "t"}
    assert location("/a") == {"path": "/a"}
    assert location("/a", 0) == {"path": "/a", "line": 0}


# --- coalescing within a window ---


def test_updates_within_the_window_merge_into_one(
    make_tracker: MakeTracker, sent: Sent, clock: Clock
) -> None:
    tracker = begin(make_tracker, sent, window=1.0)
    assert tracker.update(CALL).title("a").send() == []
    clock.now = 0.25
    assert tracker.update(CALL).title("b").text("x").send() == []
    clock.now = 0.5
    assert tracker.update(CALL).raw_output({"n": 1}).send() == []
    clock.now = 0.75
    assert tracker.update(CALL).raw_output({"n": 2}).set_locations([]).send() == []
    assert sent == []
    assert tracker.pending(CALL)
    assert tracker.state(CALL).title == "b"  # state includes held changes
    clock.now = 0.9
    assert tracker.due() == []
    clock.now = 1.0
    notes = tracker.due()
    assert notes == sent
    assert updates(sent) == [
        {
            **HEAD,
            "title": "b",
            "content": [*content(), text_content("x")],
            "locations": [],
            "rawOutput": {"n": 2},
        }
    ]
    assert not tracker.pending(CALL)
    clock.now = 5.0
    assert tracker.due() == []
    assert tracker.flush() == []
    assert tracker.notifications == 2


def test_the_next_update_after_the_window_sends_the_held_ones(
    make_tracker: MakeTracker, sent: Sent, clock: Clock
) -> None:
    tracker = begin(make_tracker, sent, window=0.5)
    tracker.update(CALL).title("a").send()
    clock.now = 0.75
    notes = tracker.update(CALL).text("x").send()
    assert notes == sent
    assert updates(sent) == [{**HEAD, "title": "a", "content": [*content(), text_content("x")]}]
    # A new window starts with the next update.
    clock.now = 1.0
    assert tracker.update(CALL).title("b").send() == []
    clock.now = 1.25
    assert tracker.due() == []
    clock.now = 1.5
    assert len(tracker.due()) == 1
    assert updates(sent)[-1] == {**HEAD, "title": "b"}


def test_flush_one_call_or_all(make_tracker: MakeTracker, sent: Sent, clock: Clock) -> None:
    tracker = make_tracker(window=10.0)
    for call_id in ("call_a", "call_b", "call_c"):
        tracker.start(call_id, "t")
    sent.clear()
    tracker.update("call_a").title("a").send()
    tracker.update("call_b").title("b").send()
    clock.now = 1.0
    assert tracker.flush("call_c") == []  # nothing held
    assert updates(tracker.flush("call_b")) == [
        {"sessionUpdate": "tool_call_update", "toolCallId": "call_b", "title": "b"}
    ]
    assert tracker.flush("call_b") == []
    tracker.update("call_c").title("c").send()
    assert [u["toolCallId"] for u in updates(tracker.flush())] == ["call_a", "call_c"]
    assert tracker.flush() == []
    assert [u["title"] for u in updates(sent)] == ["b", "a", "c"]


@pytest.mark.parametrize("final", ["completed", "failed"])
def test_a_final_status_flushes_at_once(
    make_tracker: MakeTracker, sent: Sent, clock: Clock, final: str
) -> None:
    tracker = begin(make_tracker, sent, window=1.0)
    tracker.update(CALL).title("a").send()
    clock.now = 0.1
    tracker.update(CALL).raw_output({"n": 1}).send()
    clock.now = 0.2
    notes = tracker.update(CALL).status(final).send()
    assert notes == sent
    assert updates(sent) == [{**HEAD, "title": "a", "status": final, "rawOutput": {"n": 1}}]
    assert not tracker.pending(CALL)
    clock.now = 2.0
    assert tracker.due() == []


def test_a_final_status_alone_flushes_without_a_held_update(
    make_tracker: MakeTracker, sent: Sent, clock: Clock
) -> None:
    tracker = begin(make_tracker, sent, window=1.0)
    assert updates(tracker.update(CALL).status("completed").send()) == [
        {**HEAD, "status": "completed"}
    ]


def test_in_progress_is_held_like_any_change(
    make_tracker: MakeTracker, sent: Sent, clock: Clock
) -> None:
    tracker = make_tracker(window=1.0)
    tracker.start(CALL, "t")
    assert tracker.update(CALL).status("in_progress").send() == []
    assert tracker.pending(CALL)
    clock.now = 1.0
    assert updates(tracker.due()) == [{**HEAD, "status": "in_progress"}]


def test_a_change_undone_within_the_window_sends_nothing(
    make_tracker: MakeTracker, sent: Sent, clock: Clock
) -> None:
    tracker = begin(make_tracker, sent, window=1.0)
    tracker.update(CALL).title("a").send()
    assert tracker.pending(CALL)
    clock.now = 0.5
    tracker.update(CALL).title("Edit /src/app.py").send()
    assert not tracker.pending(CALL)
    clock.now = 1.0
    assert tracker.due() == []
    assert tracker.flush(CALL) == []
    assert sent == []


def test_pending_reports_held_changes(make_tracker: MakeTracker, sent: Sent, clock: Clock) -> None:
    tracker = begin(make_tracker, sent, window=1.0)
    assert not tracker.pending(CALL)
    tracker.update(CALL).set_content([text_content("two"), *content()[1:]]).send()
    assert tracker.pending(CALL)
    tracker.flush(CALL)
    assert not tracker.pending(CALL)
    assert updates(sent) == [{**HEAD, "content": [text_content("two"), *content()[1:]]}]


def test_held_updates_of_several_calls_are_due_independently(
    make_tracker: MakeTracker, sent: Sent, clock: Clock
) -> None:
    tracker = make_tracker(window=1.0)
    tracker.start("call_a", "t")
    tracker.start("call_b", "t")
    sent.clear()
    tracker.update("call_a").title("a").send()
    clock.now = 0.5
    tracker.update("call_b").title("b").send()
    clock.now = 1.0
    assert [u["toolCallId"] for u in updates(tracker.due())] == ["call_a"]
    clock.now = 1.5
    assert [u["toolCallId"] for u in updates(tracker.due())] == ["call_b"]


def test_coalescing_in_full_objects_mode_sends_one_full_update(
    make_tracker: MakeTracker, sent: Sent, clock: Clock
) -> None:
    tracker = begin(make_tracker, sent, window=1.0, full_objects=True)
    tracker.update(CALL).title("a").send()
    clock.now = 0.5
    tracker.update(CALL).raw_output({"n": 1}).send()
    clock.now = 1.0
    tracker.due()
    assert updates(sent) == [full_state(title="a", rawOutput={"n": 1})]


@pytest.mark.parametrize("window", [-0.001, -1.0])
def test_a_negative_window_is_refused(make_tracker: MakeTracker, window: float) -> None:
    with pytest.raises(AcpError, match="negative"):
        make_tracker(window=window)


def test_window_zero_sends_at_once(make_tracker: MakeTracker, sent: Sent) -> None:
    tracker = begin(make_tracker, sent, window=0)
    assert len(tracker.update(CALL).title("a").send()) == 1
    assert tracker.due() == []


# --- compatibility mode: full objects ---


def test_full_objects_tool_call_carries_empty_collections(
    make_tracker: MakeTracker, sent: Sent
) -> None:
    tracker = make_tracker(full_objects=True)
    tracker.start(CALL, "bash: ls", kind="execute")
    tracker.update(CALL).status("completed").send()
    tracker.update(CALL).status("completed").send()  # dropped
    full = {"title": "bash: ls", "kind": "execute", "content": [], "locations": []}
    assert updates(sent) == [
        {"sessionUpdate": "tool_call", "toolCallId": CALL, **full, "status": "pending"},
        {**HEAD, **full, "status": "completed"},
    ]


def test_full_objects_updates_resend_unchanged_fields(
    make_tracker: MakeTracker, sent: Sent
) -> None:
    tracker = begin(make_tracker, sent, full_objects=True)
    tracker.update(CALL).clear_content().send()
    tracker.update(CALL).status("completed").send()
    assert updates(sent) == [
        full_state(content=[]),
        full_state(status="completed", content=[]),
    ]


# --- counters ---


def run_script(tracker: ToolCallTracker) -> None:
    """A small tool run: some updates change things, some do not."""
    tracker.start(CALL, "bash: make test", kind="execute", raw_input={"command": "make test"})
    tracker.update(CALL).status("in_progress").send()
    tracker.update(CALL).text("collected 3 items").send()
    tracker.update(CALL).status("in_progress").send()  # dropped
    tracker.update(CALL).set_content([text_content("collected 3 items, 3 passed")]).send()
    tracker.update(CALL).status("completed").raw_output({"exit": 0}).send()
    tracker.plan({"todos": [{"content": "Run tests", "status": "completed"}]})
    tracker.plan({"todos": [{"content": "Run tests", "status": "completed"}]})  # dropped


def test_counters_in_minimal_mode(make_tracker: MakeTracker, sent: Sent) -> None:
    tracker = make_tracker()
    run_script(tracker)
    assert tracker.notifications == len(sent) == 6
    assert tracker.bytes_sent == sum(size(u) for u in updates(sent))
    base = {"title": "bash: make test", "kind": "execute"}
    text = "collected 3 items, 3 passed"
    full_objects = [
        {
            "sessionUpdate": "tool_call",
            "toolCallId": CALL,
            **base,
            "status": "pending",
            "content": [],
            "locations": [],
            "rawInput": {"command": "make test"},
        },
        {
            **HEAD,
            **base,
            "status": "in_progress",
            "content": [],
            "locations": [],
            "rawInput": {"command": "make test"},
        },
        {
            **HEAD,
            **base,
            "status": "in_progress",
            "content": [text_content("collected 3 items")],
            "locations": [],
            "rawInput": {"command": "make test"},
        },
        {
            **HEAD,
            **base,
            "status": "in_progress",
            "content": [text_content(text)],
            "locations": [],
            "rawInput": {"command": "make test"},
        },
        {
            **HEAD,
            **base,
            "status": "completed",
            "content": [text_content(text)],
            "locations": [],
            "rawInput": {"command": "make test"},
            "rawOutput": {"exit": 0},
        },
        updates(sent)[-1],  # a plan is always whole
    ]
    assert tracker.bytes_full == sum(size(u) for u in full_objects)
    assert tracker.bytes_sent < tracker.bytes_full


def test_counters_in_full_objects_mode(make_tracker: MakeTracker, sent: Sent) -> None:
    minimal = make_tracker()
    run_script(minimal)
    sent.clear()
    full = make_tracker(full_objects=True)
    run_script(full)
    assert full.notifications == len(sent) == minimal.notifications
    assert full.bytes_sent == full.bytes_full == sum(size(u) for u in updates(sent))
    assert minimal.bytes_full == full.bytes_full


def test_counters_ignore_held_updates_until_sent(
    make_tracker: MakeTracker, sent: Sent, clock: Clock
) -> None:
    tracker = begin(make_tracker, sent, window=1.0)
    before = (tracker.bytes_sent, tracker.bytes_full, tracker.notifications)
    tracker.update(CALL).title("a").send()
    assert (tracker.bytes_sent, tracker.bytes_full, tracker.notifications) == before
    tracker.flush()
    assert tracker.notifications == before[2] + 1
    assert tracker.bytes_sent == before[0] + size({**HEAD, "title": "a"})
    assert tracker.bytes_full == before[1] + size(full_state(title="a"))


# --- done-when thresholds ---


@pytest.mark.parametrize("status", ["in_progress", "completed", "failed"])
def test_a_status_only_update_is_small(make_tracker: MakeTracker, sent: Sent, status: str) -> None:
    call_id = "call_12345678"
    assert len(call_id) == 13

    def run(tracker: ToolCallTracker) -> dict[str, Any]:
        tracker.start(
            call_id,
            "bash: make test",
            kind="execute",
            content=[text_content("x" * 2048)],
            raw_input={"command": "make test"},
        )
        (note,) = tracker.update(call_id).status(status).send()
        update: dict[str, Any] = note["update"]
        return update

    minimal = run(make_tracker())
    full = run(make_tracker(full_objects=True))
    assert minimal == {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": status}
    assert full["content"] == [text_content("x" * 2048)]
    assert size(minimal) <= 90
    assert 1 - size(minimal) / size(full) >= 0.85


# --- ToolKind from tool names ---


@pytest.mark.parametrize(
    ("name", "args", "kind"),
    [
        ("Read", None, ToolKind.READ),
        ("read_file", None, ToolKind.READ),
        ("Bash", None, ToolKind.EXECUTE),
        ("run_terminal_cmd", None, ToolKind.EXECUTE),
        ("Write", None, ToolKind.EDIT),
        ("create_file", None, ToolKind.EDIT),
        ("Edit", None, ToolKind.EDIT),
        ("apply_patch", None, ToolKind.EDIT),
        ("TodoWrite", None, ToolKind.THINK),
        ("update_plan", None, ToolKind.THINK),
        ("think", None, ToolKind.THINK),
        ("WebFetch", None, ToolKind.FETCH),
        ("WebSearch", None, ToolKind.FETCH),
        ("ExitPlanMode", None, ToolKind.SWITCH_MODE),
        ("delete_file", None, ToolKind.DELETE),
        ("remove_branch", None, ToolKind.DELETE),
        ("move_file", None, ToolKind.MOVE),
        ("rename_file", None, ToolKind.MOVE),
        ("Grep", None, ToolKind.SEARCH),
        ("Glob", None, ToolKind.SEARCH),
        ("codebase_search", None, ToolKind.SEARCH),
        ("str_replace_editor", {"command": "view"}, ToolKind.READ),
        ("str_replace_editor", {"command": "create"}, ToolKind.EDIT),
        ("str_replace_editor", {"command": "str_replace"}, ToolKind.EDIT),
        ("str_replace_based_edit_tool", {"command": "insert"}, ToolKind.EDIT),
        ("str_replace_editor", '{"command": "view"}', ToolKind.READ),
        ("str_replace_editor", {"command": "frobnicate"}, ToolKind.EDIT),
        ("str_replace_editor", None, ToolKind.EDIT),
        ("Task", None, ToolKind.OTHER),
        ("frobnicate", None, ToolKind.OTHER),
        ("", None, ToolKind.OTHER),
    ],
)
def test_tool_kind_from_the_shared_table(name: str, args: Any, kind: ToolKind) -> None:
    assert tool_kind(name, args) is kind


def test_every_tool_kind_is_reachable() -> None:
    names = [
        "Read",
        "Edit",
        "delete_file",
        "move_file",
        "Grep",
        "Bash",
        "think",
        "WebFetch",
        "ExitPlanMode",
        "Task",
    ]
    assert {tool_kind(name) for name in names} == set(ToolKind)
    assert len(ToolKind) == 10


def test_tool_kind_overrides_win() -> None:
    assert tool_kind("Bash", overrides={"Bash": "read"}) is ToolKind.READ
    assert tool_kind("Bash", overrides={"Other": ToolKind.READ}) is ToolKind.EXECUTE
    assert tool_kind("my_tool", overrides={"my_tool": ToolKind.FETCH}) is ToolKind.FETCH
    table = KindTable({"my_tool": Kind.SHELL, "Read": Kind.TODO})
    assert tool_kind("my_tool", table=table) is ToolKind.EXECUTE
    assert tool_kind("Read", table=table) is ToolKind.THINK
    assert tool_kind("Read", table=table, overrides={"Read": "edit"}) is ToolKind.EDIT


def test_the_tracker_kinds_option_wins(make_tracker: MakeTracker, sent: Sent) -> None:
    tracker = make_tracker(kinds={"Bash": "think", "deploy": ToolKind.EXECUTE})
    tracker.start_call(complete("call_a", "Bash", {"command": "ls"}))
    tracker.start_call(complete("call_b", "deploy", {}))
    tracker.start_call(complete("call_c", "Read", {}))
    assert [u["kind"] for u in updates(sent)] == ["think", "execute", "read"]


# --- plans ---


def entry(content: str, status: str = "pending", priority: str = "medium") -> dict[str, str]:
    return {"content": content, "priority": priority, "status": status}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(
            {
                "todos": [
                    {"content": "Read", "status": "completed", "activeForm": "Reading"},
                    {"content": "Fix", "status": "in_progress", "activeForm": "Fixing"},
                    {"content": "Test", "status": "pending", "activeForm": "Testing"},
                ]
            },
            [entry("Read", "completed"), entry("Fix", "in_progress"), entry("Test")],
            id="todo_write",
        ),
        pytest.param(
            {
                "todos": [
                    {"id": "1", "content": "Read", "status": "completed", "priority": "high"},
                    {"id": "2", "content": "Fix", "status": "pending", "priority": "low"},
                ]
            },
            [entry("Read", "completed", "high"), entry("Fix", "pending", "low")],
            id="TodoWrite with priorities",
        ),
        pytest.param(
            {
                "explanation": "first pass",
                "plan": [
                    {"step": "Read", "status": "completed"},
                    {"step": "Fix", "status": "in_progress"},
                ],
            },
            [entry("Read", "completed"), entry("Fix", "in_progress")],
            id="update_plan",
        ),
        pytest.param(
            ["Read", {"content": "Fix", "status": "completed"}],
            [entry("Read"), entry("Fix", "completed")],
            id="plain list",
        ),
        pytest.param([], [], id="empty list"),
        pytest.param({"todos": []}, [], id="no todos"),
        pytest.param(
            [
                {"content": "a", "status": "cancelled"},
                {"content": "b", "status": "done"},
                {"content": "c", "status": None},
                {"content": "d", "status": "failed"},
                {"content": "e", "status": "COMPLETED"},
                {"content": "f"},
            ],
            [entry(c) for c in "abcdef"],
            id="unknown statuses",
        ),
        pytest.param(
            [
                {"content": "a", "priority": "urgent"},
                {"content": "b", "priority": None},
                {"content": "c", "priority": "High"},
                {"content": "d", "priority": "low"},
            ],
            [entry("a"), entry("b"), entry("c"), entry("d", priority="low")],
            id="priorities",
        ),
    ],
)
def test_plan_entries(
    make_tracker: MakeTracker, sent: Sent, source: Any, expected: list[dict[str, str]]
) -> None:
    assert plan_entries(source) == expected
    tracker = make_tracker()
    notes = tracker.plan(source)
    assert notes == sent
    assert updates(sent) == [{"sessionUpdate": "plan", "entries": expected}]


def test_a_plan_is_sent_whole_and_an_identical_one_dropped(
    make_tracker: MakeTracker, sent: Sent
) -> None:
    tracker = make_tracker()
    todos = [{"content": "Read", "status": "in_progress"}, {"content": "Fix", "status": "pending"}]
    assert len(tracker.plan({"todos": todos})) == 1
    assert tracker.plan({"todos": todos}) == []
    assert tracker.plan({"plan": [{"step": "Read", "status": "in_progress"}, "Fix"]}) == []
    todos[0]["status"] = "completed"
    assert len(tracker.plan({"todos": todos})) == 1
    assert tracker.plan({"todos": todos}) == []
    assert updates(sent) == [
        {"sessionUpdate": "plan", "entries": [entry("Read", "in_progress"), entry("Fix")]},
        {"sessionUpdate": "plan", "entries": [entry("Read", "completed"), entry("Fix")]},
    ]
    assert tracker.notifications == 2
    assert tracker.bytes_sent == tracker.bytes_full == sum(size(u) for u in updates(sent))


def test_plans_do_not_touch_tool_calls(make_tracker: MakeTracker, sent: Sent) -> None:
    tracker = make_tracker(window=1.0)
    tracker.start(CALL, "TodoWrite", kind="think")
    tracker.update(CALL).title("Plan").send()  # held
    tracker.plan(["Read"])
    assert [u["sessionUpdate"] for u in updates(sent)] == ["tool_call", "plan"]
    assert tracker.pending(CALL)


@pytest.mark.parametrize(
    "source",
    [
        None,
        "Read the file",
        42,
        {},
        {"steps": []},
        {"todos": "Read"},
        {"todos": None},
        ("Read",),
        [42],
        [None],
        [["Read"]],
        [{"status": "pending"}],
        [{"content": 5}],
    ],
)
def test_bad_plan_sources_are_refused(make_tracker: MakeTracker, sent: Sent, source: Any) -> None:
    tracker = make_tracker()
    with pytest.raises(AcpError):
        tracker.plan(source)
    assert sent == []


def test_unhashable_plan_status_or_priority_defaults() -> None:
    assert plan_entries([{"content": "a", "status": ["done"], "priority": {"level": 1}}]) == [
        entry("a")
    ]


# --- start_call: announcing streamed tool calls ---


def complete(call_id: str, name: str, arguments: dict[str, Any]) -> ToolCall:
    return ToolCall(
        index=0,
        id=call_id,
        name=name,
        status=CallStatus.COMPLETE,
        arguments=arguments,
        raw_arguments=json.dumps(arguments),
    )


def test_start_call_with_a_complete_call(make_tracker: MakeTracker, sent: Sent) -> None:
    tracker = make_tracker()
    notes = tracker.start_call(complete(CALL, "bash", {"command": "ls -la"}))
    assert notes == sent
    assert updates(sent) == [
        {
            "sessionUpdate": "tool_call",
            "toolCallId": CALL,
            "title": "bash: ls -la",
            "kind": "execute",
            "status": "pending",
            "rawInput": {"command": "ls -la"},
        }
    ]
    tracker.update(CALL).status("in_progress").send()
    assert updates(sent)[1] == {**HEAD, "status": "in_progress"}


def test_start_call_locates_absolute_paths(make_tracker: MakeTracker, sent: Sent) -> None:
    tracker = make_tracker()
    tracker.start_call(complete("call_a", "Read", {"file_path": "/src/app.py", "offset": 10}))
    tracker.start_call(complete("call_b", "Edit", {"file_path": "/src/app.py", "old": "a"}))
    tracker.start_call(complete("call_c", "view_file", {"path": "src/app.py", "line": 3}))
    tracker.start_call(complete("call_d", "Read", {"file_path": "/src/app.py", "line": 0}))
    a, b, c, d = updates(sent)
    assert a["title"] == "Read: /src/app.py"
    assert a["kind"] == "read"
    assert a["locations"] == [{"path": "/src/app.py", "line": 10}]
    assert a["rawInput"] == {"file_path": "/src/app.py", "offset": 10}
    assert b["kind"] == "edit"
    assert b["locations"] == [{"path": "/src/app.py"}]
    assert "locations" not in c  # relative paths are not locations
    assert c["title"] == "view_file: src/app.py"
    assert d["locations"] == [{"path": "/src/app.py", "line": 0}]


def test_start_call_title_can_be_given(make_tracker: MakeTracker, sent: Sent) -> None:
    tracker = make_tracker()
    tracker.start_call(complete(CALL, "bash", {"command": "ls"}), title="List files")
    assert updates(sent)[0]["title"] == "List files"


def test_start_call_with_no_arguments(make_tracker: MakeTracker, sent: Sent) -> None:
    tracker = make_tracker()
    tracker.start_call(complete(CALL, "ExitPlanMode", {}))
    assert updates(sent) == [
        {
            "sessionUpdate": "tool_call",
            "toolCallId": CALL,
            "title": "ExitPlanMode",
            "kind": "switch_mode",
            "status": "pending",
            "rawInput": {},
        }
    ]


@pytest.mark.parametrize(
    ("status", "raw", "error"),
    [
        (CallStatus.INVALID, '{"command": "ls', "arguments are not valid JSON: Unterminated"),
        (CallStatus.INVALID, "[1, 2]", "arguments are a JSON list, not an object"),
        (CallStatus.INCOMPLETE, '{"command": "rm -rf /tm', "stream truncated at max_tokens"),
    ],
)
def test_start_call_with_an_unusable_call_announces_it_failed(
    make_tracker: MakeTracker, sent: Sent, status: CallStatus, raw: str, error: str
) -> None:
    tracker = make_tracker()
    call = ToolCall(
        index=0,
        id=CALL,
        name="bash",
        status=status,
        arguments=None,
        raw_arguments=raw,
        error=error,
    )
    tracker.start_call(call)
    (update,) = updates(sent)
    assert update["sessionUpdate"] == "tool_call"
    assert update["status"] == "failed"
    assert update["kind"] == "execute"
    assert update["title"] == "bash"
    assert update["rawInput"] == {"INVALID_JSON": raw}
    (item,) = update["content"]
    assert item["type"] == "content"
    assert item["content"]["type"] == "text"
    assert error in item["content"]["text"]
    assert "locations" not in update


def test_start_call_twice_is_refused(make_tracker: MakeTracker, sent: Sent) -> None:
    tracker = make_tracker()
    tracker.start_call(complete(CALL, "bash", {"command": "ls"}))
    with pytest.raises(DuplicateToolCallError):
        tracker.start_call(complete(CALL, "bash", {"command": "ls"}))
    assert len(sent) == 1


# --- title_for and locations_for ---


@pytest.mark.parametrize(
    ("name", "arguments", "title"),
    [
        ("bash", {"command": "ls -la"}, "bash: ls -la"),
        ("bash", {"command": ["ls", "-la", "/tmp"]}, "bash: ls -la /tmp"),
        ("shell", {"cmd": "git  status\n --short"}, "shell: git status --short"),
        ("Read", {"file_path": "/src/app.py"}, "Read: /src/app.py"),
        ("Grep", {"pattern": "TODO", "path": "/src"}, "Grep: /src"),
        ("web_search", {"query": "acp spec"}, "web_search: acp spec"),
        ("WebFetch", {"url": "https://example.com"}, "WebFetch: https://example.com"),
        ("bash", {"command": "ls", "path": "/x"}, "bash: ls"),  # command comes first
        ("bash", {"command": "   ", "description": "list"}, "bash: list"),
        ("bash", {"command": [], "description": "list"}, "bash: list"),
        ("bash", {"command": ["ls", 1]}, "bash"),
        ("bash", {"command": 42}, "bash"),
        ("bash", {}, "bash"),
        ("bash", None, "bash"),
        ("bash", '{"command": "ls"}', "bash"),
        ("", {}, "tool call"),
    ],
)
def test_title_for(name: str, arguments: Any, title: str) -> None:
    assert title_for(name, arguments) == title


def test_title_for_truncates_to_80_characters() -> None:
    title = title_for("bash", {"command": "echo " + "x" * 200})
    assert len(title) == 80
    assert title.startswith("bash: echo xxx")
    assert title.endswith("…")
    exact = "x" * (80 - len("bash: "))
    assert title_for("bash", {"command": exact}) == "bash: " + exact
    assert title_for("bash", {"command": exact + "y"}) == "bash: " + exact[:-1] + "…"


def test_a_long_title_from_start_call_conforms(make_tracker: MakeTracker, sent: Sent) -> None:
    tracker = make_tracker()
    tracker.start_call(complete(CALL, "bash", {"command": ["python", "-c", "print(1)" * 30]}))
    assert len(updates(sent)[0]["title"]) == 80


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"file_path": "/a.py"}, [{"path": "/a.py"}]),
        ({"path": "/a.py", "line": 4}, [{"path": "/a.py", "line": 4}]),
        ({"filename": "/a.py", "offset": 0}, [{"path": "/a.py", "line": 0}]),
        ({"notebook_path": "/a.ipynb"}, [{"path": "/a.ipynb"}]),
        ({"file_path": "/a.py", "path": "/b.py"}, [{"path": "/a.py"}]),
        ({"path": "/a.py", "line": -1}, [{"path": "/a.py"}]),
        ({"path": "/a.py", "line": True}, [{"path": "/a.py"}]),
        ({"path": "/a.py", "line": "4"}, [{"path": "/a.py"}]),
        ({"path": "a.py"}, []),
        ({"path": 5}, []),
        ({}, []),
        (None, []),
        (["/a.py"], []),
    ],
)
def test_locations_for(arguments: Any, expected: list[dict[str, Any]]) -> None:
    assert locations_for(arguments) == expected


# --- the JSON-RPC envelope ---


def test_jsonrpc_envelope(make_tracker: MakeTracker, sent: Sent) -> None:
    tracker = make_tracker()
    (note,) = tracker.start(CALL, "bash: ls")
    message = jsonrpc(note)
    assert message == {"jsonrpc": "2.0", "method": "session/update", "params": note}
    assert "id" not in message  # a notification, not a request
    assert json.loads(json.dumps(message)) == message


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (lambda u: u.add_location("/a.py", -1), "line number from 0 to 4294967295"),
        (lambda u: u.add_location("", 3), "absolute path"),
        (lambda u: u.set_locations([{"line": 2}]), "absolute path"),
        (lambda u: u.add_content({"type": "content", "content": {"type": "text"}}), "content.text"),
        (lambda u: u.add_content({"type": "diff", "path": "/a.py"}), "lacks newText"),
        (lambda u: u.set_content([{"type": "image"}]), "content, diff and terminal"),
    ],
)
def test_an_item_acp_v1_does_not_take_is_refused_naming_the_fix(
    make_tracker: MakeTracker, sent: Sent, build: Callable[[Any], object], says: str
) -> None:
    """A location or content item the schema refuses fails where it is made, saying how
    to make it: sent, it would go again with every later update of the call."""
    tracker = make_tracker(window=0.0)
    tracker.start(CALL, "bash: ls")
    with pytest.raises(AcpError, match=says):
        build(tracker.update(CALL))
    assert len(sent) == 1  # nothing but the start went out


# --- found in review: finished calls, items at start, values without a JSON form ---


@pytest.mark.parametrize("final", ["completed", "failed"])
def test_a_finished_call_takes_no_more_updates(
    make_tracker: MakeTracker, sent: Sent, final: str
) -> None:
    """v1 has no status after completed or failed: an update after it (here moving the call
    back to in_progress with more content) used to go out."""
    tracker = make_tracker(window=0.0)
    tracker.start(CALL, "bash: ls", status="in_progress")
    tracker.update(CALL).status(final).text("done").send()
    assert len(sent) == 2
    with pytest.raises(AcpError, match=f"already {final}.*status, content.*new id"):
        tracker.update(CALL).status("in_progress").text("more").send()
    assert tracker.update(CALL).status(final).send() == []  # a repeat changes nothing
    with pytest.raises(DuplicateToolCallError):
        tracker.start(CALL, "bash: ls")
    assert tracker.flush(CALL) == []
    assert not tracker.pending(CALL)
    assert tracker.state(CALL).status == final  # still readable
    assert len(sent) == 2


def test_a_call_announced_failed_is_finished(make_tracker: MakeTracker, sent: Sent) -> None:
    tracker = make_tracker()
    tracker.start(CALL, "bash: ls", status="failed", content=[text_content("not run")])
    with pytest.raises(AcpError, match="already failed"):
        tracker.update(CALL).text("ran after all").send()
    assert len(sent) == 1


def test_finished_calls_are_forgotten_past_keep_finished(
    make_tracker: MakeTracker, sent: Sent, clock: Clock
) -> None:
    """A tracker kept every call of the session, with its content, for ever."""
    tracker = make_tracker(window=1.0, keep_finished=3)
    ids = [f"call_{n}" for n in range(50)]
    for call_id in ids:
        tracker.start(call_id, "bash: ls")
        tracker.update(call_id).text("x" * 1000).send()  # held
        tracker.update(call_id).status("completed").send()  # out at once, with the text
    assert len(sent) == 100
    assert [note["update"]["content"][0]["content"]["text"] for note in sent[1::2]] == [
        "x" * 1000
    ] * 50
    assert tracker._calls == {}
    assert list(tracker._finished) == ids[-3:]
    assert tracker.state(ids[-1]).status == "completed"
    with pytest.raises(UnknownToolCallError):
        tracker.state(ids[0])
    clock.now += 5
    assert tracker.due() == []
    assert tracker.flush() == []


@pytest.mark.parametrize("keep", [-1, 1.5, "3"])
def test_keep_finished_must_be_a_count(make_tracker: MakeTracker, keep: Any) -> None:
    with pytest.raises(AcpError, match="keep_finished"):
        make_tracker(keep_finished=keep)


@pytest.mark.parametrize(
    "options",
    [
        {"content": [{"type": "diff", "path": "/a.py"}]},
        {"content": [{"type": "image"}]},
        {"locations": [{"line": 3}]},
        {"locations": [{"path": "/a.py", "line": -1}]},
        {"raw_input": {"when": object()}},
        {"raw_output": {1, 2}},
    ],
    ids=["diff-without-newText", "no-such-type", "no-path", "negative-line", "raw-in", "raw-out"],
)
def test_start_refuses_what_the_schema_does_and_announces_nothing(
    make_tracker: MakeTracker, sent: Sent, options: dict[str, Any]
) -> None:
    """`start` sent such items as given (a tool_call the schema refuses), and a value with
    no JSON form left the id taken with nothing announced."""
    tracker = make_tracker()
    with pytest.raises(AcpError):
        tracker.start(CALL, "bash: ls", **options)
    assert sent == []
    tracker.start(CALL, "bash: ls")  # the id is still free
    assert len(sent) == 1


@pytest.mark.parametrize("field", ["raw_input", "raw_output"])
def test_a_raw_value_without_json_form_is_refused_where_given(
    make_tracker: MakeTracker, sent: Sent, field: str
) -> None:
    """It used to become the call's state and fail at send: then every later update of the
    call failed too."""
    tracker = make_tracker()
    tracker.start(CALL, "bash: ls")
    with pytest.raises(AcpError, match="no JSON form"):
        getattr(tracker.update(CALL), field)({"at": {1, 2}})
    assert tracker.update(CALL).status("in_progress").send() == sent[1:]
    assert sent[1]["update"] == {**HEAD, "status": "in_progress"}


class FlakySink:
    """A sink whose next `fails` deliveries raise (a closed pipe, a full buffer)."""

    def __init__(self) -> None:
        self.fails = 0
        self.got: Sent = []

    def __call__(self, notification: dict[str, Any]) -> None:
        if self.fails:
            self.fails -= 1
            raise OSError("the client's pipe is closed")
        self.got.append(notification)


@pytest.mark.parametrize("window", [0.0, 5.0])
def test_an_update_the_sink_refused_is_still_pending(clock: Clock, window: float) -> None:
    """The tracker marked the fields as delivered before the sink ran: after a failed
    delivery `pending()` said no, and the status never reached the client (the next update
    left it out as unchanged)."""
    sink = FlakySink()
    tracker = ToolCallTracker("sess_1", sink=sink, clock=clock, window=window)
    tracker.start(CALL, "bash: ls")
    sink.fails = 1
    if window:  # held until the window has passed
        assert tracker.update(CALL).status("in_progress").text("one").send() == []
        clock.now += window
    with pytest.raises(OSError, match="pipe is closed"):
        tracker.due() if window else tracker.update(CALL).status("in_progress").text("one").send()
    assert tracker.pending(CALL)
    assert tracker.flush() if window else tracker.update(CALL).send()
    assert sink.got[-1]["update"] == {
        **HEAD,
        "status": "in_progress",
        "content": [text_content("one")],
    }


def test_a_final_update_the_sink_refused_can_be_sent_again(clock: Clock) -> None:
    sink = FlakySink()
    tracker = ToolCallTracker("sess_1", sink=sink, clock=clock)
    tracker.start(CALL, "bash: ls")
    sink.fails = 1
    with pytest.raises(OSError, match="pipe is closed"):
        tracker.update(CALL).status("completed").send()
    assert tracker.update(CALL).status("completed").send() == sink.got[-1:]
    assert sink.got[-1]["update"] == {**HEAD, "status": "completed"}
    assert tracker.notifications == 2


def test_a_start_the_sink_refused_leaves_the_id_free(clock: Clock) -> None:
    """The call was registered before the sink ran: retrying `start` raised
    DuplicateToolCallError for a call the client had never heard of."""
    sink = FlakySink()
    tracker = ToolCallTracker("sess_1", sink=sink, clock=clock)
    sink.fails = 1
    with pytest.raises(OSError, match="pipe is closed"):
        tracker.start(CALL, "bash: ls")
    assert tracker.start(CALL, "bash: ls") == sink.got
    assert [note["update"]["sessionUpdate"] for note in sink.got] == ["tool_call"]
    assert tracker.notifications == 1


def test_a_plan_the_sink_refused_is_sent_again() -> None:
    sink = FlakySink()
    tracker = ToolCallTracker("sess_1", sink=sink)
    sink.fails = 1
    with pytest.raises(OSError, match="pipe is closed"):
        tracker.plan(["read the file"])
    assert tracker.plan(["read the file"]) == sink.got
    assert [note["update"]["sessionUpdate"] for note in sink.got] == ["plan"]
