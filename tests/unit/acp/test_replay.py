"""Property tests: a client that applies the ACP v1 merge rules to every notification the
tracker emits ends up showing exactly the tracker's state, and no notification carries
more than it has to.

The replayer below follows the spec (notes/acp.md §2, the Python SDK's SessionAccumulator
and Zed): `tool_call` creates a call (kind `other`, status `pending`, no content or
locations unless given), `tool_call_update` sets each field it carries (content and
locations replace the whole array), `plan` replaces the plan. Unlike Zed or the SDK it
refuses an update for an unknown id and a second `tool_call` for an id: from this tracker
either would be a bug.

Hypothesis plans a few calls and a random interleaving of builder batches (status, title,
kind, content added / replaced / cleared / edited in place, locations likewise, rawInput and
rawOutput with nested JSON, and values repeated unchanged), plans, clock ticks, `due()` and
`flush()`. The same program runs with updates sent at once, coalesced in a window, and as
full objects. Every notification passes `conformance.check` (official schema, no unknown
keys, no nulls, lossless pydantic round trip).
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.acp.conformance import check
from toolref.acp import (
    ToolCallStatus,
    ToolCallTracker,
    ToolKind,
    diff_content,
    location,
    terminal_content,
    text_content,
)
from toolref.wire.errors import AcpError

SETTINGS = settings(
    deadline=None,
    max_examples=30,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
WINDOW: Final = 1.0
FIELDS: Final = ("title", "kind", "status", "content", "locations", "rawInput", "rawOutput")
FINAL: Final = frozenset({"completed", "failed"})


# --- the client side ----------------------------------------------------------------------


class ReplayError(AssertionError):
    """A notification a v1 client could not apply as the tracker meant it."""


def json_equal(a: Any, b: Any) -> bool:
    """Equality in the JSON data model: `true` is not `1`, but `1` is `1.0`."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[key], b[key]) for key in a)
    return a is None and b is None


def _refuse_nulls(value: Any, where: str) -> None:
    if value is None:
        raise ReplayError(f"null at {where}: v1 reads it as no change")
    if isinstance(value, dict):
        for key, item in value.items():
            _refuse_nulls(item, f"{where}.{key}")
    elif isinstance(value, list):
        for n, item in enumerate(value):
            _refuse_nulls(item, f"{where}[{n}]")


@dataclass
class Replayer:
    """What a spec-following v1 client shows after each `session/update`."""

    calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    starts: Counter[str] = field(default_factory=Counter)
    plan: list[dict[str, Any]] | None = None

    def apply(self, notification: dict[str, Any]) -> None:
        update = copy.deepcopy(notification["update"])
        kind = update.pop("sessionUpdate")
        update.pop("_meta", None)
        if kind == "plan":
            _refuse_nulls(update["entries"], "entries")
            self.plan = update["entries"]
            return
        call_id = update.pop("toolCallId")
        for name, value in update.items():
            if name not in FIELDS:
                raise ReplayError(f"{kind} carries {name!r}, not a tool call field")
            if name in ("content", "locations"):
                _refuse_nulls(value, name)
            elif value is None:  # rawInput / rawOutput may hold nested nulls, as any JSON
                raise ReplayError(f"null {name}: v1 reads it as no change")
        if kind == "tool_call":
            if call_id in self.calls:
                raise ReplayError(f"second tool_call for {call_id!r}: clients reset the call")
            if "title" not in update:
                raise ReplayError(f"tool_call for {call_id!r} without a title")
            self.starts[call_id] += 1
            self.calls[call_id] = {
                "kind": "other",
                "status": "pending",
                "content": [],
                "locations": [],
                **update,
            }
        elif kind == "tool_call_update":
            if call_id not in self.calls:
                raise ReplayError(f"tool_call_update for {call_id!r}, never announced")
            self.calls[call_id].update(update)  # collections replace, never extend
        else:
            raise ReplayError(f"unexpected sessionUpdate {kind!r}")


def test_replayer_follows_the_merge_rules() -> None:
    replay = Replayer()
    replay.apply(
        {
            "sessionId": "s",
            "update": {"sessionUpdate": "tool_call", "toolCallId": "a", "title": "t"},
        }
    )
    assert replay.calls["a"] == {
        "title": "t",
        "kind": "other",
        "status": "pending",
        "content": [],
        "locations": [],
    }
    one, two = text_content("1"), text_content("2")
    for content in ([one], [two]):
        replay.apply(
            {
                "sessionId": "s",
                "update": {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": "a",
                    "content": content,
                },
            }
        )
    assert replay.calls["a"]["content"] == [two]  # replaced, not appended
    assert replay.calls["a"]["title"] == "t"  # omitted: unchanged
    entries = [{"content": "x", "priority": "low", "status": "pending"}]
    replay.apply({"sessionId": "s", "update": {"sessionUpdate": "plan", "entries": entries}})
    replay.apply({"sessionId": "s", "update": {"sessionUpdate": "plan", "entries": []}})
    assert replay.plan == []


@pytest.mark.parametrize(
    "update",
    [
        {"sessionUpdate": "tool_call_update", "toolCallId": "b", "status": "completed"},
        {"sessionUpdate": "tool_call", "toolCallId": "a", "title": "again"},
        {"sessionUpdate": "tool_call_update", "toolCallId": "a", "status": None},
        {"sessionUpdate": "tool_call_update", "toolCallId": "a", "statuss": "completed"},
    ],
    ids=["unknown-id", "second-tool-call", "null", "unknown-field"],
)
def test_replayer_refuses_what_a_correct_tracker_never_sends(update: dict[str, Any]) -> None:
    replay = Replayer()
    replay.apply(
        {
            "sessionId": "s",
            "update": {"sessionUpdate": "tool_call", "toolCallId": "a", "title": "t"},
        }
    )
    with pytest.raises(ReplayError):
        replay.apply({"sessionId": "s", "update": update})


# --- programs -----------------------------------------------------------------------------

_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=6)
_SHORT = st.sampled_from(["", "a", "b", "done", "Zoë 🌍", "line\nbreak"]) | _TEXT
_TITLE = st.sampled_from(["Read file", "bash: ls", "Edit /src/app.py", "日本語"]) | st.text(
    st.characters(exclude_categories=["Cs"]), min_size=1, max_size=8
)
_PATH = st.sampled_from(["/src/app.py", "/src/lib.rs", "/tmp/a b.txt", "/home/zoë/日本.md"])
_LINE = st.none() | st.integers(min_value=0, max_value=5000)
_TERMINAL = st.sampled_from(["term_1", "term_2", "term_3"])

_ITEM = st.one_of(
    st.builds(text_content, _SHORT),
    st.builds(diff_content, _PATH, _SHORT, st.none() | _SHORT),
    st.builds(terminal_content, _TERMINAL),
)
_LOCATION = st.builds(location, _PATH, _LINE)

# Integers within 2**53 so that an int equal to a float is the same JSON number both ways.
_SCALAR = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _SHORT
)
_JSON = st.recursive(
    _SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_SHORT, inner, max_size=3),
    max_leaves=6,
)
_RAW = st.dictionaries(_SHORT, _JSON, max_size=3) | _JSON.filter(lambda value: value is not None)

_ENTRY = st.fixed_dictionaries(
    {
        "content": _SHORT,
        "priority": st.sampled_from(["high", "medium", "low"]),
        "status": st.sampled_from(["pending", "in_progress", "completed"]),
    }
)

Change = tuple[Any, ...]
_CHANGE: st.SearchStrategy[Change] = st.one_of(
    st.tuples(st.just("text"), _SHORT),  # first: the simplest examples still change a call
    st.tuples(st.just("status"), st.sampled_from([s.value for s in ToolCallStatus])),
    st.tuples(st.just("title"), _TITLE),
    st.tuples(st.just("kind"), st.sampled_from([k.value for k in ToolKind])),
    st.tuples(st.just("add_content"), st.lists(_ITEM, min_size=1, max_size=2)),
    st.tuples(st.just("diff"), _PATH, _SHORT, st.none() | _SHORT),
    st.tuples(st.just("terminal"), _TERMINAL),
    st.tuples(st.just("set_content"), st.lists(_ITEM, max_size=3)),
    st.tuples(st.just("clear_content")),
    st.tuples(st.just("edit_content"), st.integers(min_value=0, max_value=5), _SHORT),
    st.tuples(st.just("set_locations"), st.lists(_LOCATION, max_size=3)),
    st.tuples(st.just("add_location"), _PATH, _LINE),
    st.tuples(st.just("clear_locations")),
    st.tuples(st.just("edit_line"), st.integers(min_value=0, max_value=5), _LINE),
    st.tuples(st.just("raw_input"), _RAW),
    st.tuples(st.just("raw_output"), _RAW),
    st.tuples(st.just("edit_raw"), st.sampled_from(["raw_input", "raw_output"]), _SHORT, _JSON),
    st.tuples(
        st.just("same"),
        st.sampled_from(
            ["status", "title", "kind", "content", "locations", "raw_input", "raw_output"]
        ),
    ),
)


@dataclass(frozen=True)
class Start:
    title: str
    kind: str | None
    status: str | None
    content: list[dict[str, Any]]
    locations: list[dict[str, Any]]
    raw_input: Any
    raw_output: Any


@dataclass(frozen=True)
class Batch:
    call: int
    changes: tuple[Change, ...]


@dataclass(frozen=True)
class Plan:
    entries: list[dict[str, str]] | None  # None: send the last plan again


@dataclass(frozen=True)
class Tick:
    seconds: float


@dataclass(frozen=True)
class Due:
    pass


@dataclass(frozen=True)
class Flush:
    call: int | None


Op = Batch | Plan | Tick | Due | Flush


@dataclass(frozen=True)
class Program:
    ids: list[str]
    starts: list[Start]
    ops: list[Op]


_START = st.builds(
    Start,
    title=_TITLE,
    kind=st.none() | st.sampled_from([k.value for k in ToolKind]),
    status=st.none() | st.sampled_from([s.value for s in ToolCallStatus]),
    content=st.lists(_ITEM, max_size=2),
    locations=st.lists(_LOCATION, max_size=2),
    raw_input=st.none() | _RAW,
    raw_output=st.none() | _RAW,
)


@st.composite
def programs(draw: st.DrawFn) -> Program:
    ids = draw(
        st.lists(
            st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=5),
            min_size=1,
            max_size=4,
            unique=True,
        )
    )
    calls = st.integers(min_value=0, max_value=len(ids) - 1)
    batch = st.builds(Batch, calls, st.lists(_CHANGE, min_size=1, max_size=3).map(tuple))
    op: st.SearchStrategy[Op] = st.one_of(
        batch,
        batch,
        batch,
        batch,
        st.builds(Plan, st.none() | st.lists(_ENTRY, max_size=3)),
        st.builds(Plan, st.none() | st.lists(_ENTRY, max_size=3)),
        st.builds(Tick, st.sampled_from([0.0, 0.25, WINDOW, 1.5]) | st.floats(0, 2 * WINDOW)),
        st.just(Due()),
        st.builds(Flush, st.none() | calls),
    )
    return Program(
        ids=ids,
        starts=draw(st.lists(_START, min_size=len(ids), max_size=len(ids))),
        ops=draw(st.lists(op, min_size=6, max_size=24)),
    )


# --- running a program --------------------------------------------------------------------


def _edited(item: dict[str, Any], text: str) -> dict[str, Any]:
    """`item` with its text changed (an in-place edit of one content item)."""
    item = copy.deepcopy(item)
    if item["type"] == "content":
        item["content"]["text"] = text
    elif item["type"] == "diff":
        item["newText"] = text
    else:
        item["terminalId"] = f"term_{text}"
    return item


def _build(tracker: ToolCallTracker, call_id: str, changes: tuple[Change, ...]) -> list[Any]:
    """Apply one batch through the fluent builder; what `send()` returned."""
    before = tracker.state(call_id)  # what the caller reads to edit or repeat a value
    builder = tracker.update(call_id)
    for change in changes:
        match change:
            case ("status", value):
                builder.status(value)
            case ("title", value):
                builder.title(value)
            case ("kind", value):
                builder.kind(value)
            case ("add_content", items):
                builder.add_content(*items)
            case ("text", text):
                builder.text(text)
            case ("diff", path, new_text, old_text):
                builder.diff(path, new_text, old_text)
            case ("terminal", terminal_id):
                builder.terminal(terminal_id)
            case ("set_content", items):
                builder.set_content(items)
            case ("clear_content",):
                builder.clear_content()
            case ("edit_content", index, text):
                if before.content:
                    content = copy.deepcopy(before.content)
                    at = index % len(content)
                    content[at] = _edited(content[at], text)
                    builder.set_content(content)
            case ("set_locations", items):
                builder.set_locations(items)
            case ("add_location", path, line):
                builder.add_location(path, line)
            case ("clear_locations",):
                builder.clear_locations()
            case ("edit_line", index, line):
                if before.locations:
                    locations = copy.deepcopy(before.locations)
                    at = index % len(locations)
                    locations[at] = location(locations[at]["path"], line)
                    builder.set_locations(locations)
            case ("raw_input", value):
                builder.raw_input(value)
            case ("raw_output", value):
                builder.raw_output(value)
            case ("edit_raw", attr, key, value):
                raw = copy.deepcopy(getattr(before, attr))
                raw = raw if isinstance(raw, dict) else {}
                raw[key] = value
                getattr(builder, attr)(raw)
            case ("same", attr):
                value = copy.deepcopy(getattr(before, attr))
                if attr == "content":
                    builder.set_content(value)
                elif attr == "locations":
                    builder.set_locations(value)
                elif value is not None:
                    getattr(builder, attr)(value)
            case _:
                raise AssertionError(f"unknown change {change!r}")
    return builder.send()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Run:
    """A tracker whose every notification is checked, replayed and compared as it goes."""

    mode: str
    replay: Replayer = field(default_factory=Replayer)
    clock: Clock = field(default_factory=Clock)
    sent: list[dict[str, Any]] = field(default_factory=list)
    tracker: ToolCallTracker = field(init=False)

    def __post_init__(self) -> None:
        self.tracker = ToolCallTracker(
            "sess_replay",
            window=WINDOW if self.mode == "coalesced" else 0.0,
            full_objects=self.mode == "full",
            sink=self._receive,
            clock=self.clock,
        )

    def _receive(self, notification: dict[str, Any]) -> None:
        check(notification)
        update = notification["update"]
        call_id = update.get("toolCallId")
        before = copy.deepcopy(self.replay.calls.get(call_id, {})) if call_id else {}
        self.replay.apply(notification)  # refuses orphans, repeats and nulls
        self.sent.append(notification)
        if update["sessionUpdate"] == "plan":
            return
        # The client now shows exactly what the tracker holds (held changes included).
        shown = self.replay.calls[call_id]
        current = self.tracker.state(call_id).fields()
        assert json_equal(shown, current), (shown, current)
        if update["sessionUpdate"] != "tool_call_update":
            return
        carried = {name: update[name] for name in FIELDS if name in update}
        changed = {
            name for name, value in carried.items() if not json_equal(value, before.get(name))
        }
        assert changed, f"an update that changes nothing: {update}"
        if self.mode == "full":
            assert carried.keys() == current.keys(), update
        else:
            # Only what differs from what the client had; and (since the client now matches
            # the tracker) everything that differed.
            assert changed == carried.keys(), (before, update)

    def call(self, act: Callable[..., list[Any]], *args: Any, **kwargs: Any) -> None:
        """Run one tracker call; what it returns must be what went to the sink."""
        start = len(self.sent)
        returned = act(*args, **kwargs)
        assert returned == self.sent[start:]

    def assert_in_sync(self, call_id: str) -> None:
        assert not self.tracker.pending(call_id)
        shown = self.replay.calls[call_id]
        current = self.tracker.state(call_id).fields()
        assert json_equal(shown, current), (shown, current)


def _start(run: Run, call_id: str, spec: Start) -> None:
    options: dict[str, Any] = {
        "content": spec.content,
        "locations": spec.locations,
        "raw_input": spec.raw_input,
        "raw_output": spec.raw_output,
    }
    if spec.kind is not None:
        options["kind"] = spec.kind
    if spec.status is not None:
        options["status"] = spec.status
    run.call(run.tracker.start, call_id, spec.title, **options)
    run.assert_in_sync(call_id)


def _run(program: Program, mode: str) -> None:
    run = Run(mode)
    tracker = run.tracker
    started: list[str] = []
    last_plan: list[dict[str, str]] | None = None

    def ensure(index: int) -> str:
        call_id = program.ids[index]
        if call_id not in started:
            _start(run, call_id, program.starts[index])
            started.append(call_id)
        return call_id

    for op in program.ops:
        match op:
            case Batch(index, changes):
                call_id = ensure(index)
                if tracker.state(call_id).status in FINAL:
                    before = len(run.sent)  # finished: v1 has nothing after it, so a
                    try:  # repeat is dropped and a change refused
                        returned = _build(tracker, call_id, changes)
                    except AcpError as exc:
                        returned = [str(exc)]
                    assert returned == [] or "already" in returned[0]
                    assert len(run.sent) == before
                    continue
                run.call(_build, tracker, call_id, changes)
                if tracker.state(call_id).status in FINAL:
                    run.assert_in_sync(call_id)  # completed / failed go out at once
            case Plan(entries):
                if entries is None and last_plan is not None:
                    entries = copy.deepcopy(last_plan)
                if entries is not None:
                    before = len(run.sent)
                    run.call(tracker.plan, entries)
                    # An unchanged plan is not sent again; a changed one is, whole.
                    assert len(run.sent) - before == (entries != last_plan)
                    last_plan = entries
            case Tick(seconds):
                run.clock.now += seconds
            case Due():
                run.call(tracker.due)
            case Flush(None):
                run.call(tracker.flush)
                for call_id in started:
                    run.assert_in_sync(call_id)
            case Flush(int(index)):
                call_id = ensure(index)
                run.call(tracker.flush, call_id)
                run.assert_in_sync(call_id)
        if mode != "coalesced":
            for call_id in started:
                run.assert_in_sync(call_id)  # nothing is ever held

    for index in range(len(program.ids)):
        ensure(index)
    run.call(tracker.flush)
    for call_id in program.ids:
        run.assert_in_sync(call_id)
    assert run.replay.starts == Counter(program.ids)  # one tool_call each, before updates
    assert run.replay.plan == last_plan


@pytest.mark.parametrize("mode", ["immediate", "coalesced", "full"])
@SETTINGS
@given(program=programs())
def test_replaying_the_notifications_gives_the_tracker_state(mode: str, program: Program) -> None:
    _run(program, mode)


def test_values_are_snapshotted_when_sent() -> None:
    run = Run("immediate")
    item, args = text_content("a"), {"path": "/src/app.py"}
    run.call(run.tracker.start, "c", "Read", raw_input=args)
    run.call(run.tracker.update("c").add_content(item).raw_output(args).send)
    item["content"]["text"] = "b"  # the caller reuses its buffers
    args["path"] = "/src/lib.rs"
    run.assert_in_sync("c")
