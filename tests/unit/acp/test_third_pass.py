"""Found in review (the ACP tracker, third pass): `due()` and `flush()` cost what is held,
not every running call; a no-op update of a finished call costs what it names, not a copy
of the call; `full_objects` checked; `_meta` carried as given (nulls and all); items with
no JSON form refused where made; every collection the tracker keeps is bounded."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.unit.acp.conftest import Clock
from tests.unit.acp.test_second_pass import Work
from toolref.acp import ToolCallTracker, text_content
from toolref.wire.errors import AcpError

MakeTracker = Callable[..., ToolCallTracker]
Sent = list[dict[str, Any]]


class Examined(dict[str, Any]):
    """The tracker's running calls, counting each one the tracker looks at."""

    count = 0

    def _seen(self, n: int = 1) -> None:
        type(self).count += n

    def values(self) -> Any:
        return _CountedValues(self)

    def items(self) -> Any:
        self._seen(len(self))
        return super().items()

    def __iter__(self) -> Iterator[str]:
        self._seen(len(self))
        return super().__iter__()

    def __getitem__(self, key: str) -> Any:
        self._seen()
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self._seen()
        return super().get(key, default)


class _CountedValues:
    def __init__(self, calls: Examined) -> None:
        self._calls = calls

    def __iter__(self) -> Iterator[Any]:
        for value in dict.values(self._calls):
            self._calls._seen()
            yield value

    def __len__(self) -> int:
        return len(self._calls)


def _held_session(clock: Clock, running: int) -> ToolCallTracker:
    """One call held at 0, `running` more held at 5: at 10.5 only the first is due."""
    tracker = ToolCallTracker("s", window=10.0, clock=clock)
    tracker.start("early", "bash")
    tracker.update("early").title("early 1").send()
    clock.now = 5.0
    for n in range(running):
        tracker.start(f"c{n}", "bash")
        tracker.update(f"c{n}").title("held").send()
    tracker._calls = Examined(tracker._calls)
    Examined.count = 0
    clock.now = 10.5
    return tracker


@pytest.mark.parametrize("running", [10, 1_000])
def test_due_examines_what_is_due_not_every_running_call(running: int) -> None:
    """Before: each `due()` walked every running call, so a loop calling it over a session
    with many running calls did quadratic work (1,000 calls examined to send one)."""
    clock = Clock()
    tracker = _held_session(clock, running)
    (note,) = tracker.due()
    assert note["update"]["toolCallId"] == "early"
    for _ in range(100):
        assert tracker.due() == []  # nothing more is due: costs nothing per running call
    assert Examined.count <= 4, Examined.count
    clock.now = 15.0
    assert len(tracker.due()) == running  # now they all are, oldest held first


@pytest.mark.parametrize("running", [10, 1_000])
def test_flush_examines_what_is_held_not_every_running_call(running: int) -> None:
    clock = Clock()
    tracker = ToolCallTracker("s", window=10.0, clock=clock)
    for n in range(running):
        tracker.start(f"c{n}", "bash")
    tracker.update("c3").title("held").send()
    tracker._calls = Examined(tracker._calls)
    Examined.count = 0
    (note,) = tracker.flush()
    assert note["update"] == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c3",
        "title": "held",
    }
    assert tracker.flush() == []
    assert Examined.count <= 4, Examined.count


def test_the_due_index_stays_bounded_when_due_is_never_called() -> None:
    """Held updates sent by `flush()` or the next update leave stale entries behind; they are
    dropped once they outnumber the running calls, so the index is bounded without `due()`."""
    clock = Clock()
    tracker = ToolCallTracker("s", window=1.0, clock=clock)
    tracker.start("c", "bash")
    for n in range(10_000):
        clock.now = float(n)
        tracker.update("c").title(f"t{n}").send()
        tracker.flush("c")
        assert len(tracker._due) <= 2 * len(tracker._calls) + 64


def test_a_sink_that_raises_in_due_leaves_the_update_due(
    make_tracker: MakeTracker, sent: Sent, clock: Clock
) -> None:
    refuse = [True]

    def sink(note: dict[str, Any]) -> None:
        if refuse[0] and note["update"]["sessionUpdate"] == "tool_call_update":
            raise OSError("pipe closed")
        sent.append(note)

    tracker = ToolCallTracker("s", window=1.0, clock=clock, sink=sink)
    tracker.start("c", "bash")
    tracker.update("c").title("x").send()
    clock.now = 2.0
    with pytest.raises(OSError, match="pipe closed"):
        tracker.due()
    refuse[0] = False
    assert [note["update"].get("title") for note in tracker.due()] == ["x"]
    assert tracker.due() == []


def _finished_repeats(monkeypatch: pytest.MonkeyPatch, items: int) -> int:
    tracker = ToolCallTracker("s")
    tracker.start("c", "bash", content=[text_content("y" * 10)] * items)
    tracker.update("c").status("completed").send()
    work = Work(monkeypatch)
    for _ in range(100):
        assert tracker.update("c").status("completed").send() == []
    return work.total


def test_a_no_op_update_of_a_finished_call_costs_what_it_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: each repeat of a finished call's status deep-copied the whole call and hashed
    every field (100 repeats of a call holding 10,000 items copied a million items)."""
    small = _finished_repeats(monkeypatch, 100)
    large = _finished_repeats(monkeypatch, 10_000)
    assert large <= small + 1_000, (small, large)


def test_a_refused_change_of_a_finished_call_leaves_its_state(
    make_tracker: MakeTracker, sent: Sent
) -> None:
    tracker = make_tracker()
    tracker.start("c", "bash", content=[text_content("a")], locations=[{"path": "/a"}])
    tracker.update("c").status("failed").send()
    with pytest.raises(AcpError, match="changes its content"):
        tracker.update("c").text("b").send()
    with pytest.raises(AcpError, match="changes its locations"):
        tracker.update("c").add_location("/b").send()
    assert tracker.update("c").set_content([text_content("a")]).status("failed").send() == []
    state = tracker.state("c")
    assert state.content == [text_content("a")]
    assert state.locations == [{"path": "/a"}]


@pytest.mark.parametrize("full_objects", ["false", 0, 1, None, [True]])
def test_full_objects_must_be_a_bool(full_objects: Any) -> None:
    """Before: `full_objects="false"` was taken as true, and every update carried the
    whole call without a word."""
    with pytest.raises(AcpError, match=r"full_objects .* True or False"):
        ToolCallTracker("s", full_objects=full_objects)


def test_meta_is_carried_as_given(make_tracker: MakeTracker, sent: Sent) -> None:
    """Before: nulls inside `_meta` were dropped (`{"a": None, "b": {"c": None}}` went out as
    `{"b": {}}`); ACP says `_meta` is opaque: no assumptions about its values."""
    inner: dict[str, Any] = {"c": None, "d": [None, 1]}
    meta: dict[str, Any] = {"a": None, "b": inner, "_meta": None}
    terminal = {"type": "terminal", "terminalId": "term_1", "_meta": meta}
    block = {"type": "content", "content": {"type": "text", "text": "x", "_meta": meta}}
    where = {"path": "/a.py", "_meta": meta, "line": None}
    tracker = make_tracker()
    tracker.start("c", "bash", content=[terminal], locations=[where])
    assert sent[-1]["update"]["content"] == [terminal]
    assert sent[-1]["update"]["locations"] == [{"path": "/a.py", "_meta": meta}]
    tracker.update("c").set_content([block]).send()
    assert sent[-1]["update"]["content"] == [block]
    inner["c"] = 2  # the caller's later change does not leak
    assert tracker.state("c").content[0]["content"]["_meta"]["b"]["c"] is None


@pytest.mark.parametrize(
    "item",
    [
        {"type": "terminal", "terminalId": "t", "_meta": {"s": {1, 2}}},
        {"type": "terminal", "terminalId": "t", "_meta": {"x": float("nan")}},
        {
            "type": "content",
            "content": {"type": "text", "text": "x", "annotations": {"priority": float("inf")}},
        },
    ],
    ids=["set-in-meta", "nan-in-meta", "infinite-priority"],
)
def test_an_item_with_no_json_form_is_refused_where_made(
    make_tracker: MakeTracker, sent: Sent, item: dict[str, Any]
) -> None:
    """Before: the builder took it, the call's state held it, and that update and every later
    one of the call raised a CanonicalizationError (the call could not be updated again)."""
    tracker = make_tracker()
    tracker.start("c", "bash")
    with pytest.raises(AcpError, match="has no JSON form"):
        tracker.update("c").add_content(item).send()
    with pytest.raises(AcpError, match="has no JSON form"):
        tracker.start("d", "bash", content=[item])
    tracker.update("c").title("still usable").send()
    assert sent[-1]["update"]["title"] == "still usable"


def test_running_calls_are_bounded_by_max_running(make_tracker: MakeTracker, sent: Sent) -> None:
    """Before: calls started and never finished piled up for the whole session."""
    tracker = make_tracker(max_running=2)
    tracker.start("a", "bash")
    tracker.start("b", "bash")
    with pytest.raises(AcpError, match=r"max_running=2.*completed or failed"):
        tracker.start("c", "bash")
    tracker.update("a").status("completed").send()
    tracker.start("c", "bash")
    assert [note["update"]["toolCallId"] for note in sent[-1:]] == ["c"]


@pytest.mark.parametrize("max_running", [0, -1, 1.5, True, "8"])
def test_max_running_is_checked(max_running: Any) -> None:
    with pytest.raises(AcpError, match=r"max_running .* 1 or more"):
        ToolCallTracker("s", max_running=max_running)


class _NoWalk(OrderedDict[str, Any]):
    def __iter__(self) -> Iterator[str]:
        raise AssertionError("evicting the oldest finished call walked the map")


def test_evicting_a_finished_call_does_not_walk_the_map() -> None:
    """Before: `del d[next(iter(d))]` on a plain dict scans the slots already freed at its
    front: with keep_finished=100,000, each eviction cost up to a third of that."""
    tracker = ToolCallTracker("s", keep_finished=4)
    tracker._finished = _NoWalk()
    for n in range(20):
        tracker.start(f"c{n}", "bash")
        tracker.update(f"c{n}").status("completed").send()
    assert list(OrderedDict.keys(tracker._finished)) == ["c16", "c17", "c18", "c19"]


def _nested(levels: int) -> dict[str, Any]:
    top: dict[str, Any] = {}
    inner = top
    for _ in range(levels - 1):
        inner["a"] = {}
        inner = inner["a"]
    return top


@pytest.mark.parametrize("where", ["_meta", "annotations"])
def test_an_item_nested_past_the_depth_limit_is_refused_with_the_limit(
    make_tracker: MakeTracker, sent: Sent, where: str
) -> None:
    """Found in review: an item whose `_meta` (or any member) was nested 10,000 deep, or
    only 500, raised RecursionError from its copies, not `AcpError`; now the copy is an
    iterative walk, and past 123 levels (4 more make a JSON-RPC line of serde_json's 127:
    test_review_envelope) `AcpError` names the limit and the fix. Within it, the item is
    carried."""
    tracker = make_tracker()
    tracker.start("c", "bash")
    text: dict[str, Any] = {"type": "text", "text": "x", where: _nested(10_000)}
    deep = {"type": "content", "content": text}
    with pytest.raises(AcpError, match=r"nested past 123 levels.*flatten") as caught:
        tracker.update("c").add_content(deep).send()
    assert caught.value.extra["limit"] == 123
    with pytest.raises(AcpError, match="nested past 123 levels"):
        tracker.start("d", "bash", content=[deep])
    within = {"type": "content", "content": {"type": "text", "text": "y", "_meta": _nested(120)}}
    tracker.update("c").add_content(within).send()
    assert sent[-1]["update"]["content"] == [within]


def test_an_item_s_tuples_are_copied_so_later_changes_by_the_caller_do_not_leak(
    make_tracker: MakeTracker, sent: Sent
) -> None:
    """Found in review (second pass): `_copied` walked objects and lists only, so a tuple
    (a JSON array to `canonical_json`) was kept as the caller's own, with the objects in
    it: a change the caller made after `add_content` changed the call's state, and what a
    later update of the call sent. Now a tuple is copied as the list it is sent as."""
    tracker = make_tracker()
    tracker.start("c", "bash")
    inner: dict[str, Any] = {"n": 1}
    item = {"type": "content", "content": {"type": "text", "text": "x", "_meta": {"t": (inner,)}}}
    tracker.update("c").add_content(item).send()
    inner["n"] = 2  # the caller's own object, changed after it was given
    more = {"type": "content", "content": {"type": "text", "text": "y"}}
    tracker.update("c").add_content(more).send()  # the call's whole content sent again
    assert sent[-1]["update"]["content"][0]["content"]["_meta"] == {"t": [{"n": 1}]}
