"""Summary mode, pure parts: placeholders, which results are older, replacing and applying."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolref import formats
from toolref.formats import Format, Scan
from toolref.formats.site import get_at
from toolref.kit.extractive import summarize
from toolref.kit.payload import text_of
from toolref.kit.placeholder import parse, placeholder
from toolref.wire.canonical import digest_of, is_ref
from toolref.wire.encoding import dumps_json
from toolref.wire.models import FormatName
from toolref_server.registry.compaction import Candidate, apply, older_results, replacements

from ..conftest import need

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"
REF = "tr_x7k2m4qpeoaccwyd6n3h5ggwmu"
Message = dict[str, Any]
Turn = tuple[list[tuple[str, str, Any]], list[tuple[str, Any]]]


def ref_of(name: str, args: Any, result: Any) -> str:
    return str(digest_of({"name": name, "args": args, "result": result}).ref)


# --- placeholder --------------------------------------------------------------------------


def test_placeholder_names_the_tool_and_the_ref_then_gives_the_summary() -> None:
    text = placeholder("read_file", REF, "read_file src/app.py: 5321 bytes, 120 lines\nimport os")
    assert text == (
        "[toolref: summary of the read_file result; the full result is ref "
        "tr_x7k2m4qpeoaccwyd6n3h5ggwmu]\n"
        "read_file src/app.py: 5321 bytes, 120 lines\nimport os"
    )
    assert parse(text) == (
        "read_file",
        REF,
        "read_file src/app.py: 5321 bytes, 120 lines\nimport os",
    )


@pytest.mark.parametrize(
    "tool",
    [
        "read_file",
        "Read",
        "my tool with spaces",
        "[bracketed]",
        "a]b[c",
        "]",
        "",
        " ",
        "mcp__github__get_file",
        "名前",
        "x result; the full result is ref tr_aaaaaaaaaaaaaaaaaaaaaaaaaa]",
        "tab\tand\rcarriage",
    ],
)
@pytest.mark.parametrize(
    "summary",
    [
        "",
        "one line",
        "line 1\nline 2\n\nline 4\n",
        "\n",
        "[toolref: summary of the other result; the full result is ref "
        "tr_aaaaaaaaaaaaaaaaaaaaaaaaaa]\nnested",
        "é\U0001f600",
    ],
)
def test_placeholder_and_parse_round_trip(tool: str, summary: str) -> None:
    assert parse(placeholder(tool, REF, summary)) == (tool, REF, summary)


@settings(max_examples=200, deadline=None)
@given(
    st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\n"), max_size=40),
    st.text(st.characters(exclude_categories=["Cs"]), max_size=200),
    st.binary(min_size=16, max_size=16),
)
def test_any_placeholder_parses_back(tool: str, summary: str, digest: bytes) -> None:
    ref = "tr_" + base64.b32encode(digest).decode().lower().rstrip("=")
    assert is_ref(ref)
    text = placeholder(tool, ref, summary)
    assert parse(text) == (tool, ref, summary)
    assert placeholder(tool, ref, summary) == text  # byte-stable


def test_a_tool_name_with_a_newline_round_trips() -> None:
    assert parse(placeholder("two\nlines", REF, "s")) == ("two\nlines", REF, "s")


HEADER = f"[toolref: summary of the read_file result; the full result is ref {REF}]"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "plain result text",
        HEADER,  # no newline after the first line
        HEADER + " \nsummary",
        " " + HEADER + "\nsummary",
        "\n" + HEADER + "\nsummary",
        "output first\n" + HEADER + "\nsummary",
        HEADER.replace("tr_x7k", "tr_X7K") + "\nsummary",  # refs are lowercase
        HEADER.replace("tr_x7k", "tr_x1k") + "\nsummary",  # 1 is not base32
        HEADER.replace("tr_x7k", "tr_x7") + "\nsummary",  # too short
        HEADER.replace("mu]", "mua]") + "\nsummary",  # too long
        HEADER.replace("tr_", "tx_") + "\nsummary",
        HEADER.replace("[toolref:", "[toolref :") + "\nsummary",
        HEADER.replace(" result;", ";") + "\nsummary",
        HEADER.removesuffix("]") + "\nsummary",
        '{"output": "' + HEADER + '\\nsummary"}',
    ],
)
def test_parse_of_anything_else_is_none(text: str) -> None:
    assert parse(text) is None


# --- conversations, by hand ---------------------------------------------------------------


def anthropic(*turns: Turn) -> list[Message]:
    """Turns of (calls as (id, tool, input), results as (id, content)), in the given order."""
    messages: list[Message] = [{"role": "user", "content": "go"}]
    for calls, results in turns:
        if calls:
            blocks = [
                {"type": "tool_use", "id": i, "name": tool, "input": args}
                for i, tool, args in calls
            ]
            messages.append({"role": "assistant", "content": blocks})
        if results:
            content = [{"type": "tool_result", "tool_use_id": i, "content": c} for i, c in results]
            messages.append({"role": "user", "content": content})
    return messages


def chat(*turns: Turn) -> list[Message]:
    """OpenAI chat: one assistant message per turn, one tool message per result."""
    messages: list[Message] = [{"role": "user", "content": "go"}]
    for calls, results in turns:
        if calls:
            tool_calls = [
                {
                    "id": i,
                    "type": "function",
                    "function": {"name": tool, "arguments": json.dumps(args)},
                }
                for i, tool, args in calls
            ]
            messages.append({"role": "assistant", "content": None, "tool_calls": tool_calls})
        messages.extend({"role": "tool", "tool_call_id": i, "content": c} for i, c in results)
    return messages


def gemini(*turns: Turn) -> list[Message]:
    """Gemini with ids; results are response objects."""
    messages: list[Message] = [{"role": "user", "parts": [{"text": "go"}]}]
    names: dict[str, str] = {}
    for calls, results in turns:
        if calls:
            parts = []
            for i, tool, args in calls:
                names[i] = tool
                parts.append({"functionCall": {"id": i, "name": tool, "args": args}})
            messages.append({"role": "model", "parts": parts})
        if results:
            parts = [
                {"functionResponse": {"id": i, "name": names.get(i, "orphan"), "response": c}}
                for i, c in results
            ]
            messages.append({"role": "user", "parts": parts})
    return messages


Builder = Callable[..., list[Message]]


def scanned(messages: list[Message]) -> tuple[Format, Scan]:
    fmt = formats.detect(messages)
    return fmt, formats.scan(messages, fmt)


def refs_for(found: Scan) -> dict[str, str]:
    return {pair.key: str(digest_of(pair.invocation()).ref) for pair in found.complete}


def keys(candidates: list[Candidate]) -> list[str]:
    return [c.pair.key for c in candidates]


def sequential(n: int, build: Builder = anthropic, tool: str = "Read") -> list[Message]:
    return build(
        *(
            ([(f"c{i}", tool, {"file_path": f"f{i}.py"})], [(f"c{i}", f"body {i}\n" * 40)])
            for i in range(n)
        )
    )


# --- older_results ------------------------------------------------------------------------


@pytest.mark.parametrize("build", [anthropic, chat, gemini])
@pytest.mark.parametrize(
    ("keep_recent", "expected"),
    [
        (0, ["c0", "c1", "c2", "c3", "c4"]),
        (1, ["c0", "c1", "c2", "c3"]),
        (3, ["c0", "c1"]),
        (4, ["c0"]),
        (5, []),
        (6, []),
        (9, []),
        (50, []),
    ],
)
def test_the_last_keep_recent_results_stay_full(
    build: Builder, keep_recent: int, expected: list[str]
) -> None:
    _, found = scanned(sequential(5, build))
    refs = refs_for(found)
    candidates = older_results(found, refs, keep_recent, ())
    assert keys(candidates) == expected
    for candidate in candidates:
        assert candidate.ref == refs[candidate.pair.key]
        assert candidate.invocation == candidate.pair.invocation()
        assert candidate.invocation["name"] == "Read"


def test_a_negative_keep_recent_keeps_none_full() -> None:
    _, found = scanned(sequential(3))
    assert keys(older_results(found, refs_for(found), -2, ())) == ["c0", "c1", "c2"]


@pytest.mark.parametrize("build", [anthropic, chat, gemini])
def test_order_is_by_result_position_not_by_call(build: Builder) -> None:
    # One turn of parallel calls a, b, c answered c, a, b; then a later call d answered at once.
    messages = build(
        (
            [
                ("a", "Read", {"file_path": "a"}),
                ("b", "Bash", {"command": "b"}),
                ("c", "Grep", {"pattern": "c"}),
            ],
            [("c", "C" * 300), ("a", "A" * 300), ("b", "B" * 300)],
        ),
        ([("d", "Read", {"file_path": "d"})], [("d", "D" * 300)]),
    )
    _, found = scanned(messages)
    refs = refs_for(found)
    assert [p.key for p in found.pairs] == ["a", "b", "c", "d"]  # call order
    assert keys(older_results(found, refs, 0, ())) == ["c", "a", "b", "d"]
    assert keys(older_results(found, refs, 1, ())) == ["c", "a", "b"]
    assert keys(older_results(found, refs, 2, ())) == ["c", "a"]
    assert keys(older_results(found, refs, 3, ())) == ["c"]


def test_a_result_that_arrives_before_an_earlier_call_is_answered() -> None:
    # Call x, then call y; y is answered first, then x (both in later messages).
    messages = chat(
        ([("x", "Read", {"path": "x"})], []),
        ([("y", "Read", {"path": "y"})], [("y", "Y" * 200)]),
        ([], [("x", "X" * 200)]),
    )
    _, found = scanned(messages)
    assert keys(older_results(found, refs_for(found), 1, ())) == ["y"]
    assert keys(older_results(found, refs_for(found), 0, ())) == ["y", "x"]


@pytest.mark.parametrize("build", [anthropic, gemini])
def test_ten_or_more_parallel_results_in_one_message_keep_their_order(build: Builder) -> None:
    ids = [f"t{i}" for i in range(12)]
    messages = build(
        ([(i, "Read", {"file_path": i}) for i in ids], [(i, "x" * 100) for i in ids]),
    )
    _, found = scanned(messages)
    assert keys(older_results(found, refs_for(found), 3, ())) == ids[:9]


def test_excluded_tools_are_never_candidates() -> None:
    messages = anthropic(
        *(
            ([(f"c{i}", tool, {"n": i})], [(f"c{i}", "r" * 100)])
            for i, tool in enumerate(["Read", "TodoWrite", "Bash", "TodoWrite", "Read", "Bash"])
        )
    )
    _, found = scanned(messages)
    refs = refs_for(found)
    assert keys(older_results(found, refs, 2, ["TodoWrite"])) == ["c0", "c2"]
    assert keys(older_results(found, refs, 0, {"TodoWrite", "Bash"})) == ["c0", "c4"]
    assert keys(older_results(found, refs, 0, ["todowrite", "Todo"])) == [f"c{i}" for i in range(6)]
    # Excluded results still count among the recent ones (the window is over all results).
    assert keys(older_results(found, refs, 1, ["Bash"])) == ["c0", "c1", "c3", "c4"]


def test_pending_calls_orphans_and_pairs_without_a_ref_are_skipped() -> None:
    messages = anthropic(
        ([("done1", "Read", {"file_path": "1"})], [("done1", "one" * 50)]),
        ([], [("orphan", "no call for this" * 20)]),
        ([("noref", "Read", {"file_path": "n"})], [("noref", "n" * 300)]),
        ([("done2", "Read", {"file_path": "2"})], [("done2", "two" * 50)]),
        ([("pending", "Bash", {"command": "sleep 99"})], []),
    )
    _, found = scanned(messages)
    assert {p.key for p in found.pairs} == {"done1", "orphan", "noref", "done2", "pending"}
    refs = refs_for(found)
    del refs["noref"]
    assert keys(older_results(found, refs, 0, ())) == ["done1", "done2"]
    # Only the pairs that can be summarized count among the recent ones.
    assert keys(older_results(found, refs, 1, ())) == ["done1"]
    # A ref for a pair that is not complete does not make it a candidate.
    refs |= {"orphan": REF, "pending": REF}
    assert keys(older_results(found, refs, 0, ())) == ["done1", "done2"]


def test_results_already_markers_are_skipped() -> None:
    messages = sequential(3)
    fmt, found = scanned(messages)
    refs = refs_for(found)
    marked = formats.replace(messages, found, {"c0": refs["c0"]})
    again = formats.scan(marked, fmt)
    assert keys(older_results(again, refs, 0, ())) == ["c1", "c2"]


def test_combined_formats_order_by_the_object_holding_both() -> None:
    def v5(i: str, state: str = "output-available") -> Message:
        part: Message = {"type": "tool-Read", "toolCallId": i, "state": state, "input": {"p": i}}
        if state == "output-available":
            part["output"] = i * 100
        return {"id": i, "role": "assistant", "parts": [part]}

    messages = [v5("a"), v5("b"), v5("c", "input-available"), v5("d")]
    fmt, found = scanned(messages)
    assert fmt.name == "ai-sdk-v5"
    assert keys(older_results(found, refs_for(found), 1, ())) == ["a", "b"]


# --- replacements -------------------------------------------------------------------------


def candidates_of(
    messages: list[Message], keep_recent: int = 0
) -> tuple[Format, Scan, list[Candidate]]:
    fmt, found = scanned(messages)
    return fmt, found, older_results(found, refs_for(found), keep_recent, ())


def test_a_result_is_replaced_by_its_placeholder_when_that_is_shorter() -> None:
    long = "line\n" * 200
    fmt, _, candidates = candidates_of(
        anthropic(
            ([("big", "Read", {"file_path": "a"})], [("big", long)]),
            ([("small", "Read", {"file_path": "b"})], [("small", "ok")]),
        )
    )
    summaries = ["Read a: 1000 bytes, 200 lines", "Read b: 2 bytes, 1 line"]
    chosen = replacements(fmt, candidates, summaries)
    assert list(chosen) == ["big"]
    assert chosen["big"] == placeholder("Read", candidates[0].ref, summaries[0])
    assert parse(chosen["big"]) == ("Read", candidates[0].ref, summaries[0])


def test_a_placeholder_as_long_as_the_result_is_not_used() -> None:
    summary = "s"
    text = placeholder("Read", REF, summary)
    size = len(dumps_json(text))
    cases = {"same": "x" * (size - 2), "longer": "x" * (size - 1), "shorter": "x" * (size - 3)}
    fmt, _, candidates = candidates_of(
        chat(*(([(k, "Read", {"path": k})], [(k, v)]) for k, v in cases.items()))
    )
    candidates = [Candidate(c.pair, REF, c.invocation) for c in candidates]
    chosen = replacements(fmt, candidates, [summary] * 3)
    assert chosen == {"longer": text}


def test_shorter_is_measured_in_json_bytes() -> None:
    summary = "s" * 10
    size = len(dumps_json(placeholder("Read", REF, summary)))
    wide = "é" * (size // 2 + 1)  # fewer characters than the placeholder, more bytes
    narrow = "\n" * (size // 2 + 1)  # each newline is two bytes as JSON
    fmt, _, candidates = candidates_of(
        chat(([("w", "Read", {}), ("n", "Read", {})], [("w", wide), ("n", narrow)]))
    )
    assert len(wide) < len(placeholder("Read", REF, summary))
    candidates = [Candidate(c.pair, REF, c.invocation) for c in candidates]
    assert set(replacements(fmt, candidates, [summary, summary])) == {"w", "n"}


def test_the_placeholder_is_compared_with_the_whole_result_json() -> None:
    blocks = [{"type": "text", "text": "t" * 40}] * 5
    fmt, _, candidates = candidates_of(anthropic(([("b", "Task", {})], [("b", blocks)])))
    summary = "Task: " + "s" * 140
    text = placeholder("Task", candidates[0].ref, summary)
    # Longer than the text the blocks carry, shorter than the blocks themselves: replaced.
    assert len(text_of(blocks)) < len(dumps_json(text)) < len(dumps_json(blocks))
    assert replacements(fmt, candidates, [summary]) == {"b": text}
    # A longer summary makes the placeholder longer than the blocks: kept.
    assert replacements(fmt, candidates, ["z" * 400]) == {}


def test_gemini_wraps_the_placeholder_in_an_output_object() -> None:
    fmt, _, candidates = candidates_of(
        gemini(
            ([("g", "get_weather", {"city": "Paris"})], [("g", {"forecast": ["sun"] * 100})]),
            ([("h", "get_weather", {"city": "Oslo"})], [("h", {"t": 1})]),
        )
    )
    assert fmt.name == "gemini"
    chosen = replacements(fmt, candidates, ["get_weather: {forecast: [100 × 'sun']}", "tiny"])
    text = placeholder("get_weather", candidates[0].ref, "get_weather: {forecast: [100 × 'sun']}")
    assert chosen == {"g": {"output": text}}
    assert fmt.text_result("x") == {"output": "x"}


@pytest.mark.parametrize(
    "name", ["openai-chat", "openai-responses", "anthropic", "ai-sdk-v4", "ai-sdk-v5"]
)
def test_other_formats_take_the_placeholder_as_a_string(name: FormatName) -> None:
    assert formats.get(name).text_result("x") == "x"


def test_replacements_needs_one_summary_per_candidate() -> None:
    fmt, _, candidates = candidates_of(sequential(2))
    with pytest.raises(ValueError, match="zip"):
        replacements(fmt, candidates, ["only one"])
    assert replacements(fmt, [], []) == {}


# --- apply --------------------------------------------------------------------------------


def put_results(messages: list[Message], found: Scan, chosen: dict[str, Any]) -> list[Message]:
    """What apply should give, made independently: a deep copy with each result member set."""
    expected = copy.deepcopy(messages)
    for pair in found.pairs:
        if pair.key in chosen and pair.result is not None and pair.result.result_key is not None:
            get_at(expected, pair.result.path)[pair.result.result_key] = chosen[pair.key]
    return expected


@pytest.mark.parametrize("build", [anthropic, chat, gemini])
def test_apply_changes_only_the_chosen_result_payloads(build: Builder) -> None:
    messages = sequential(4, build)
    before = copy.deepcopy(messages)
    fmt, found, candidates = candidates_of(messages, keep_recent=1)
    summaries = [summarize(c.invocation, 100) for c in candidates]
    chosen = replacements(fmt, candidates, summaries)
    assert list(chosen) == ["c0", "c1", "c2"]
    out = apply(messages, found, chosen)
    assert messages == before  # the input is untouched
    assert out == put_results(before, found, chosen)
    assert out != before
    again = formats.scan(out, fmt)
    for old, new in zip(found.pairs, again.pairs, strict=True):
        assert new.invocation()["args"] == old.invocation()["args"]
        if old.key in chosen:
            assert new.invocation()["result"] == chosen[old.key]
        else:
            assert new.invocation()["result"] == old.invocation()["result"]


def test_apply_keeps_the_arguments_of_a_combined_call_and_result() -> None:
    item = {"state": "result", "toolCallId": "c1", "toolName": "Read", "args": {"p": "a"}}
    messages: list[Message] = [
        {"role": "assistant", "content": "", "toolInvocations": [item | {"result": "r" * 500}]},
        {
            "role": "assistant",
            "content": "",
            "toolInvocations": [item | {"toolCallId": "c2", "result": "s"}],
        },
    ]
    before = copy.deepcopy(messages)
    fmt, found, candidates = candidates_of(messages, keep_recent=1)
    assert fmt.name == "ai-sdk-v4"
    chosen = replacements(fmt, candidates, ["Read a"])
    out = apply(messages, found, chosen)
    assert messages == before
    assert out[0]["toolInvocations"][0] == item | {
        "result": placeholder("Read", candidates[0].ref, "Read a")
    }
    assert list(out[0]["toolInvocations"][0]) == list(before[0]["toolInvocations"][0])
    assert out[1] == before[1]


def test_apply_with_nothing_chosen_or_unknown_keys_changes_nothing() -> None:
    messages = sequential(2)
    before = copy.deepcopy(messages)
    _, found = scanned(messages)
    assert apply(messages, found, {}) == before
    assert apply(messages, found, {"no-such-call": "x"}) == before
    assert messages == before


def test_apply_leaves_markers_as_they_are() -> None:
    messages = sequential(2)
    fmt, found = scanned(messages)
    refs = refs_for(found)
    marked = formats.replace(messages, found, {"c0": refs["c0"]})
    again = formats.scan(marked, fmt)
    before = copy.deepcopy(marked)
    out = apply(marked, again, {"c0": "placeholder", "c1": "placeholder"})
    assert marked == before
    assert out == put_results(before, again, {"c1": "placeholder"})


# --- real conversations -------------------------------------------------------------------


def test_summary_mode_on_every_shared_trace() -> None:
    if not TRACES.is_dir():
        need(f"the shared traces are not at {TRACES}")
    conversations = 0
    for path in sorted(TRACES.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        for n, conversation in enumerate(data.get("conversations", [data])):
            label = f"{path.name}[{n}]"
            messages = conversation["messages"]
            original = json.dumps(messages)
            fmt, found = scanned(messages)
            refs = refs_for(found)
            candidates = older_results(found, refs, 3, ["TodoWrite"])
            assert len(candidates) >= 15, label
            assert all(c.invocation["name"] != "TodoWrite" for c in candidates), label
            summaries = [summarize(c.invocation, 400) for c in candidates]
            chosen = replacements(fmt, candidates, summaries)
            assert chosen, label
            out = apply(messages, found, chosen)
            assert json.dumps(messages) == original, label
            assert len(json.dumps(out)) < len(original), label
            assert out == put_results(messages, found, chosen), label
            by_key = {c.pair.key: (c, s) for c, s in zip(candidates, summaries, strict=True)}
            for key, value in chosen.items():
                candidate, summary = by_key[key]
                assert parse(value) == (candidate.pair.name, refs[key], summary), label
            # The three newest results are untouched.
            newest = sorted(found.complete, key=lambda p: p.result.path if p.result else ())
            assert not {p.key for p in newest[-3:]} & set(chosen), label
            conversations += 1
    assert conversations >= 7


def test_responses_outputs_that_keep_their_shape_are_never_candidates() -> None:
    """Found in review: summary mode would put its placeholder (a string) in place of a
    `shell_call_output`'s array and a `computer_call_output`'s screenshot object, a request
    the provider refuses. Neither is a candidate, sent in full or as a marker; an
    `apply_patch_call_output` (a string) is, with the older results counted as before."""
    big = "x" * 5_000
    exit_0 = {"type": "exit", "exit_code": 0}
    shot = {"type": "computer_screenshot", "image_url": "data:image/png;base64," + big}
    messages: list[Message] = [
        {"role": "user", "content": "go"},
        {"type": "shell_call", "call_id": "s1", "action": {"commands": ["ls"]}},
        {
            "type": "shell_call_output",
            "call_id": "s1",
            "output": [{"stdout": big, "stderr": "", "outcome": exit_0}],
        },
        {"type": "computer_call", "call_id": "k1", "actions": [{"type": "screenshot"}]},
        {"type": "computer_call_output", "call_id": "k1", "output": shot},
        {"type": "apply_patch_call", "call_id": "p1", "operation": {"type": "delete_file"}},
        {"type": "apply_patch_call_output", "call_id": "p1", "status": "completed", "output": big},
        {"type": "function_call", "call_id": "f1", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "f1", "output": big},
    ]
    fmt, found, candidates = candidates_of(messages, keep_recent=1)
    assert keys(candidates) == ["p1"]
    assert list(replacements(fmt, candidates, ["s"])) == ["p1"]
    refs = refs_for(found)
    marked = formats.replace(messages, found, refs)
    held = {refs[p.key]: lambda p=p: p.invocation() for p in found.complete}
    again = formats.scan(marked, fmt)
    assert keys(older_results(again, refs, 1, (), held)) == ["p1"]


# --- results no text may stand in for (the rule context editing keeps too) -----------------


def _anthropic_pair(call: Message, result: Message) -> list[Message]:
    """A conversation of one call block and one result block, then a later plain call."""
    return [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "later", "name": "Read", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "later", "content": "x" * 5_000}],
        },
    ]


_BIG = "x" * 5_000
_SERVER_CALL: Message = {
    "type": "server_tool_use",
    "id": "srv",
    "name": "web_search",
    "input": {"query": "toolref"},
}


@pytest.mark.parametrize(
    ("call", "result"),
    [
        (
            _SERVER_CALL,
            {
                "type": "web_search_tool_result",
                "tool_use_id": "srv",
                "content": [
                    {
                        "type": "web_search_result",
                        "url": "https://example.com",
                        "title": "t",
                        "encrypted_content": _BIG,
                    }
                ],
            },
        ),
        (
            {**_SERVER_CALL, "name": "web_fetch", "input": {"url": "https://example.com"}},
            {
                "type": "web_fetch_tool_result",
                "tool_use_id": "srv",
                "content": {
                    "type": "web_fetch_result",
                    "url": "https://example.com",
                    "content": {
                        "type": "document",
                        "source": {"type": "text", "media_type": "text/plain", "data": _BIG},
                    },
                },
            },
        ),
        (
            {**_SERVER_CALL, "name": "code_execution", "input": {"code": "print(1)"}},
            {
                "type": "code_execution_tool_result",
                "tool_use_id": "srv",
                "content": {
                    "type": "code_execution_result",
                    "stdout": _BIG,
                    "stderr": "",
                    "return_code": 0,
                    "content": [],
                },
            },
        ),
        (
            {"type": "mcp_tool_use", "id": "srv", "name": "get", "server_name": "s", "input": {}},
            {
                "type": "mcp_tool_result",
                "tool_use_id": "srv",
                "content": [{"type": "text", "text": _BIG}],
            },
        ),
        (
            {"type": "tool_use", "id": "srv", "name": "tool_search", "input": {"q": "deploy"}},
            {
                "type": "tool_result",
                "tool_use_id": "srv",
                "content": [{"type": "tool_reference", "tool_name": "deploy" + _BIG}],
            },
        ),
        (
            {
                "type": "tool_use",
                "id": "srv",
                "name": "Read",
                "input": {"p": "a"},
                "caller": {"type": "code_execution_20250825", "tool_id": "srvtoolu_1"},
            },
            {"type": "tool_result", "tool_use_id": "srv", "content": _BIG},
        ),
    ],
    ids=["web_search", "web_fetch", "code_execution", "mcp", "tool_reference", "caller"],
)
def test_results_not_the_clients_to_replace_are_never_candidates(
    call: Message, result: Message
) -> None:
    """Found in review: summary mode wrote its placeholder (a string) into a server tool's
    result (typed content the provider checks: a request it refuses), over a `tool_result`
    holding `tool_reference` blocks (the tools it loads gone), and over the result of a call
    code made. Context editing skips them all; summary mode now does too (one rule), sent in
    full or as markers, and they still count among the recent ones."""
    messages = _anthropic_pair(call, result)
    fmt, found, candidates = candidates_of(messages, keep_recent=0)
    assert keys(candidates) == ["later"]
    assert list(replacements(fmt, candidates, ["s"])) == ["later"]
    refs = refs_for(found)
    assert set(refs) == {"srv", "later"}  # both complete: only the rule keeps "srv" out
    marked = formats.replace(messages, found, refs)
    held = {refs[p.key]: lambda p=p: p.invocation() for p in found.complete}
    again = formats.scan(marked, fmt)
    assert keys(older_results(again, refs, 0, (), held)) == ["later"]
    # still one of the recent ones: keeping one full keeps "later" full
    assert keys(older_results(found, refs, 1, ())) == []


def test_a_plain_tool_result_and_a_direct_caller_stay_candidates() -> None:
    direct = {
        "type": "tool_use",
        "id": "srv",
        "name": "Read",
        "input": {"p": "a"},
        "caller": {"type": "direct"},
    }
    messages = _anthropic_pair(
        direct,
        {"type": "tool_result", "tool_use_id": "srv", "content": [{"type": "text", "text": _BIG}]},
    )
    _, _, candidates = candidates_of(messages, keep_recent=0)
    assert keys(candidates) == ["srv", "later"]


def test_the_result_of_a_responses_call_code_made_is_never_a_candidate() -> None:
    """OpenAI's programmatic tool calling: a `function_call` whose `caller` is a program."""
    messages: list[Message] = [
        {"role": "user", "content": "go"},
        {
            "type": "function_call",
            "call_id": "p1",
            "name": "read",
            "arguments": "{}",
            "caller": {"type": "program", "caller_id": "ci_1"},
        },
        {"type": "function_call_output", "call_id": "p1", "output": _BIG},
        {"type": "function_call", "call_id": "f1", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "f1", "output": _BIG},
    ]
    _, found, candidates = candidates_of(messages, keep_recent=0)
    assert {p.key for p in found.complete} == {"p1", "f1"}
    assert keys(candidates) == ["f1"]
