"""Backend-switch handoff: read ranges, deduplication, the rendered block, digest, prepend."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolref import formats
from toolref.handoff import (
    CLOSE,
    MAX_TOOL_CONTEXT_CHARS,
    OPEN,
    PER_RESULT_CHARS,
    Handoff,
    build,
    commands,
    digest,
    prepend,
)
from toolref.handoff import dedup as dedup_module
from toolref.handoff.blocks import LineRange, ToolBlock, read_range, tool_blocks
from toolref.handoff.commands import has_side_effects, touches_files
from toolref.handoff.dedup import Coverage, Kept, deduplicate
from toolref.handoff.render import FILE_KINDS, cut, render
from toolref.kit.kinds import Kind
from toolref.wire.models import FormatName

from ..conftest import need

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"
ANTHROPIC_TRACE = TRACES / "DRMacIver_claude-reliability__transcript.anthropic.json"
STALE = " [read before a later edit of this file: may be out of date]"
Message = dict[str, Any]
REQUEST = "Please fix the failing test."


# --- conversations by hand ----------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    name: str
    args: dict[str, Any]
    result: str | None = ""  # None: the call never got a result
    error: bool = False


def anthropic(calls: list[Call], request: str = REQUEST) -> list[Message]:
    messages: list[Message] = [{"role": "user", "content": request}]
    for n, call in enumerate(calls):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Step {n}."},
                    {"type": "tool_use", "id": f"toolu_{n}", "name": call.name, "input": call.args},
                ],
            }
        )
        if call.result is not None:
            result: Message = {
                "type": "tool_result",
                "tool_use_id": f"toolu_{n}",
                "content": call.result,
            }
            if call.error:
                result["is_error"] = True
            messages.append({"role": "user", "content": [result]})
    return messages


def openai_chat(calls: list[Call], request: str = REQUEST) -> list[Message]:
    assert not any(c.error for c in calls), "openai-chat results carry no error flag"
    messages: list[Message] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": request},
    ]
    for n, call in enumerate(calls):
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{n}",
                        "type": "function",
                        "function": {"name": call.name, "arguments": json.dumps(call.args)},
                    }
                ],
            }
        )
        if call.result is not None:
            messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": call.result})
    return messages


BUILDERS: dict[str, Callable[[list[Call], str], list[Message]]] = {
    "anthropic": anthropic,
    "openai-chat": openai_chat,
}
FORMATS = sorted(BUILDERS)


# Each format's usual tools: Claude Code's for anthropic, SWE-agent/OpenHands' for openai-chat.
def read(fmt: str, path: str, result: str, lines: tuple[int, int] | None = None) -> Call:
    if fmt == "anthropic":
        args: dict[str, Any] = {"file_path": path}
        if lines is not None:
            args |= {"offset": lines[0], "limit": lines[1] - lines[0] + 1}
        return Call("Read", args, result)
    args = {"command": "view", "path": path}
    if lines is not None:
        args["view_range"] = list(lines)
    return Call("str_replace_editor", args, result)


def edit(fmt: str, path: str, result: str) -> Call:
    if fmt == "anthropic":
        return Call("Edit", {"file_path": path, "old_string": "a", "new_string": "b"}, result)
    args = {"command": "str_replace", "path": path, "old_str": "a", "new_str": "b"}
    return Call("str_replace_editor", args, result)


def write(fmt: str, path: str, result: str) -> Call:
    if fmt == "anthropic":
        return Call("Write", {"file_path": path, "content": "x = 1\n"}, result)
    args = {"command": "create", "path": path, "file_text": "x = 1\n"}
    return Call("str_replace_editor", args, result)


def shell(fmt: str, command: str, result: str | None = "") -> Call:
    return Call("Bash" if fmt == "anthropic" else "bash", {"command": command}, result)


def shown_args(fmt: str, args: dict[str, Any]) -> str:
    """Arguments as a heading shows them: openai-chat's JSON string as it is, else compact."""
    return json.dumps(args) if fmt == "openai-chat" else json.dumps(args, separators=(",", ":"))


def handoff(fmt: str, calls: list[Call], **options: Any) -> Handoff:
    return build(BUILDERS[fmt](calls, REQUEST), formats.check_format(fmt), **options)


def dedup(fmt: str, calls: list[Call]) -> tuple[list[Kept], int]:
    messages = BUILDERS[fmt](calls, REQUEST)
    return deduplicate(tool_blocks(messages, formats.get(formats.check_format(fmt))))


# --- reading the block back ---------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    section: str
    title: str
    body: str  # "" for "(empty)"
    fence: str


@dataclass(frozen=True)
class Parsed:
    entries: list[Entry]
    interrupted: list[str]
    sections: list[str]

    def section(self, name: str) -> list[Entry]:
        return [e for e in self.entries if e.section == name]

    def titles(self, name: str) -> list[str]:
        return [e.title for e in self.section(name)]


def parse(block: str) -> Parsed:
    """Sections, `### ` entries with their fenced bodies, and the interrupted list."""
    assert block.startswith(OPEN + "\n")
    assert block.endswith("\n" + CLOSE)
    lines = block.split("\n")
    entries: list[Entry] = []
    interrupted: list[str] = []
    sections: list[str] = []
    section = ""
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("## "):
            section = line[3:]
            sections.append(section)
        elif line.startswith("### "):
            opening = lines[index + 1]
            if opening == "(empty)":
                entries.append(Entry(section, line[4:], "", ""))
                index += 2
                continue
            assert re.fullmatch(r"`{3,}", opening), f"no fence after {line!r}: {opening!r}"
            end = lines.index(opening, index + 2)  # a fence is longer than any run inside
            entries.append(Entry(section, line[4:], "\n".join(lines[index + 2 : end]), opening))
            index = end + 1
            continue
        elif section == "Interrupted Tool Calls" and line.startswith("- "):
            interrupted.append(line[2:])
        index += 1
    return Parsed(entries, interrupted, sections)


def block_of(
    n: int, kind: Kind, result: str | None, name: str = "Grep", **fields: Any
) -> ToolBlock:
    args = fields.pop("args", {"pattern": f"p{n}"})
    return ToolBlock(
        order=n,
        key=f"k{n}",
        name=name,
        kind=kind,
        args=args,
        result=result,
        is_error=fields.pop("is_error", False),
        **fields,
    )


# --- read_range and covers ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # Claude Code Read: offset (first line) and limit (how many)
        ({"file_path": "a.py"}, None),
        ({"file_path": "a.py", "offset": 10, "limit": 20}, (10, 29)),
        ({"file_path": "a.py", "limit": 50}, (1, 50)),
        ({"file_path": "a.py", "offset": 100}, (100, None)),
        ({"file_path": "a.py", "offset": 0, "limit": 5}, (1, 5)),
        ('{"file_path": "a.py", "offset": 10, "limit": 20}', (10, 29)),  # a JSON string
        # str_replace_editor view_range (-1: to the end)
        ({"command": "view", "path": "a.py"}, None),
        ({"command": "view", "path": "a.py", "view_range": [5, 15]}, (5, 15)),
        ({"command": "view", "path": "a.py", "view_range": [5, -1]}, (5, None)),
        ({"command": "view", "path": "a.py", "view_range": [0, 10]}, (1, 10)),
        ('{"command": "view", "path": "a.py", "view_range": [3, 4]}', (3, 4)),
        # Cursor read_file
        (
            {
                "target_file": "a.py",
                "start_line_one_indexed": 3,
                "end_line_one_indexed_inclusive": 7,
            },
            (3, 7),
        ),
        (
            {
                "target_file": "a.py",
                "should_read_entire_file": False,
                "start_line_one_indexed": 3,
                "end_line_one_indexed_inclusive": 7,
            },
            (3, 7),
        ),
        (
            {
                "target_file": "a.py",
                "should_read_entire_file": True,
                "start_line_one_indexed": 3,
                "end_line_one_indexed_inclusive": 7,
            },
            None,
        ),
        # Other agents' names
        ({"path": "a.py", "start_line": 4, "end_line": 9}, (4, 9)),
        ({"path": "a.py", "line_start": 2}, (2, None)),
        # Nothing usable
        ("not json", None),
        (None, None),
    ],
)
def test_read_range(args: Any, expected: LineRange | None) -> None:
    assert read_range(args) == expected


def test_tool_blocks_read_ranges_through_each_format() -> None:
    claude = anthropic([Call("Read", {"file_path": "a.py", "offset": 10, "limit": 5}, "x")])
    cursor_args = {
        "target_file": "c.py",
        "start_line_one_indexed": 2,
        "end_line_one_indexed_inclusive": 8,
    }
    openai = openai_chat(
        [
            Call("str_replace_editor", {"command": "view", "path": "b.py", "view_range": [1, 3]}),
            Call("read_file", cursor_args, "x"),
            Call("str_replace_editor", {"command": "str_replace", "path": "b.py"}, "ok"),
        ]
    )
    (one,) = tool_blocks(claude, formats.get("anthropic"))
    assert (one.kind, one.path, one.lines) == (Kind.READ, "a.py", (10, 14))
    view, cursor, change = tool_blocks(openai, formats.get("openai-chat"))
    assert (view.kind, view.path, view.lines) == (Kind.READ, "b.py", (1, 3))
    assert (cursor.kind, cursor.path, cursor.lines) == (Kind.READ, "c.py", (2, 8))
    assert (change.kind, change.path, change.lines) == (Kind.EDIT, "b.py", None)


@pytest.mark.parametrize(
    ("outer", "inner", "expected"),
    [
        # A whole-file read covers everything.
        (None, None, True),
        (None, (1, 10), True),
        (None, (50, None), True),
        # Only a read from line 1 to the end covers a whole file.
        ((1, None), None, True),
        ((2, None), None, False),
        ((1, 1000), None, False),
        # Closed ranges.
        ((1, 10), (1, 10), True),
        ((1, 10), (2, 5), True),
        ((1, 10), (5, 11), False),
        ((2, 10), (1, 5), False),
        ((5, 6), (1, 100), False),
        # Open ends.
        ((1, 10), (5, None), False),
        ((1, None), (5, None), True),
        ((3, None), (5, 20), True),
        ((5, None), (3, None), False),
        ((5, None), (3, 10), False),
    ],
)
def test_covers(outer: LineRange | None, inner: LineRange | None, expected: bool) -> None:
    coverage = Coverage()
    coverage.add(outer)
    assert coverage.covers(inner) is expected


@pytest.mark.parametrize(
    ("reads", "inner", "expected"),
    [
        # Adjacent or overlapping later reads cover together what neither covers alone.
        ([(1, 10), (11, 20)], (5, 15), True),
        ([(11, 20), (1, 10)], (1, 20), True),
        ([(1, 10), (5, None)], None, True),
        ([(1, 10), (12, 20)], (5, 15), False),  # line 11 was never shown again
        ([(1, 10), (12, 20), (11, 11)], (5, 15), True),
        ([(30, 40), (1, 5), (20, 25), (6, 19)], (1, 25), True),
        ([(30, 40), (1, 5), (20, 25), (6, 18)], (1, 25), False),
    ],
)
def test_coverage_merges_the_later_reads(
    reads: list[LineRange], inner: LineRange | None, expected: bool
) -> None:
    coverage = Coverage()
    for lines in reads:
        coverage.add(lines)
    assert coverage.covers(inner) is expected
    assert all(a <= b for a, b in zip(coverage.ends, coverage.starts[1:], strict=False))


@given(
    st.lists(st.tuples(st.integers(1, 60), st.integers(0, 20), st.booleans()), max_size=12),
    st.integers(1, 70),
    st.integers(0, 20),
)
def test_coverage_is_the_union_of_the_reads(
    reads: list[tuple[int, int, bool]], first: int, length: int
) -> None:
    coverage, shown = Coverage(), set[int]()
    for start, span, open_end in reads:
        lines: LineRange = (start, None) if open_end else (start, start + span)
        coverage.add(lines)
        shown.update(range(start, 100 if open_end else start + span + 1))
    wanted = set(range(first, first + length + 1))
    assert coverage.covers((first, first + length)) is (wanted <= shown)  # wanted < 100


# --- deduplication --------------------------------------------------------------------------


def read_title(path: str, lines: tuple[int, int] | None = None) -> str:
    return f"{path} (whole file)" if lines is None else f"{path} (lines {lines[0]}-{lines[1]})"


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_later_whole_read_replaces_earlier_partial_reads(fmt: str) -> None:
    calls = [
        read(fmt, "a.py", "first ten", (1, 10)),
        read(fmt, "b.py", "other file", (1, 10)),
        read(fmt, "a.py", "twenty to thirty", (20, 30)),
        read(fmt, "a.py", "WHOLE a.py"),
    ]
    kept, dropped = dedup(fmt, calls)
    assert dropped == 2
    assert [(k.block.path, k.block.lines) for k in kept] == [("b.py", (1, 10)), ("a.py", None)]
    found = parse(handoff(fmt, calls).block)
    assert found.section("Files Read") == [
        Entry("Files Read", read_title("b.py", (1, 10)), "other file", "```"),
        Entry("Files Read", read_title("a.py"), "WHOLE a.py", "```"),
    ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_later_partial_read_keeps_an_earlier_whole_read(fmt: str) -> None:
    calls = [read(fmt, "a.py", "WHOLE"), read(fmt, "a.py", "PART", (3, 4))]
    kept, dropped = dedup(fmt, calls)
    assert dropped == 0
    assert [k.block.lines for k in kept] == [None, (3, 4)]
    found = parse(handoff(fmt, calls).block)
    assert [(e.title, e.body) for e in found.section("Files Read")] == [
        (read_title("a.py"), "WHOLE"),
        (read_title("a.py", (3, 4)), "PART"),
    ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_identical_ranges_keep_the_last_read(fmt: str) -> None:
    calls = [
        read(fmt, "a.py", "old", (1, 10)),
        read(fmt, "a.py", "new", (1, 10)),
        read(fmt, "a.py", "whole old"),
        read(fmt, "a.py", "whole new"),
    ]
    kept, dropped = dedup(fmt, calls)
    assert dropped == 3
    assert [k.block.result for k in kept] == ["whole new"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_overlapping_reads_that_do_not_cover_are_both_kept(fmt: str) -> None:
    calls = [
        read(fmt, "a.py", "one", (1, 10)),
        read(fmt, "a.py", "two", (5, 20)),
        read(fmt, "a.py", "three", (2, 8)),  # inside the first, but the first came before
    ]
    kept, dropped = dedup(fmt, calls)
    assert dropped == 0
    assert [k.block.result for k in kept] == ["one", "two", "three"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_read_followed_by_an_edit_of_that_file_is_kept_and_marked_stale(fmt: str) -> None:
    calls = [
        read(fmt, "a.py", "a before"),
        read(fmt, "b.py", "b before"),
        read(fmt, "c.py", "c before"),
        edit(fmt, "a.py", "edited a"),
        write(fmt, "c.py", "wrote c"),
        read(fmt, "a.py", "a after", (1, 5)),
    ]
    kept, dropped = dedup(fmt, calls)
    assert dropped == 0
    assert [(k.block.path, k.block.result, k.stale) for k in kept if k.block.kind is Kind.READ] == [
        ("a.py", "a before", True),
        ("b.py", "b before", False),
        ("c.py", "c before", True),
        ("a.py", "a after", False),
    ]
    found = parse(handoff(fmt, calls).block)
    assert found.titles("Files Read") == [
        read_title("a.py") + STALE,
        read_title("b.py"),
        read_title("c.py") + STALE,
        read_title("a.py", (1, 5)),
    ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_last_edit_or_write_of_a_path_wins(fmt: str) -> None:
    calls = [
        edit(fmt, "a.py", "edit one"),
        edit(fmt, "b.py", "edit b"),
        edit(fmt, "a.py", "edit two"),
        write(fmt, "a.py", "write three"),
        edit(fmt, "a.py", "edit four"),
    ]
    kept, dropped = dedup(fmt, calls)
    assert dropped == 3
    assert [(k.block.path, k.block.result) for k in kept] == [
        ("b.py", "edit b"),
        ("a.py", "edit four"),
    ]
    found = parse(handoff(fmt, calls).block)
    assert [e.body for e in found.section("Files Modified")] == ["edit b", "edit four"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_side_effect_commands_are_all_kept_in_order(fmt: str) -> None:
    calls = [
        shell(fmt, "echo x >> log.txt", "first"),
        shell(fmt, "ls", "listing"),
        shell(fmt, "echo x >> log.txt", "second"),
        shell(fmt, "git add -A && git commit -m wip", "commit 1"),
        shell(fmt, "echo x >> log.txt", "third"),
        shell(fmt, "git add -A && git commit -m wip", "commit 2"),
    ]
    kept, dropped = dedup(fmt, calls)
    assert dropped == 0
    assert [k.block.result for k in kept] == [
        "first",
        "listing",
        "second",
        "commit 1",
        "third",
        "commit 2",
    ]
    found = parse(handoff(fmt, calls).block)
    assert [(e.title, e.body) for e in found.section("Commands Run")] == [
        ("$ echo x >> log.txt", "first"),
        ("$ ls", "listing"),
        ("$ echo x >> log.txt", "second"),
        ("$ git add -A && git commit -m wip", "commit 1"),
        ("$ echo x >> log.txt", "third"),
        ("$ git add -A && git commit -m wip", "commit 2"),
    ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_pure_command_run_again_is_kept_once_with_its_last_output(fmt: str) -> None:
    calls = [
        shell(fmt, "pytest -q", "3 failed"),
        shell(fmt, "git status", "modified: a.py"),
        shell(fmt, "pytest -q", "1 failed"),
        shell(fmt, "pytest  -q", "other spacing"),  # not the same command
        shell(fmt, "pytest -q", "all passed"),
    ]
    kept, dropped = dedup(fmt, calls)
    assert dropped == 2
    assert [k.block.result for k in kept] == ["modified: a.py", "other spacing", "all passed"]
    found = parse(handoff(fmt, calls).block)
    assert [(e.title, e.body) for e in found.section("Commands Run")] == [
        ("$ git status", "modified: a.py"),
        ("$ pytest -q", "other spacing"),
        ("$ pytest -q", "all passed"),
    ]
    assert "3 failed" not in handoff(fmt, calls).block
    assert "1 failed" not in handoff(fmt, calls).block


def shell_block(n: int, command: str) -> ToolBlock:
    return block_of(n, Kind.SHELL, f"out {n}", name="Bash", command=command)


def test_only_commands_that_repeat_are_classified_once_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    def classify(command: str) -> bool:
        asked.append(command)
        return command.startswith("rm")

    monkeypatch.setattr(dedup_module, "has_side_effects", classify)
    blocks = [shell_block(n, c) for n, c in enumerate(["ls", "rm x", "ls", "rm x", "ls", "cat"])]
    kept, dropped = deduplicate(blocks)
    assert sorted(asked) == ["ls", "rm x"]  # "cat" runs once: kept without asking
    assert dropped == 2  # the first two `ls`
    assert [k.block.command for k in kept] == ["rm x", "rm x", "ls", "cat"]


def test_commands_past_the_budget_or_the_size_limit_are_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    huge = "cat a.py " + "x" * commands.MAX_COMMAND_CHARS
    assert commands.has_side_effects(huge)  # not parsed: the conservative answer
    assert not commands.has_side_effects(huge[: commands.MAX_COMMAND_CHARS])
    monkeypatch.setattr(dedup_module, "CLASSIFIED_CHARS", 10)
    blocks = [shell_block(n, c) for n, c in enumerate(["ls -la", "git log", "ls -la", "git log"])]
    kept, dropped = deduplicate(blocks)
    assert dropped == 1  # `git log` (7 chars) fit the budget; `ls -la` did not, so it is kept
    assert [k.block.command for k in kept] == ["ls -la", "ls -la", "git log"]


def test_errors_are_never_dropped_and_are_marked() -> None:
    calls = [
        Call("Read", {"file_path": "a.py"}, "File does not exist.", error=True),
        Call("Bash", {"command": "pytest -q"}, "Exit code 1\nboom", error=True),
        Call("Edit", {"file_path": "a.py", "old_string": "a", "new_string": "b"}, "no match", True),
        Call("Read", {"file_path": "a.py"}, "x = 1\n"),
        Call("Bash", {"command": "pytest -q"}, "ok"),
        Call("Read", {"file_path": "a.py"}, "Permission denied", error=True),
    ]
    kept, dropped = dedup("anthropic", calls)
    assert dropped == 0
    assert [(k.block.result, k.block.is_error, k.stale) for k in kept] == [
        ("File does not exist.", True, False),
        ("Exit code 1\nboom", True, False),
        ("no match", True, False),
        ("x = 1\n", False, False),  # the failed edit changed nothing: not stale
        ("ok", False, False),
        ("Permission denied", True, False),
    ]
    result = handoff("anthropic", calls)
    assert result.errors == 4
    found = parse(result.block)
    assert found.titles("Files Read") == [
        "a.py (whole file) [error]",
        "a.py (whole file)",
        "a.py (whole file) [error]",
    ]
    assert found.titles("Commands Run") == ["$ pytest -q (exit 1) [error]", "$ pytest -q"]
    assert found.titles("Files Modified") == ["Edit a.py [error]"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_calls_without_a_result_are_listed_as_interrupted(fmt: str) -> None:
    calls = [
        shell(fmt, "ls", "a.py"),
        shell(fmt, "ls", None),  # a repeat, but interrupted: kept, and so is the earlier run
        read(fmt, "a.py", "x"),
        replace(read(fmt, "a.py", ""), result=None),
        shell(fmt, "make build", None),
    ]
    result = handoff(fmt, calls)
    assert (result.tool_calls, result.kept, result.interrupted) == (5, 5, 3)
    found = parse(result.block)
    name = "Bash" if fmt == "anthropic" else "bash"
    viewed = read(fmt, "a.py", "")
    assert found.interrupted == [
        f"{name} {shown_args(fmt, {'command': 'ls'})}: no result (interrupted)",
        f"{viewed.name} {shown_args(fmt, viewed.args)}: no result (interrupted)",
        f"{name} {shown_args(fmt, {'command': 'make build'})}: no result (interrupted)",
    ]
    assert found.section("Commands Run") == [Entry("Commands Run", "$ ls", "a.py", "```")]
    assert found.sections[-1] == "Interrupted Tool Calls"


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_results_are_shown_as_empty(fmt: str) -> None:
    calls = [shell(fmt, "rm -f a.pyc", ""), shell(fmt, "true", "")]
    block = handoff(fmt, calls).block
    assert "### $ rm -f a.pyc\n(empty)\n" in block
    assert "### $ true\n(empty)\n" in block
    assert parse(block).interrupted == []


def test_an_anthropic_empty_block_list_result_is_shown_as_empty() -> None:
    messages = anthropic([Call("Bash", {"command": "rm -f x"}, None)])
    result = {"type": "tool_result", "tool_use_id": "toolu_0", "content": []}
    messages.append({"role": "user", "content": [result]})
    assert "### $ rm -f x\n(empty)\n" in build(messages, "anthropic").block


def test_an_anthropic_result_without_content_is_a_result() -> None:
    messages = anthropic([Call("Bash", {"command": "rm -f x"}, None)])
    messages.append(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_0"}]}
    )
    result = build(messages, "anthropic")
    assert result.interrupted == 0
    assert "### $ rm -f x\n(empty)\n" in result.block


@pytest.mark.parametrize("fmt", FORMATS)
def test_other_tools_are_all_kept(fmt: str) -> None:
    calls = [
        Call("Grep", {"pattern": "TODO"}, "a.py:1: TODO one"),
        Call("Grep", {"pattern": "TODO"}, "a.py:1: TODO two"),
        Call("WebFetch", {"url": "https://example.com"}, "page"),
        Call("WebFetch", {"url": "https://example.com"}, "page"),
        Call("Task", {"prompt": "look"}, "done"),
    ]
    kept, dropped = dedup(fmt, calls)
    assert (len(kept), dropped) == (5, 0)
    found = parse(handoff(fmt, calls).block)
    assert [e.body for e in found.section("Other Tool Results")] == [
        "a.py:1: TODO one",
        "a.py:1: TODO two",
        "page",
        "page",
        "done",
    ]
    assert found.titles("Other Tool Results")[0] == f"Grep {shown_args(fmt, {'pattern': 'TODO'})}"


def test_todo_write_renders_the_checklist() -> None:
    todos = [
        {"content": "Read the code", "status": "completed", "activeForm": "Reading"},
        {"content": "Fix the bug", "status": "in_progress", "activeForm": "Fixing"},
        {"content": "Write tests", "status": "pending", "activeForm": "Writing"},
        {"content": "Drop the old API", "status": "cancelled", "activeForm": "Dropping"},
    ]
    saved = "Todos have been modified successfully."
    result = handoff("anthropic", [Call("TodoWrite", {"todos": todos}, saved)])
    (entry,) = parse(result.block).section("Other Tool Results")
    assert entry.title == "TodoWrite (the plan at that point)"
    assert entry.body == (
        "- [x] Read the code\n- [~] Fix the bug\n- [ ] Write tests\n- [-] Drop the old API"
    )
    assert saved not in result.block


def test_the_sections_come_in_order() -> None:
    calls = [
        Call("Grep", {"pattern": "x"}, "hit"),
        Call("Bash", {"command": "ls"}, "a.py"),
        Call("Edit", {"file_path": "a.py"}, "edited"),
        Call("Read", {"file_path": "a.py"}, "x = 1"),
        Call("Bash", {"command": "sleep 100"}, None),
    ]
    found = parse(handoff("anthropic", calls).block)
    assert found.sections == [
        "Conversation summary",
        "Files Read",
        "Files Modified",
        "Commands Run",
        "Other Tool Results",
        "Interrupted Tool Calls",
    ]


def test_a_heading_is_one_line_for_pretty_printed_arguments() -> None:
    messages = openai_chat([])
    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {
                        "name": "search_flights",
                        "arguments": json.dumps({"origin": "SFO", "dest": "JFK"}, indent=2),
                    },
                }
            ],
        }
    )
    messages.append({"role": "tool", "tool_call_id": "c1", "content": "no flights"})
    block = build(messages, "openai-chat").block
    (heading,) = [line for line in block.split("\n") if line.startswith("### ")]
    assert "SFO" in heading
    assert "JFK" in heading


# --- render -------------------------------------------------------------------------------


def test_cut_keeps_head_and_tail_with_the_exact_omitted_count() -> None:
    text = "a" * 3000 + "b" * 4000 + "c" * 3000
    shown, omitted = cut(text, 600)
    assert omitted == 9400
    assert shown == "a" * 400 + "\n[... 9400 characters omitted ...]\n" + "c" * 200
    assert cut("short", 600) == ("short", 0)
    assert cut("x" * 600, 600) == ("x" * 600, 0)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_long_result_is_cut_head_and_tail_in_the_block(fmt: str) -> None:
    lines = [f"line {n:05d}" for n in range(2000)]  # 10 characters + newline each
    text = "\n".join(lines)
    result = handoff(fmt, [shell(fmt, "cat big.log", text)], per_result_chars=900)
    (entry,) = parse(result.block).section("Commands Run")
    omitted = len(text) - 900
    assert entry.body == text[:600] + f"\n[... {omitted} characters omitted ...]\n" + text[-300:]
    assert entry.body.startswith("line 00000\nline 00001")
    assert entry.body.endswith("line 01998\nline 01999")
    assert result.chars_omitted == omitted


def test_fences_are_longer_than_any_backtick_run_in_a_result() -> None:
    text = "before\n```python\nprint(1)\n```\nfive: `````\n``\nafter ``````"
    result = handoff("anthropic", [Call("Read", {"file_path": "README.md"}, text)])
    (entry,) = parse(result.block).section("Files Read")
    assert entry.fence == "`" * 7
    assert entry.body == text
    plain = parse(handoff("anthropic", [Call("Read", {"file_path": "a"}, "x ``")]).block)
    assert plain.section("Files Read")[0].fence == "```"


def test_over_budget_the_most_recent_results_are_kept_and_the_oldest_left_out() -> None:
    calls = [
        Call("Bash", {"command": f"run {n:02d}"}, f"OUT-{n:02d}\n" + "x" * 3000) for n in range(30)
    ]
    result = handoff("anthropic", calls, max_tool_context_chars=12_000, summarize_text=False)
    assert len(result.block) <= 12_000
    found = parse(result.block)
    shown = [int(e.title.removeprefix("$ run ")) for e in found.section("Commands Run")]
    assert 0 < len(shown) < 30
    assert shown == list(range(30 - len(shown), 30))  # the newest, in order
    assert found.section("Commands Run")[-1].body == calls[-1].result  # uncut
    assert result.left_out == 30 - len(shown)
    assert result.kept == len(shown)
    note = f"({result.left_out} older tool result(s) left out to fit the size limit.)"
    assert note in result.block
    assert "OUT-00" not in result.block
    assert "OUT-29" in result.block


def test_over_budget_files_read_or_edited_come_before_command_output() -> None:
    """A file read long before the end outlives the command output after it (strict
    recency used to drop it for `--help` output)."""
    calls = [
        Call("Read", {"file_path": "/src/app.py"}, "APP-SOURCE\n" + "a" * 3000),
        Call("Edit", {"file_path": "/src/util.py", "old_string": "x", "new_string": "y"}, "ok"),
        *(
            Call("Bash", {"command": f"tool{n} --help"}, f"HELP-{n:02d}\n" + "h" * 3000)
            for n in range(20)
        ),
    ]
    result = handoff("anthropic", calls, max_tool_context_chars=12_000, summarize_text=False)
    found = parse(result.block)
    assert [e.body.split("\n")[0] for e in found.section("Files Read")] == ["APP-SOURCE"]
    assert len(found.section("Files Modified")) == 1
    shown = [e.title for e in found.section("Commands Run")]
    assert 0 < len(shown) < 20
    assert shown[-1] == "$ tool19 --help"  # the newest commands fill what is left
    assert result.left_out == 20 - len(shown)


def test_no_note_when_nothing_is_left_out() -> None:
    result = handoff("anthropic", [Call("Bash", {"command": "ls"}, "a")])
    assert result.left_out == 0
    assert "left out to fit" not in result.block


def test_only_results_older_than_every_kept_one_are_left_out() -> None:
    command = "echo " + "y" * 400
    kept = [
        Kept(block_of(0, Kind.SEARCH, "ok")),
        Kept(block_of(1, Kind.SHELL, "z" * 5000, name="Bash", command=command)),
    ]
    for budget in range(1000, 1400, 20):
        rendered = render(kept, None, budget, 4000)
        assert len(rendered.text) <= budget
        newest, oldest = "zzzz" in rendered.text, "\nok\n" in rendered.text
        # Never the older one without the newer one.
        assert newest or not oldest, budget
        assert rendered.left_out == 2 - newest - oldest


def test_interrupted_calls_also_fit_the_budget() -> None:
    kept = [Kept(block_of(n, Kind.SEARCH, None, args={"pattern": "x" * 300})) for n in range(20)]
    rendered = render(kept, None, 1000, 4000)
    assert rendered.text.startswith(OPEN)
    assert rendered.text.endswith(CLOSE)
    assert len(rendered.text) <= 1000


KINDS = [
    ("Read", Kind.READ),
    ("Edit", Kind.EDIT),
    ("Bash", Kind.SHELL),
    ("Grep", Kind.SEARCH),
    ("TodoWrite", Kind.TODO),
]


@settings(max_examples=150, deadline=None)
@given(
    results=st.lists(
        st.tuples(
            st.sampled_from(KINDS),
            st.integers(min_value=0, max_value=12_000),
            st.booleans(),
            st.integers(min_value=0, max_value=400),
        ),
        max_size=40,
    ),
    max_chars=st.integers(min_value=1000, max_value=20_000),
    per_result=st.integers(min_value=200, max_value=6000),
    summary_size=st.integers(min_value=0, max_value=8000),
)
def test_the_block_always_fits(
    results: list[tuple[tuple[str, Kind], int, bool, int]],
    max_chars: int,
    per_result: int,
    summary_size: int,
) -> None:
    kept = []
    for n, ((name, kind), size, error, title_size) in enumerate(results):
        text = f"R{n}:" + "`" * (n % 5) + "x" * size
        fields: dict[str, Any] = {"is_error": error}
        if kind is Kind.SHELL:
            fields["command"] = f"cmd {n} " + "c" * title_size
        elif kind in (Kind.READ, Kind.EDIT):
            fields["path"] = f"src/{n}/" + "p" * title_size
        kept.append(Kept(block_of(n, kind, text, name=name, **fields), stale=n % 3 == 0))
    summary = "s" * summary_size or None
    rendered = render(kept, summary, max_chars, per_result)
    text = rendered.text
    assert len(text) <= max_chars
    found = parse(text)
    assert rendered.kept + rendered.left_out == len(results)
    assert len(found.entries) == rendered.kept
    assert sum(rendered.sections.values()) == rendered.kept
    note = f"({rendered.left_out} older tool result(s) left out to fit the size limit.)"
    assert (note in text) is (rendered.left_out > 0)
    if results and max_chars >= 3000:
        # The newest of the first class present (files before everything else) is kept.
        files = [n for n, ((_, kind), *_) in enumerate(results) if kind in FILE_KINDS]
        newest = files[-1] if files else len(results) - 1
        assert any(e.body.startswith(f"R{newest}:") for e in found.entries)


# --- digest -------------------------------------------------------------------------------


def dialogue(fmt: str) -> list[Message]:
    calls = [Call("Bash", {"command": "cat notes"}, "TOOLRESULT-SECRET") for _ in range(2)]
    messages = BUILDERS[fmt](calls, "Please fix the login bug.")
    for n in range(5):
        messages.append({"role": "assistant", "content": f"Conclusion {n}: checked part {n}."})
        if n == 2:
            messages.append({"role": "user", "content": "Also update the changelog."})
    return messages


@pytest.mark.parametrize("fmt", FORMATS)
def test_digest_has_the_requests_and_the_last_three_conclusions(fmt: str) -> None:
    text = digest(dialogue(fmt), 3000)
    assert text.startswith("User requests:\n- Please fix the login bug.\n")
    assert "- Also update the changelog." in text
    assert "Assistant's latest conclusions:" in text
    for n in (2, 3, 4):
        assert f"Conclusion {n}: checked part {n}." in text
    for n in (0, 1):
        assert f"Conclusion {n}" not in text
    assert "TOOLRESULT" not in text
    assert "Step 0." not in text  # anthropic: only the last three assistant texts
    assert "coding agent" not in text  # no system text
    assert len(text) <= 3000


def test_digest_reads_responses_and_gemini_text() -> None:
    responses = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Do A."}]},
        {"type": "function_call", "call_id": "c", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "TOOLRESULT"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Did A."}]},
    ]
    gemini = [
        {"role": "user", "parts": [{"text": "Do B."}]},
        {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"x": 1}}}]},
        {"role": "model", "parts": [{"text": "Did B."}]},
    ]
    assert digest(responses) == "User requests:\n- Do A.\nAssistant's latest conclusions:\n- Did A."
    assert digest(gemini) == "User requests:\n- Do B.\nAssistant's latest conclusions:\n- Did B."


def test_digest_keeps_within_budget_and_counts_what_it_leaves_out() -> None:
    messages: list[Message] = []
    for n in range(40):
        messages.append({"role": "user", "content": f"Request {n} " + "r" * 300})
        messages.append({"role": "assistant", "content": f"Answer {n} " + "a" * 300})
    text = digest(messages, 1000)
    assert len(text) <= 1000
    assert "more requests)" in text
    shown = len(re.findall(r"^- Request \d+", text, flags=re.MULTILINE))
    assert f"- ({40 - shown} more requests)" in text
    assert "Answer 39" in text
    assert "Answer 36" not in text


@settings(max_examples=100, deadline=None)
@given(
    texts=st.lists(st.tuples(st.booleans(), st.text(max_size=600)), max_size=30),
    max_chars=st.integers(min_value=200, max_value=3000),
)
def test_digest_never_exceeds_its_budget(texts: list[tuple[bool, str]], max_chars: int) -> None:
    messages = [{"role": "user" if u else "assistant", "content": t} for u, t in texts]
    assert len(digest(messages, max_chars)) <= max_chars


# --- prepend ------------------------------------------------------------------------------

BLOCK = f"{OPEN}\nfacts\n{CLOSE}"


@pytest.mark.parametrize(
    ("fmt", "messages", "index", "expected"),
    [
        (
            "anthropic",
            [{"role": "user", "content": "hi"}],
            0,
            {"role": "user", "content": f"{BLOCK}\n\nhi"},
        ),
        (
            "anthropic",
            [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            0,
            {
                "role": "user",
                "content": [{"type": "text", "text": BLOCK}, {"type": "text", "text": "hi"}],
            },
        ),
        (
            "openai-chat",
            [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}],
            1,
            {"role": "user", "content": f"{BLOCK}\n\nhi"},
        ),
        (
            "openai-chat",
            [
                {"role": "system", "content": "sys"},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "hi"},
                        {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
                    ],
                },
            ],
            1,
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": BLOCK},
                    {"type": "text", "text": "hi"},
                    {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
                ],
            },
        ),
        (
            "openai-responses",
            [{"role": "developer", "content": "dev"}, {"role": "user", "content": "hi"}],
            1,
            {"role": "user", "content": f"{BLOCK}\n\nhi"},
        ),
        (
            "openai-responses",
            [
                {"type": "function_call_output", "call_id": "c1", "output": "x"},
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "hi"}],
                },
            ],
            1,
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": BLOCK},
                    {"type": "input_text", "text": "hi"},
                ],
            },
        ),
        (
            "gemini",
            [
                {"role": "model", "parts": [{"text": "hello"}]},
                {"role": "user", "parts": [{"text": "hi"}]},
            ],
            1,
            {"role": "user", "parts": [{"text": BLOCK}, {"text": "hi"}]},
        ),
    ],
)
def test_prepend_puts_the_block_before_the_first_user_text(
    fmt: FormatName, messages: list[Message], index: int, expected: Message
) -> None:
    before = copy.deepcopy(messages)
    out = prepend(messages, BLOCK, fmt)
    assert messages == before  # not mutated
    assert out[index] == expected
    assert out[:index] == before[:index]
    assert out[index + 1 :] == before[index + 1 :]
    assert len(out) == len(before)
    assert formats.detect(out, fmt).name == fmt


@pytest.mark.parametrize(
    ("fmt", "message", "expected"),
    [
        (
            "anthropic",
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                    {"type": "text", "text": "go on"},
                ],
            },
            [
                {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                {"type": "text", "text": BLOCK},
                {"type": "text", "text": "go on"},
            ],
        ),
        (
            "gemini",
            {
                "role": "user",
                "parts": [{"functionResponse": {"name": "read", "response": {"r": 1}}}],
            },
            [
                {"functionResponse": {"name": "read", "response": {"r": 1}}},
                {"text": BLOCK},
            ],
        ),
    ],
)
def test_prepend_leaves_leading_tool_results_first(
    fmt: FormatName, message: Message, expected: list[Any]
) -> None:
    """Found in review: the block went in front of the tool results that lead the first
    user message; Anthropic wants them first after the calls they answer."""
    call: Message = (
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {}}],
        }
        if fmt == "anthropic"
        else {"role": "model", "parts": [{"functionCall": {"name": "read", "args": {}}}]}
    )
    out = prepend([call, message], BLOCK, fmt)
    key = "content" if fmt == "anthropic" else "parts"
    assert out[1][key] == expected
    assert out[0] == call


def test_prepend_only_touches_the_first_user_message() -> None:
    messages = [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]
    out = prepend(messages, BLOCK, "openai-chat")
    assert out == [
        {"role": "user", "content": f"{BLOCK}\n\none"},
        {"role": "user", "content": "two"},
    ]


@pytest.mark.parametrize(
    ("fmt", "messages"),
    [
        ("anthropic", [{"role": "assistant", "content": "hello"}]),
        ("openai-chat", [{"role": "system", "content": "sys"}]),
        ("openai-chat", []),
        ("openai-responses", [{"type": "function_call_output", "call_id": "c", "output": "x"}]),
    ],
)
def test_prepend_without_a_user_message_adds_one_first(
    fmt: FormatName, messages: list[Message]
) -> None:
    before = copy.deepcopy(messages)
    out = prepend(messages, BLOCK, fmt)
    assert messages == before
    assert out == [{"role": "user", "content": BLOCK}, *before]


def test_prepend_without_a_user_message_keeps_gemini_shape() -> None:
    messages = [{"role": "model", "parts": [{"text": "hello"}]}]
    out = prepend(messages, BLOCK, "gemini")
    assert out[0] == {"role": "user", "parts": [{"text": BLOCK}]}
    assert formats.detect(out, "gemini").name == "gemini"


# --- build --------------------------------------------------------------------------------


def test_build_stats_add_up() -> None:
    calls = [
        Call("Read", {"file_path": "a.py"}, "old a" + "a" * 3000),
        Call("Read", {"file_path": "a.py"}, "new a" + "a" * 3000),  # drops the first
        Call("Bash", {"command": "pytest"}, "fail" + "f" * 6000),
        Call("Bash", {"command": "pytest"}, "pass" + "p" * 6000),  # drops the one before
        Call("Bash", {"command": "pytest"}, "Exit code 2", error=True),
        Call("Grep", {"pattern": "x"}, "g" * 3000),
        Call("Bash", {"command": "make"}, None),
    ]
    result = build(anthropic(calls), "anthropic", max_tool_context_chars=5000)
    assert len(result.block) <= 5000
    assert (result.tool_calls, result.dropped_duplicates) == (7, 2)
    assert (result.interrupted, result.errors) == (1, 1)
    assert result.left_out > 0
    assert result.chars_omitted > 0
    assert result.tool_calls == result.kept + result.dropped_duplicates + result.left_out
    assert result.stats() == {
        "toolCalls": result.tool_calls,
        "kept": result.kept,
        "droppedDuplicates": result.dropped_duplicates,
        "leftOut": result.left_out,
        "charsOmitted": result.chars_omitted,
        "interrupted": result.interrupted,
        "errors": result.errors,
    }
    roomy = build(anthropic(calls), "anthropic")
    assert (roomy.kept, roomy.dropped_duplicates, roomy.left_out) == (5, 2, 0)
    assert roomy.chars_omitted == 6004 - PER_RESULT_CHARS


def test_build_detects_the_format_and_takes_a_summary() -> None:
    messages = anthropic([Call("Bash", {"command": "ls"}, "a.py")], "Tidy the repo.")
    detected = build(messages)
    assert detected.block == build(messages, "anthropic").block
    assert "## Conversation summary\nUser requests:\n- Tidy the repo." in detected.block
    custom = build(messages, summary="The LLM's own summary.").block
    assert "## Conversation summary\nThe LLM's own summary.\n" in custom
    assert "Tidy the repo." not in custom
    bare = build(messages, summarize_text=False).block
    assert "## Conversation summary" not in bare
    assert parse(bare).sections == ["Commands Run"]


@pytest.mark.parametrize(
    ("max_chars", "per_result"),
    [(999, PER_RESULT_CHARS), (MAX_TOOL_CONTEXT_CHARS, 199), (0, 0), (-1, 4000)],
)
def test_build_refuses_tiny_limits(max_chars: int, per_result: int) -> None:
    with pytest.raises(ValueError, match="max_tool_context_chars must be >= 1000"):
        build(
            anthropic([]),
            "anthropic",
            max_tool_context_chars=max_chars,
            per_result_chars=per_result,
        )


def test_build_accepts_the_smallest_limits() -> None:
    result = build(
        anthropic([Call("Bash", {"command": "ls"}, "x" * 5000)]),
        "anthropic",
        max_tool_context_chars=1000,
        per_result_chars=200,
    )
    assert len(result.block) <= 1000
    assert result.tool_calls == result.kept + result.left_out


# --- the shared traces --------------------------------------------------------------------


def load(path: Path) -> list[list[Message]]:
    if not TRACES.is_dir():
        need(f"the shared traces are not at {TRACES}")
    data = json.loads(path.read_text(encoding="utf-8"))
    return [c["messages"] for c in data.get("conversations", [data])]


def flat(command: str) -> str:
    return " ".join(command.split())


def is_title_of(title: str, command: str) -> bool:
    shown = flat(command)
    if len(shown) > 300:  # the heading is cut to 300 characters
        return title.startswith(f"$ {shown[:299]}…")
    return title == f"$ {shown}" or title.startswith(f"$ {shown} (exit ")


def test_anthropic_trace_carries_last_reads_and_every_side_effect() -> None:
    (messages,) = load(ANTHROPIC_TRACE)
    blocks = tool_blocks(messages, formats.get("anthropic"))
    result = build(messages, "anthropic")
    block = result.block
    assert len(block) <= MAX_TOOL_CONTEXT_CHARS
    assert result.tool_calls == result.kept + result.dropped_duplicates + result.left_out
    found = parse(block)

    last_reads: dict[str, ToolBlock] = {}
    for b in blocks:
        if b.name == "Read" and b.path is not None and b.result is not None and not b.is_error:
            last_reads[b.path] = b
    assert len(last_reads) >= 3
    read_entries = found.section("Files Read")
    for path, b in last_reads.items():
        expected = cut(b.result or "", PER_RESULT_CHARS)[0]
        assert expected in block, path
        bodies = [e.body for e in read_entries if e.title.startswith(f"{path} (")]
        assert bodies[-1] == expected, path

    headings = [e.title.removesuffix(STALE).removesuffix(" [error]") for e in read_entries]
    assert len(headings) == len(set(headings)), headings

    effects = [b.command for b in blocks if b.command and has_side_effects(b.command)]
    assert len(effects) >= 4
    titles = found.titles("Commands Run")
    for command in effects:
        assert any(is_title_of(t, command) for t in titles), command
    assert sum(t == "$ git status" for t in titles) == 1  # run twice, pure


def openai_chat_traces() -> list[tuple[str, list[Message]]]:
    if not TRACES.is_dir():
        need(f"the shared traces are not at {TRACES}")
    return [
        (f"{path.name}[{n}]", messages)
        for path in sorted(TRACES.glob("*.openai-chat.json"))
        for n, messages in enumerate(load(path))
    ]


def test_openai_chat_traces_keep_one_run_of_each_repeated_pure_command() -> None:
    repeated_total = 0
    for label, messages in openai_chat_traces():
        blocks = tool_blocks(messages, formats.get("openai-chat"))
        runs: dict[str, list[ToolBlock]] = {}
        for b in blocks:
            if b.command and b.result is not None and not has_side_effects(b.command):
                runs.setdefault(b.command, []).append(b)
        repeated = {c: r for c, r in runs.items() if len(r) > 1}
        repeated_total += len(repeated)
        # A budget large enough that nothing is left out: every command is there, once.
        roomy = build(messages, "openai-chat", max_tool_context_chars=10_000_000)
        assert roomy.left_out == 0, label
        commands = parse(roomy.block).section("Commands Run")
        for command, done in repeated.items():
            matching = [e for e in commands if is_title_of(e.title, command)]
            assert len(matching) == 1, (label, command)
            assert matching[0].body == cut(done[-1].result or "", PER_RESULT_CHARS)[0]
        # The default budget may leave the oldest out, but never shows a command twice.
        default = build(messages, "openai-chat")
        assert len(default.block) <= MAX_TOOL_CONTEXT_CHARS, label
        titles = parse(default.block).titles("Commands Run")
        for command in repeated:
            assert sum(is_title_of(t, command) for t in titles) <= 1, (label, command)
    assert repeated_total >= 10


@pytest.mark.parametrize(
    ("line", "touches"),
    [
        ("cat src/app.py", True),
        ("cd /testbed && sed -n '444,550p' django/db/models/fields/related.py", True),
        ("head -n 20 README.md", True),
        ("cat > /tmp/fix.py << 'EOF'\nprint(1)\nEOF", True),
        ("sed -i 's/a/b/' f.py", True),
        ("git diff > patch.txt", True),
        ("cp a b", True),
        ("tool --help", False),
        ("grep -rn needle src", False),
        ("python -m pytest -q", False),
        ("ls -la", False),
        ("sed 's/a/b/'", False),
        ("cat", False),
        ("echo hi > /dev/null", False),
    ],
)
def test_shell_commands_that_read_or_write_files(line: str, touches: bool) -> None:
    assert touches_files(line) is touches


def test_shell_file_reads_come_before_other_command_output() -> None:
    calls = [
        Call("bash", {"command": "sed -n '1,200p' src/app.py"}, "APP-SOURCE\n" + "a" * 3000),
        *(
            Call("bash", {"command": f"tool{n} --help"}, f"HELP-{n:02d}\n" + "h" * 3000)
            for n in range(20)
        ),
    ]
    result = handoff("openai-chat", calls, max_tool_context_chars=12_000, summarize_text=False)
    titles = [e.title for e in parse(result.block).section("Commands Run")]
    assert "$ sed -n '1,200p' src/app.py" in titles[0]
    assert titles[-1] == "$ tool19 --help"


_PNG = "iVBORw0KGgo" + "A" * 6000


@pytest.mark.parametrize(
    ("fmt", "messages"),
    [
        (
            "anthropic",
            [
                {"role": "user", "content": "look"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "s1", "name": "screenshot", "input": {}}
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "s1",
                            "content": [
                                {"type": "text", "text": "SHOT-CAPTION"},
                                {
                                    "type": "image",
                                    "source": {
                                        "type": "base64",
                                        "media_type": "image/png",
                                        "data": _PNG,
                                    },
                                },
                            ],
                        }
                    ],
                },
            ],
        ),
        (
            "openai-responses",
            [
                {"role": "user", "content": "look"},
                {"type": "function_call", "call_id": "s1", "name": "screenshot", "arguments": "{}"},
                {
                    "type": "function_call_output",
                    "call_id": "s1",
                    "output": [
                        {"type": "input_text", "text": "SHOT-CAPTION"},
                        {"type": "input_image", "image_url": f"data:image/png;base64,{_PNG}"},
                    ],
                },
            ],
        ),
    ],
)
def test_an_image_in_a_tool_result_is_named_not_carried_as_base64(
    fmt: FormatName, messages: list[Any]
) -> None:
    """An image result came into the block as its JSON: thousands of characters of base64,
    cut in the middle, which no model reads as an image, spending the block's budget."""
    out = build(messages, fmt, summarize_text=False)
    assert "SHOT-CAPTION" in out.block
    assert "AAAAAAAAAA" not in out.block
    assert "[image/png image: not carried in this block]" in out.block
    assert out.chars_omitted == 0


def test_a_listing_of_entries_typed_file_stays_as_it_is() -> None:
    """Only blocks that hold media bytes are named: a directory entry is a tool's answer."""
    messages = [
        {"role": "user", "content": "list"},
        {"type": "function_call", "call_id": "l1", "name": "ls", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "l1",
            "output": [{"type": "file", "name": "app.py"}, {"type": "input_text", "text": "1"}],
        },
    ]
    out = build(messages, "openai-responses", summarize_text=False)
    assert '{"type":"file","name":"app.py"}' in out.block
    assert "not carried" not in out.block


@pytest.mark.parametrize(
    "response",
    [
        {"stdout": "cc main.c", "stderr": "main.c:3: error: expected ';'", "exit_code": 2},
        {"output": "cc main.c", "error": "main.c:3: error: expected ';'"},
        {"content": "cc main.c", "truncated": "main.c:3: error: expected ';'"},
    ],
)
def test_a_result_object_is_carried_whole_not_only_its_text_member(
    response: dict[str, Any],
) -> None:
    """A result object holding its text beside other members (a Gemini `functionResponse`
    of `stdout`, `stderr` and `exit_code`) came into the block as its `stdout` alone: the
    compiler's error and the exit status were lost from a block that says it is verbatim."""
    messages = [
        {"role": "user", "parts": [{"text": "build it"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "sh", "args": {"cmd": "make"}}}]},
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "sh", "response": response}}],
        },
    ]
    out = build(messages, "gemini", summarize_text=False)
    assert "cc main.c" in out.block
    assert "main.c:3: error: expected ';'" in out.block
    assert json.dumps(response, ensure_ascii=False, separators=(",", ":")) in out.block


def test_a_result_object_of_its_text_alone_is_carried_as_that_text() -> None:
    """`{"output": "..."}` (and a text block's `type`) still give the text itself, its
    lines as lines."""
    messages = [
        {"role": "user", "parts": [{"text": "read it"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "sh", "args": {"cmd": "ls"}}}]},
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "sh", "response": {"output": "a\nb"}}}],
        },
    ]
    out = build(messages, "gemini", summarize_text=False)
    assert "```\na\nb\n```" in out.block
