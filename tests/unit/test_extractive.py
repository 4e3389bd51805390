"""Reading tool payloads (`toolref.kit.payload`) and the extractive summarizer built on it."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolref import formats
from toolref.kit.extractive import NAME, VERSION, summarize
from toolref.kit.kinds import BUILTIN, DEFAULT_KINDS, EDITOR_TOOLS, Kind, KindTable
from toolref.kit.payload import (
    COMMAND_KEYS,
    PATH_KEYS,
    PATTERN_KEYS,
    URL_KEYS,
    arguments,
    command_of,
    exit_status,
    is_text_blocks,
    path_of,
    pattern_of,
    text_of,
    url_of,
)

from ..conftest import need

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"
ELLIPSIS = "…"


def trace_invocations() -> list[tuple[str, dict[str, Any]]]:
    """(label, invocation) for every complete invocation of every shared trace."""
    if not TRACES.is_dir():
        need(f"the shared traces are not at {TRACES}")
    found = []
    for path in sorted(TRACES.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        for n, conversation in enumerate(data.get("conversations", [data])):
            messages = conversation["messages"]
            fmt = formats.detect(messages)
            for pair in formats.scan(messages, fmt).complete:
                found.append((f"{path.name}[{n}] {pair.key}", pair.invocation()))
    return found


def lines(n: int, prefix: str = "line") -> str:
    return "".join(f"{prefix} {i}\n" for i in range(1, n + 1))


# --- payload: arguments -------------------------------------------------------------------


def test_arguments_of_an_object_is_a_copy() -> None:
    args = {"path": "a.py", "nested": {"x": 1}}
    found = arguments(args)
    assert found == args
    found["path"] = "b.py"
    assert args["path"] == "a.py"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ('{"path": "a.py"}', {"path": "a.py"}),
        ('  {"command": "ls",\n "timeout": 5}  ', {"command": "ls", "timeout": 5}),
        ("{}", {}),
        ("{", {}),
        ('{"path": "a.py"', {}),
        ("not json at all", {}),
        ("", {}),
        ("[1, 2]", {}),
        ('"a.py"', {}),
        ("3", {}),
        ("null", {}),
        ("true", {}),
        (None, {}),
        (3, {}),
        (["path", "a.py"], {}),
        (b'{"path": "a.py"}', {}),
    ],
)
def test_arguments_parses_json_object_strings_and_nothing_else(args: Any, expected: Any) -> None:
    assert arguments(args) == expected


# --- payload: paths, commands, URLs, patterns -------------------------------------------------

Finder = Callable[[Any], str | None]
FINDERS: list[tuple[Finder, tuple[str, ...]]] = [
    (path_of, PATH_KEYS),
    (command_of, COMMAND_KEYS),
    (url_of, URL_KEYS),
    (pattern_of, PATTERN_KEYS),
]


@pytest.mark.parametrize(("finder", "keys"), FINDERS)
def test_each_alternative_key_is_found_as_object_or_json_string(
    finder: Finder, keys: tuple[str, ...]
) -> None:
    for key in keys:
        args = {"other": "x", key: f"value of {key}"}
        assert finder(args) == f"value of {key}", key
        assert finder(json.dumps(args)) == f"value of {key}", key


@pytest.mark.parametrize(("finder", "keys"), FINDERS)
def test_the_first_key_in_order_wins(finder: Finder, keys: tuple[str, ...]) -> None:
    args: dict[str, Any] = {key: f"value of {key}" for key in reversed(keys)}
    assert finder(args) == f"value of {keys[0]}"
    # Empty strings and non-strings are passed over.
    args[keys[0]] = ""
    assert finder(args) == f"value of {keys[1]}"
    args[keys[1]] = 7
    assert finder(args) == f"value of {keys[2]}"


@pytest.mark.parametrize(("finder", "keys"), FINDERS)
@pytest.mark.parametrize(
    "args",
    [None, {}, "", "not json", "[1]", {"unrelated": "x"}, 5],
)
def test_nothing_is_found_where_nothing_is(
    finder: Finder, keys: tuple[str, ...], args: Any
) -> None:
    assert finder(args) is None


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"command": ["bash", "-lc", "ls -la"]}, "bash -lc ls -la"),  # codex local_shell
        ({"command": []}, None),
        ({"command": ["ls", 1]}, None),
        ({"command": {"line": "ls"}}, None),
        ({"command": None, "cmd": "make test"}, "make test"),
        ({"code": "print(1)"}, "print(1)"),  # execute_ipython_cell
        ({"script": "echo hi"}, "echo hi"),
    ],
)
def test_command_of_joins_argument_lists(args: Any, expected: str | None) -> None:
    assert command_of(args) == expected


def test_real_argument_shapes() -> None:
    # Claude Code
    assert path_of({"file_path": "/tmp/x/Cargo.toml"}) == "/tmp/x/Cargo.toml"
    assert path_of({"notebook_path": "a.ipynb", "new_source": "x"}) == "a.ipynb"
    assert pattern_of({"pattern": "**/*.py"}) == "**/*.py"
    assert url_of({"url": "https://example.com", "prompt": "summarize"}) == "https://example.com"
    # Cursor
    assert path_of({"target_file": "src/a.ts", "instructions": "x"}) == "src/a.ts"
    assert pattern_of({"query": "where is auth", "target_directories": []}) == "where is auth"
    assert pattern_of({"search_term": "latest"}) == "latest"
    # OpenHands (a JSON string)
    args = '{"command": "view", "path": "/workspace/a.c", "view_range": [1, 5]}'
    assert path_of(args) == "/workspace/a.c"
    assert command_of(args) == "view"


# --- payload: text_of ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ("plain\ntext", "plain\ntext"),
        ("", ""),
        (None, ""),
        # Anthropic text blocks, and the text-like blocks of other APIs
        ([{"type": "text", "text": "one"}, {"type": "text", "text": "two"}], "one\ntwo"),
        ([{"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}], "a"),
        ([{"type": "input_text", "text": "in"}, {"type": "output_text", "text": "out"}], "in\nout"),
        (["s1", {"type": "text", "text": "s2"}], "s1\ns2"),
        ({"type": "text", "text": "one block"}, "one block"),
        ({"text": "no type"}, "no type"),
        # Wrappers
        ({"content": "wrapped"}, "wrapped"),
        ({"output": "out", "metadata": {"exit_code": 0}}, "out"),
        ({"stdout": "so", "stderr": "", "exit_code": 0}, "so"),
        ({"result": "r"}, "r"),
        ({"content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}, "x\ny"),
        ({"output": {"nested": 1}}, '{"output":{"nested":1}}'),
        # Anything else: compact JSON, non-ASCII kept
        ([], ""),  # an empty content list is an empty result
        ([1, "two"], '[1,"two"]'),
        ({"a": 1, "b": [True, None]}, '{"a":1,"b":[true,null]}'),
        ({"content": "x", "a": 1, "b": 2, "c": 3}, '{"content":"x","a":1,"b":2,"c":3}'),
        ({"é": "ü"}, '{"é":"ü"}'),
        (3, "3"),
        (2.5, "2.5"),
        (True, "true"),
    ],
)
def test_text_of(result: Any, expected: str) -> None:
    assert text_of(result) == expected


def test_text_of_renders_a_mixed_block_list_as_json() -> None:
    mixed = [
        {"type": "text", "text": "look:"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}},
    ]
    assert not is_text_blocks(mixed)
    assert text_of(mixed) == json.dumps(mixed, separators=(",", ":"))
    assert json.loads(text_of(mixed)) == mixed


def test_text_of_a_responses_output_text_block_with_annotations_and_logprobs() -> None:
    block = {"type": "output_text", "text": "hello", "annotations": [], "logprobs": []}
    assert is_text_blocks([block])
    assert text_of([block]) == "hello"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([{"type": "text", "text": "a"}], True),
        (["a", "b"], True),
        ([{"type": "input_text", "text": "a"}, "b"], True),
        ([], False),
        ([{"type": "image"}], False),
        ([{"text": "untyped"}], False),
        ([1], False),
        ("text", False),
        ({"type": "text", "text": "a"}, False),
        (None, False),
    ],
)
def test_is_text_blocks(value: Any, expected: bool) -> None:
    assert is_text_blocks(value) is expected


# --- payload: exit_status -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ("<returncode>1</returncode>\n<output>\nboom\n</output>", 1),  # mini-swe-agent
        ("<returncode>0</returncode>\n<output>\n</output>", 0),
        ("<returncode> -9 </returncode>", -9),
        ("exit code: 2", 2),
        ("Exit status 127", 127),
        ("[The command completed with exit code 1.]", 1),  # OpenHands
        ("Process exited with code 3", 3),
        ("Exited with status=4", 4),
        ("EXIT CODE=5", 5),
        ("returncode: 6", 6),
        ("return code 7", 7),
        ({"exit_code": 3, "output": "x"}, 3),
        ({"exitCode": 0}, 0),
        ({"returncode": 8}, 8),
        ({"return_code": 9}, 9),
        ({"metadata": {"exit_code": 0}, "content": "exit code: 1"}, 0),  # OpenHands observation
        ({"output": "done\nexit code: 11"}, 11),
        ([{"type": "text", "text": "out\nExit status 12"}], 12),
        ({"exit_code": True, "output": "x"}, None),  # booleans are not statuses
        ({"exit_code": "1"}, None),
        ("all tests passed", None),
        ("sys.exit(1)", None),
        ("exit_code", None),
        ("", None),
        (None, None),
        ({"output": "fine"}, None),
        ({"metadata": {"pid": 1}}, None),
    ],
)
def test_exit_status(result: Any, expected: int | None) -> None:
    assert exit_status(result) == expected


def test_exit_status_is_read_at_the_head_or_the_tail_of_long_output() -> None:
    middle = "x\n" * 5_000
    assert exit_status("<returncode>2</returncode>\n" + middle) == 2
    assert exit_status(middle + "[The command completed with exit code 3.]") == 3
    assert exit_status(middle + "exit code: 4" + middle) is None


def test_exit_status_of_real_mini_swe_agent_results() -> None:
    statuses = []
    for label, inv in trace_invocations():
        if "mini-swe-agent" not in label:
            continue
        first = inv["result"].split("\n", 1)[0]
        match = re.fullmatch(r"<returncode>(-?\d+)</returncode>", first)
        assert match is not None, label
        status = exit_status(inv["result"])
        assert status == int(match.group(1)), label
        statuses.append(status)
    assert len(statuses) > 200
    assert 0 in statuses
    assert {1, 2} <= set(statuses)


def test_text_of_real_anthropic_block_lists() -> None:
    block_lists = [
        inv["result"] for _, inv in trace_invocations() if isinstance(inv["result"], list)
    ]
    assert block_lists
    for blocks in block_lists:
        assert is_text_blocks(blocks)
        assert text_of(blocks) == "\n".join(block["text"] for block in blocks)


# --- extractive: one rule per kind ----------------------------------------------------------


def inv(name: str, args: Any, result: Any, is_error: bool = False) -> dict[str, Any]:
    return {"name": name, "args": args, "result": result, "isError": is_error}


def test_name_and_version() -> None:
    assert (NAME, VERSION) == ("extractive", "v1")


def test_read_gives_path_size_line_count_head_and_tail() -> None:
    text = lines(20)
    summary = summarize(inv("Read", {"file_path": "src/app.py"}, text), 400)
    assert summary == "\n".join(
        [
            f"Read src/app.py: {len(text)} bytes, 20 lines",
            *(f"line {i}" for i in range(1, 7)),
            "[… 10 lines …]",
            *(f"line {i}" for i in range(17, 21)),
        ]
    )


def test_read_counts_utf8_bytes_and_keeps_short_files_whole() -> None:
    text = "é\n€\n\U0001f600"  # 2 + 1 + 3 + 1 + 4 bytes
    summary = summarize(inv("read_file", '{"path": "uni.txt"}', text), 400)
    assert summary == "read_file uni.txt: 11 bytes, 3 lines\né\n€\n\U0001f600"
    one = summarize(inv("view_file", {"path": "one"}, "only"), 400)
    assert one == "view_file one: 4 bytes, 1 line\nonly"
    empty = summarize(inv("Read", {"file_path": "e"}, ""), 400)
    assert empty == "Read e: 0 bytes, 0 lines"
    assert summarize(inv("Read", {}, "x"), 400).startswith("Read ?: 1 bytes")


def test_read_of_a_str_replace_editor_view() -> None:
    args = json.dumps({"command": "view", "path": "/w/parser.c"})
    summary = summarize(inv("str_replace_editor", args, lines(3)), 400)
    assert summary.startswith("str_replace_editor /w/parser.c: 21 bytes, 3 lines\nline 1")


def test_shell_gives_command_status_line_count_and_tail() -> None:
    output = "".join(f"out {i}\n" for i in range(1, 21))
    result = f"<returncode>1</returncode>\n<output>\n{output}</output>"
    summary = summarize(inv("bash", '{"command": "pytest -q\\n  --tb=short"}', result), 400)
    assert summary == "\n".join(
        [
            f"$ pytest -q --tb=short, exit 1: {len(result)} bytes, 23 lines",
            "[… 15 lines …]",
            *(f"out {i}" for i in range(14, 21)),
            "</output>",
        ]
    )


def test_shell_without_a_status_or_a_command() -> None:
    summary = summarize(inv("Bash", {"command": "ls"}, "a\nb\n"), 400)
    assert summary == "$ ls: 4 bytes, 2 lines\na\nb"
    assert "exit" not in summary
    nameless = summarize(inv("run_terminal_cmd", {}, "ok"), 400)
    assert nameless == "$ run_terminal_cmd: 2 bytes, 1 line\nok"
    listed = summarize(inv("local_shell", {"command": ["bash", "-lc", "make"]}, ""), 400)
    assert listed == "$ bash -lc make: 0 bytes, 0 lines"


def test_shell_status_from_an_object_result() -> None:
    result = {"output": "done", "metadata": {"exit_code": 0}}
    summary = summarize(inv("execute_bash", {"command": "make"}, result), 400)
    assert summary == "$ make, exit 0: 4 bytes, 1 line\ndone"


def test_shell_cuts_a_long_command_in_its_header() -> None:
    command = "echo " + "x" * 300
    summary = summarize(inv("Bash", {"command": command}, "x"), 400)
    header = summary.split("\n", 1)[0]
    assert header.startswith("$ " + command[:159] + ELLIPSIS + ":")
    assert len(header) < 200


def test_search_counts_matches_and_files() -> None:
    result = "a.py:3:def main():\nb/c.py:10:    def main(self):\n\n  \nb/c.py:20:# def main\n"
    summary = summarize(inv("Grep", {"pattern": "def main"}, result), 400)
    assert summary == "\n".join(
        [
            "Grep 'def main': 3 matches in 2 files",
            "files: a.py, b/c.py",
            "a.py:3:def main():",
            "b/c.py:10:    def main(self):",
            "b/c.py:20:# def main",
        ]
    )


def test_search_of_paths_only_counts_them() -> None:
    result = "/t/src/a.py\n/t/src/b.py\n"
    summary = summarize(inv("Glob", {"pattern": "**/*.py"}, result), 400)
    assert summary == "Glob '**/*.py': 2 matches\n/t/src/a.py\n/t/src/b.py"
    one = summarize(inv("grep_search", {"query": "x"}, "a.py:1:x"), 400)
    assert one.startswith("grep_search 'x': 1 match in 1 file\n")
    none = summarize(inv("grep", {"regex": "zzz"}, ""), 400)
    assert none == "grep 'zzz': 0 matches"


def test_search_of_a_json_list_counts_results() -> None:
    flights = [
        {"flight_number": "HAT1", "seats": {"economy": 1}},
        {"flight_number": "HAT2", "seats": {"economy": 0}},
    ]
    args = {"origin": "MSP", "destination": "EWR"}
    summary = summarize(inv("search_direct_flight", args, json.dumps(flights)), 400)
    assert summary == (
        "search_direct_flight: 2 results\n"
        "{flight_number: 'HAT1', seats: {1 keys}}\n"
        "{flight_number: 'HAT2', seats: {1 keys}}"
    )
    assert summarize(inv("list_dir", {"query": "q"}, [7]), 400) == "list_dir 'q': 1 result\n7"


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("Edit", {"file_path": "a.py", "old_string": "a\nb", "new_string": "a\nb\nc\nd"}, "+4 -2"),
        ("Edit", {"file_path": "a.py", "old_string": "x", "new_string": ""}, "+0 -1"),
        (
            "MultiEdit",
            {
                "file_path": "a.py",
                "edits": [
                    {"old_string": "x", "new_string": "y\nz"},
                    {"old_string": "p\nq\nr", "new_string": ""},
                    "not an edit",
                ],
            },
            "+2 -4",
        ),
        ("Write", {"file_path": "a.py", "content": "1\n2\n3\n"}, "+3 -0"),
        ("write_file", '{"path": "a.py", "content": "one"}', "+1 -0"),
        ("str_replace_editor", {"command": "create", "path": "a.py", "file_text": "a\nb"}, "+2 -0"),
        (
            "str_replace_editor",
            {"command": "str_replace", "path": "a.py", "old_str": "a", "new_str": "b\nc"},
            "+2 -1",
        ),
        ("str_replace_editor", {"command": "insert", "path": "a.py", "new_str": "z"}, "+1 -0"),
        ("edit_file", {"filePath": "a.py", "oldText": "o", "newText": "n\nm\nl"}, "+3 -1"),
    ],
)
def test_edit_and_write_give_path_and_lines_changed(name: str, args: Any, expected: str) -> None:
    summary = summarize(inv(name, args, "The file a.py has been updated."), 400)
    assert summary == f"{name} a.py, {expected} lines\nThe file a.py has been updated."


def test_edit_without_changed_lines_says_only_the_path() -> None:
    assert summarize(inv("Edit", {"file_path": "a.py"}, "ok"), 400) == "Edit a.py\nok"
    assert summarize(inv("apply_patch", {"input": "*** Begin"}, ""), 400) == "apply_patch ?"
    assert summarize(inv("MultiEdit", {"file_path": "b", "edits": []}, ""), 400) == "MultiEdit b"


def test_fetch_gives_url_length_and_html_title() -> None:
    page = "<html><head><TITLE lang=en>Hello\n  World</TITLE></head><body># no</body></html>"
    summary = summarize(inv("WebFetch", {"url": "https://x.dev/a"}, page), 400)
    assert summary == f"WebFetch https://x.dev/a: {len(page)} chars, title 'Hello World'\n{page}"


def test_fetch_title_from_the_first_heading() -> None:
    page = "intro\n# Getting started\n"
    summary = summarize(inv("fetch_url", {"url": "https://x.dev"}, page), 400)
    assert summary.startswith("fetch_url https://x.dev: 24 chars, title 'Getting started'\n")


def test_fetch_title_from_a_heading_is_that_line_only() -> None:
    page = "# Getting started\n\nInstall the package.\nThen run it.\n"
    summary = summarize(inv("WebFetch", {"url": "https://x.dev"}, page), 400)
    assert summary.startswith("WebFetch https://x.dev: 53 chars, title 'Getting started'\n")


def test_fetch_without_title_or_url() -> None:
    summary = summarize(inv("WebFetch", {"url": "u"}, "just text\n## not a title"), 400)
    assert summary == "WebFetch u: 24 chars\njust text\n## not a title"
    empty = "<title> \n </title>"
    assert summarize(inv("fetch", {"url": "u"}, empty), 400) == f"fetch u: 18 chars\n{empty}"
    # web search: the query stands where the URL would
    search = summarize(inv("web_search", {"query": "toolref"}, "r1\nr2"), 400)
    assert search == "web_search toolref: 5 chars\nr1\nr2"
    assert summarize(inv("WebFetch", {}, ""), 400) == "WebFetch ?: 0 chars"


def test_other_outlines_json_keys_and_array_lengths() -> None:
    record = {
        "name": {"first_name": "Sophia", "last_name": "Silva"},
        "reservations": ["NM1VX1", "KC18K6", "S61CZX"],
        "deep": {"a": {"b": 1}},
        "n": 3,
        "ok": True,
        "none": None,
        "empty": [],
        "long": "abcdefghij" * 6,
    }
    expected = (
        "get_user_details: {name: {first_name: 'Sophia', last_name: 'Silva'}, "
        "reservations: [3 × 'NM1VX1'], deep: {a: {1 keys}}, n: 3, ok: true, none: null, "
        "empty: [], long: 'abcdefghijabcdefghijabcdefghij…cdefghij'}"
    )
    # A JSON string and the JSON itself give the same outline.
    assert summarize(inv("get_user_details", {}, json.dumps(record)), 400) == expected
    assert summarize(inv("get_user_details", {}, record), 400) == expected


def test_other_outline_counts_keys_past_twelve() -> None:
    summary = summarize(inv("my_custom_tool", {}, {f"k{i}": i for i in range(15)}), 400)
    assert summary.startswith("my_custom_tool: {k0: 0, k1: 1,")
    assert summary.endswith("k11: 11, +3 keys}")
    assert (
        summarize(inv("my_custom_tool", {}, [[1, 2], [3]]), 400) == "my_custom_tool: [2 × [2 × 1]]"
    )


def test_other_text_gives_size_and_head_and_tail() -> None:
    blocks = [{"type": "text", "text": "one\ntwo"}, {"type": "text", "text": "three"}]
    assert summarize(inv("Task", {}, blocks), 400) == "Task: 13 bytes, 3 lines\none\ntwo\nthree"
    assert summarize(inv("Task", {}, "{not json"), 400) == "Task: 9 bytes, 1 line\n{not json"
    assert summarize(inv("Task", {}, None), 400) == "Task: 0 bytes, 0 lines"
    assert summarize(inv("think", {"thought": "hm"}, "Your thought has been logged."), 400) == (
        "think: 29 bytes, 1 line\nYour thought has been logged."
    )
    todo = summarize(inv("TodoWrite", {"todos": []}, lines(12)), 400)
    assert todo.splitlines()[7] == "[… 2 lines …]"


@pytest.mark.parametrize(
    ("name", "args", "result", "lead"),
    [
        ("Read", {"file_path": "a.py"}, "No such file", "error from Read a.py: "),
        ("Bash", {"command": "false"}, "exit code: 1", "error from $ false, exit 1: "),
        ("Grep", {"pattern": "x"}, "bad regex", "error from Grep 'x': 1 match"),
        ("Edit", {"file_path": "a.py", "old_string": "x"}, "not found", "error from Edit a.py, "),
        ("WebFetch", {"url": "u"}, "404", "error from WebFetch u: 3 chars"),
        ("my_custom_tool", {}, {"error": "boom"}, "error from my_custom_tool: {error: 'boom'}"),
    ],
)
def test_error_results_say_so(name: str, args: Any, result: Any, lead: str) -> None:
    summary = summarize(inv(name, args, result, is_error=True), 400)
    assert summary.startswith(lead)
    plain = summarize(inv(name, args, result), 400)
    assert summary == "error from " + plain


def test_kinds_come_from_the_table_given() -> None:
    invocation = inv("deploy", {"file_path": "prod.yaml", "command": "kubectl apply"}, "ok")
    assert summarize(invocation, 400) == "deploy: 2 bytes, 1 line\nok"
    assert summarize(invocation, 400, KindTable({"deploy": Kind.READ})).startswith(
        "deploy prod.yaml: 2 bytes"
    )
    assert summarize(invocation, 400, KindTable({"deploy": Kind.SHELL})).startswith(
        "$ kubectl apply: 2 bytes"
    )


def test_a_wire_invocation_without_some_members() -> None:
    assert summarize({"name": "Read"}, 400) == "Read ?: 0 bytes, 0 lines"
    assert summarize({}, 400) == ": 0 bytes, 0 lines"


# --- extractive: the budget ---------------------------------------------------------------


@pytest.mark.parametrize("max_chars", [0, -1, -400])
def test_a_budget_below_one_is_refused(max_chars: int) -> None:
    with pytest.raises(ValueError, match=f"max_chars must be at least 1, got {max_chars}"):
        summarize(inv("Read", {"file_path": "a.py"}, "x"), max_chars)


BUDGET_CASES = [
    inv("Read", {"file_path": "src/" + "deep/" * 30 + "app.py"}, lines(100)),
    inv("Bash", {"command": "make " * 100}, "<returncode>2</returncode>\n" + lines(50, "err")),
    inv("Grep", {"pattern": "p"}, "".join(f"f{i}.py:{i}:p\n" for i in range(40))),
    inv(
        "MultiEdit", {"file_path": "a.py", "edits": [{"old_string": "a", "new_string": "b"}]}, "ok"
    ),
    inv("WebFetch", {"url": "https://x.dev"}, "<title>T</title>" + "w " * 5_000),
    inv("get_user_details", {}, {f"key{i}": ["v" * 50] * i for i in range(30)}),
    inv("Task", {}, "y" * 10_000, is_error=True),
]


@pytest.mark.parametrize("case", range(len(BUDGET_CASES)))
def test_every_budget_is_kept_and_a_cut_is_marked(case: int) -> None:
    invocation = BUDGET_CASES[case]
    full = summarize(invocation, 100_000)
    header = full.split("\n", 1)[0]
    for max_chars in range(1, 501):
        summary = summarize(invocation, max_chars)
        assert len(summary) <= max_chars, max_chars
        if max_chars <= len(header):
            # The header is cut, and the cut says so.
            assert summary == (header[: max_chars - 1] + ELLIPSIS if max_chars > 1 else header[:1])
        else:
            assert summary.startswith(header + "\n") or summary == header
            assert summary.split("\n")[:-1] == full.split("\n")[: summary.count("\n")]


# Arbitrary JSON, text from the whole of Unicode, and the shapes tool payloads take.
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**64, max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(TEXT, children, max_size=5),
    max_leaves=20,
)
LONG_TEXT = st.builds(
    lambda chunk, times: chunk * times,
    st.text(
        st.one_of(
            st.characters(exclude_categories=["Cs"]),
            st.sampled_from(list("\n\r\t\u2028\x0b\x1c\x85 :é€\U0001f600")),
        ),
        min_size=1,
        max_size=40,
    ),
    st.integers(min_value=1, max_value=3_000),
)
HUGE_LINE = st.builds(
    lambda char, times: char * times,
    st.characters(
        exclude_categories=["Cs"],
        exclude_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029",
    ),
    st.integers(min_value=1_000, max_value=100_000),
)
TEXTUAL = st.one_of(
    TEXT,
    LONG_TEXT,
    HUGE_LINE,
    st.just(""),
    st.builds(lambda v: json.dumps(v, ensure_ascii=False), JSON),
    st.builds(
        lambda n, s: f"<returncode>{n}</returncode>\n<output>\n{s}</output>", st.integers(), TEXT
    ),
    st.builds(lambda t, b: f"<html><title>{t}</title>{b}</html>", TEXT, LONG_TEXT),
    st.builds(lambda t, b: f"# {t}\n{b}", TEXT, LONG_TEXT),
    st.builds(lambda f, n, s: f"{f}.py:{n}:{s}", TEXT, st.integers(0, 9999), TEXT),
)
RESULTS = st.one_of(
    JSON,
    TEXTUAL,
    st.lists(st.builds(lambda t: {"type": "text", "text": t}, TEXTUAL), min_size=1, max_size=3),
    st.builds(lambda t, c: {"output": t, "exit_code": c}, TEXTUAL, st.integers()),
    st.builds(lambda t: {"content": t}, TEXTUAL),
    st.lists(JSON, max_size=5),
)
KNOWN_KEYS = sorted({*PATH_KEYS, *COMMAND_KEYS, *URL_KEYS, *PATTERN_KEYS, "edits", "old_string"})
ARG_OBJECTS = st.dictionaries(
    st.one_of(st.sampled_from([*KNOWN_KEYS, "new_string", "content", "file_text"]), TEXT),
    st.one_of(TEXTUAL, JSON, st.lists(TEXT, max_size=3)),
    max_size=5,
)
ARGS = st.one_of(
    ARG_OBJECTS,
    st.builds(lambda a: json.dumps(a, ensure_ascii=False), ARG_OBJECTS),
    JSON,
    TEXT,
)
NAMES = st.one_of(
    st.sampled_from(sorted({*BUILTIN, *EDITOR_TOOLS, "readFile", "search_web", "my_tool"})),
    TEXT,
)
INVOCATIONS = st.fixed_dictionaries(
    {"name": NAMES, "args": ARGS, "result": RESULTS, "isError": st.booleans()}
)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(INVOCATIONS, st.integers(min_value=1, max_value=2000))
def test_any_invocation_is_summarized_within_budget_and_the_same_every_time(
    invocation: dict[str, Any], max_chars: int
) -> None:
    snapshot = copy.deepcopy(invocation)
    summary = summarize(invocation, max_chars)
    assert isinstance(summary, str)
    assert len(summary) <= max_chars
    assert invocation == snapshot  # the input is not modified
    assert summarize(copy.deepcopy(invocation), max_chars) == summary
    if invocation["isError"]:
        kept, lead = summary.removesuffix(ELLIPSIS), "error from "
        assert kept.startswith(lead) or lead.startswith(kept)


@pytest.mark.parametrize("name", ["my_custom_tool", "Grep"])
def test_a_deeply_nested_json_looking_string_is_summarized(name: str) -> None:
    result = "[" * 100_000 + "]" * 100_000
    summary = summarize(inv(name, {}, result), 400)
    assert len(summary) <= 400


# --- extractive: real conversations -------------------------------------------------------


def mentions(summary: str, expected: str) -> bool:
    """`expected` is in `summary`, or `summary` is a cut (…) of a text that starts with it."""
    if expected in summary:
        return True
    cut = summary.split("\n", 1)[0]
    return cut.endswith(ELLIPSIS) and expected.startswith(cut[:-1])


def test_every_shared_trace_invocation_is_summarized_within_budget() -> None:
    invocations = trace_invocations()
    assert len(invocations) >= 400
    checked = dict.fromkeys(("path", "command"), 0)
    for label, invocation in invocations:
        summary = summarize(invocation, 400)
        assert 0 < len(summary) <= 400, label
        assert summarize(invocation, 400) == summary, label
        name, args = invocation["name"], invocation["args"]
        kind = DEFAULT_KINDS.kind(name, args)
        lead = "error from " if invocation["isError"] else ""
        path, command = path_of(args), command_of(args)
        if kind in (Kind.READ, Kind.EDIT, Kind.WRITE) and path:
            assert mentions(summary, f"{lead}{name} {path}"), label
            checked["path"] += 1
        if kind is Kind.SHELL and command:
            assert mentions(summary, f"{lead}$ {' '.join(command.split())[:159]}"), label
            checked["command"] += 1
        # The tightest budgets still give the start of the same summary.
        for max_chars in (1, 2, 40, 120):
            small = summarize(invocation, max_chars)
            assert len(small) <= max_chars, label
            assert summary.startswith(small.removesuffix(ELLIPSIS)), label
    assert checked["path"] >= 50
    assert checked["command"] >= 250
