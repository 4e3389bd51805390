"""Found in review (the ACP tracker, fourth pass): the depth bound counts the JSON-RPC
message the value is written in, not the value alone; `start_call` announces any call a
model made, however deep or odd its arguments; a value reused under many keys costs what
its JSON would, bounded by `max_value_bytes`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.acp.conformance import SERDE_JSON_DEPTH, json_depth
from toolref.acp import ToolCallTracker, jsonrpc, text_content
from toolref.streaming import CallStatus, ToolCall
from toolref.wire.errors import AcpError

MakeTracker = Callable[..., ToolCallTracker]
Sent = list[dict[str, Any]]


def _deep_list(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


def _nested(levels: int) -> dict[str, Any]:
    top: dict[str, Any] = {}
    inner = top
    for _ in range(levels - 1):
        inner["a"] = {}
        inner = inner["a"]
    return top


def _meta_item(levels: int) -> dict[str, Any]:
    return {"type": "content", "content": {"type": "text", "text": "x", "_meta": _nested(levels)}}


def _give(tracker: ToolCallTracker, where: str, levels: int, call_id: str) -> None:
    """Give the tracker a value of `levels` levels at `where`, by `start`, then the builder."""
    if where in ("raw_input", "raw_output"):
        tracker.start(call_id, "bash", **{where: _deep_list(levels)})
        getattr(tracker.update(call_id), where)(_deep_list(levels - 1)).send()
    elif where == "content":
        tracker.start(call_id, "bash", content=[_meta_item(levels)])
        tracker.update(call_id).set_content([_meta_item(levels - 1)]).send()
    else:
        location = {"path": "/a.py", "_meta": _nested(levels)}
        tracker.start(call_id, "read", locations=[location])
        tracker.update(call_id).set_locations([{"path": "/b.py"}]).send()


@pytest.mark.parametrize("where", ["raw_input", "raw_output", "content", "locations"])
def test_the_deepest_value_taken_fits_serde_json_as_the_whole_message(
    make_tracker: MakeTracker, sent: Sent, where: str
) -> None:
    """Before: a value was taken up to 128 levels counted from itself, but it is written
    3 levels down a JSON-RPC message (message, params, update; 4 for a content item or
    location, in its list), so the deepest taken made a 131- or 132-level line, which
    serde_json (Rust ACP clients such as Zed; 127 levels at most) refuses whole: the
    conformance check's depth assertion failed. Now the bound is the message's: the
    deepest value taken makes a line of exactly 127 levels, and one level more is refused
    where given, with the message's limit in the error."""
    tracker = make_tracker()
    deepest = 100
    while True:
        try:
            _give(tracker, where, deepest + 1, f"c{deepest + 1}")
        except AcpError:
            break
        deepest += 1
    with pytest.raises(AcpError, match=rf"past {SERDE_JSON_DEPTH} levels.*flatten"):
        _give(tracker, where, deepest + 1, "again")
    assert deepest < 140
    lines = [json.dumps(jsonrpc(note)) for note in sent]
    assert max(json_depth(line) for line in lines) == SERDE_JSON_DEPTH


def _call(arguments: dict[str, Any] | None, raw: str, **fields: Any) -> ToolCall:
    status = CallStatus.COMPLETE if arguments is not None else CallStatus.INVALID
    return ToolCall(
        index=0,
        id=fields.pop("id", "call_1"),
        name="bash",
        status=status,
        arguments=arguments,
        raw_arguments=raw,
        error=None if arguments is not None else "arguments are not valid JSON",
    )


def test_start_call_announces_arguments_too_deep_to_carry_as_their_json_text(
    make_tracker: MakeTracker, sent: Sent
) -> None:
    """Before: a model's arguments nested past the limit (json.loads reads ~1,000 levels)
    made `start_call` raise AcpError telling the caller to flatten a `rawInput` they never
    gave: an agent loop died on a model's output, with nothing announced. Now the call is
    announced (pending: its arguments are valid), `rawInput` the arguments' JSON text as
    it arrived (what the error told to do, exact), title and kind from the arguments."""
    tracker = make_tracker()
    arguments = {"command": "ls -la", "deep": _deep_list(300)}
    raw = json.dumps(arguments)
    tracker.start_call(_call(arguments, raw))
    (note,) = sent
    update = note["update"]
    assert update["status"] == "pending"
    assert update["title"] == "bash: ls -la"
    assert update["kind"] == "execute"
    assert update["rawInput"] == raw
    assert tracker.state("call_1").raw_input == raw


def test_start_call_announces_arguments_with_a_lone_surrogate(
    make_tracker: MakeTracker, sent: Sent
) -> None:
    """Before: `"\\ud800"` in a model's arguments (json.loads reads it as a lone surrogate)
    made `start_call` raise AcpError ("rawInput has no JSON form"), and the title made of
    it could not be parsed by serde_json. Now `rawInput` is the arguments' JSON text
    (the surrogate as its escape), and the title shows U+FFFD in its place."""
    tracker = make_tracker()
    raw = '{"command":"echo \\ud800"}'
    arguments = json.loads(raw)
    tracker.start_call(_call(arguments, raw))
    tracker.start_call(_call(None, '{"command":"echo \ud800', id="call_2"))
    first, second = (note["update"] for note in sent)
    assert first["rawInput"] == raw
    assert first["title"] == "bash: echo \ufffd"
    assert first["status"] == "pending"
    assert second["status"] == "failed"
    assert second["rawInput"] == {"INVALID_JSON": '{"command":"echo \\ud800'}
    for note in sent:
        json.dumps(note, ensure_ascii=False).encode()  # UTF-8 carries all of it


def test_a_title_with_a_lone_surrogate_from_the_caller_is_refused(
    make_tracker: MakeTracker, sent: Sent
) -> None:
    """Before: taken and sent; serde_json refuses the whole notification ("lone leading
    surrogate in hex escape"). Now `AcpError` says to pair or replace it, where given."""
    tracker = make_tracker()
    with pytest.raises(AcpError, match=r"lone UTF-16 surrogate.*U\+FFFD"):
        tracker.start("a", "bash \ud800")
    tracker.start("a", "bash")
    with pytest.raises(AcpError, match="lone UTF-16 surrogate"):
        tracker.update("a").title("run \udc00")
    assert [note["update"]["title"] for note in sent] == ["bash"]


def _dag(levels: int) -> dict[str, Any]:
    """A value whose JSON is 2**levels leaves: each level holds the one below twice."""
    value: dict[str, Any] = {"leaf": "x"}
    for _ in range(levels):
        value = {"a": value, "b": value}
    return value


@pytest.mark.parametrize("where", ["raw_input", "raw_output", "content", "locations"])
def test_a_value_reused_under_many_keys_is_refused_past_the_size_bound(
    make_tracker: MakeTracker, sent: Sent, where: str
) -> None:
    """Before: a value reusing one object under two keys, 30 levels down (2**30 leaves of
    JSON, a few dozen objects in memory), was walked path by path: the depth check, the
    item copy and the JSON check never returned. Now each walk counts the bytes the JSON
    would take, stops past `max_value_bytes`, and `AcpError` names the bound and the
    fix; within it, the value is carried as its JSON."""
    tracker = make_tracker(max_value_bytes=20_000)
    tracker.start("c", "read")
    big = _dag(30)
    if where in ("raw_input", "raw_output"):
        with pytest.raises(AcpError, match=r"over 20000 bytes.*max_value_bytes") as caught:
            getattr(tracker.update("c"), where)(big)
        with pytest.raises(AcpError, match=r"over 20000 bytes"):
            tracker.start("d", "bash", raw_input=big)
    elif where == "content":
        item = {"type": "content", "content": {"type": "text", "text": "x", "_meta": big}}
        with pytest.raises(AcpError, match=r"over 20000 bytes.*max_value_bytes") as caught:
            tracker.update("c").add_content(item)
        with pytest.raises(AcpError, match=r"over 20000 bytes"):
            tracker.start("d", "bash", content=[item])
    else:
        with pytest.raises(AcpError, match=r"over 20000 bytes.*max_value_bytes") as caught:
            tracker.update("c").set_locations([{"path": "/a.py", "_meta": big}])
    assert caught.value.extra["limit"] == "max_value_bytes"
    assert caught.value.extra["maximum"] == 20_000
    small = _dag(6)  # 64 leaves
    tracker.update("c").raw_output(small).status("completed").send()
    assert sent[-1]["update"]["rawOutput"] == json.loads(json.dumps(small))
    assert len(sent) == 2


def test_the_default_size_bound_holds_for_a_string_reused(
    make_tracker: MakeTracker, sent: Sent
) -> None:
    """A few objects in memory, 20 MiB of JSON: one string of 1 MiB under 20 keys. The
    default bound (16 MiB) refuses it at once; the caller may raise it."""
    tracker = make_tracker()
    text = "x" * 2**20
    value = {str(n): text for n in range(20)}
    with pytest.raises(AcpError, match=r"over 16777216 bytes"):
        tracker.start("a", "bash", raw_output=value)
    roomy = make_tracker(max_value_bytes=32 * 2**20)
    roomy.start("a", "bash", raw_output=value)
    assert len(sent[-1]["update"]["rawOutput"]) == 20


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_max_value_bytes_is_checked(bad: Any) -> None:
    with pytest.raises(AcpError, match="max_value_bytes"):
        ToolCallTracker("s", max_value_bytes=bad)


def test_an_item_reused_in_a_list_is_copied_once_per_use(
    make_tracker: MakeTracker, sent: Sent
) -> None:
    """Within the bound a reused item is carried as its JSON, one copy per use: a later
    change by the caller reaches none of them."""
    tracker = make_tracker()
    tracker.start("c", "bash")
    item = text_content("same")
    tracker.update("c").set_content([item, item]).send()
    item["content"]["text"] = "changed"
    tracker.update("c").status("completed").send()
    assert tracker.state("c").content == [text_content("same")] * 2


def test_a_plan_entry_with_a_lone_surrogate_is_shown_with_u_fffd(
    make_tracker: MakeTracker, sent: Sent
) -> None:
    """Before: a model's todo text with `"\\ud800"` made `plan()` raise the wire layer's
    CanonicalizationError (from hashing the entries), and no plan went out. The text is
    for people: the surrogate is shown as U+FFFD, and the plan goes out."""
    tracker = make_tracker()
    todos = json.loads('{"todos": [{"content": "fix \\ud800", "status": "pending"}, "a\\udc00"]}')
    tracker.plan(todos)
    entries = sent[-1]["update"]["entries"]
    assert [entry["content"] for entry in entries] == ["fix \ufffd", "a\ufffd"]


def test_start_call_announces_arguments_past_the_size_bound_without_raw_input(
    make_tracker: MakeTracker, sent: Sent
) -> None:
    """A model's arguments past `max_value_bytes`, even as text, are announced all the
    same (title, kind), with no `rawInput`: the call is shown, the tool may run."""
    tracker = make_tracker(max_value_bytes=100)
    arguments = {"command": "echo " + "x" * 500}
    tracker.start_call(_call(arguments, json.dumps(arguments)))
    (note,) = sent
    assert "rawInput" not in note["update"]
    assert note["update"]["title"].startswith("bash: echo xxx")
    assert tracker.state("call_1").raw_input is None


def test_a_call_id_with_a_lone_surrogate_is_refused(make_tracker: MakeTracker, sent: Sent) -> None:
    """Before: taken, and every notification of the call carried it (serde_json refuses
    them all). Now `AcpError` where it is given, and nothing is sent."""
    tracker = make_tracker()
    with pytest.raises(AcpError, match="lone UTF-16 surrogate"):
        tracker.start("call_\ud800", "bash")
    assert sent == []
