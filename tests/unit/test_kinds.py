"""Tool kinds: the built-in table, str_replace_editor commands, words in names, overrides."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolref.kit.kinds import BUILTIN, DEFAULT_KINDS, EDITOR_COMMANDS, EDITOR_TOOLS, Kind, KindTable

# Name -> kind, through every step of the lookup order (overrides aside).
TABLE: list[tuple[str, Kind]] = [
    # Claude Code
    ("Read", Kind.READ),
    ("NotebookRead", Kind.READ),
    ("Bash", Kind.SHELL),
    ("BashOutput", Kind.SHELL),
    ("KillShell", Kind.SHELL),
    ("Edit", Kind.EDIT),
    ("MultiEdit", Kind.EDIT),
    ("NotebookEdit", Kind.EDIT),
    ("Write", Kind.WRITE),
    ("Grep", Kind.SEARCH),
    ("Glob", Kind.SEARCH),
    ("LS", Kind.SEARCH),
    ("WebFetch", Kind.FETCH),
    ("WebSearch", Kind.FETCH),
    ("TodoWrite", Kind.TODO),
    ("ExitPlanMode", Kind.SWITCH_MODE),
    ("Task", Kind.OTHER),
    # OpenAI-style agents
    ("read_file", Kind.READ),
    ("view_file", Kind.READ),
    ("run_terminal_cmd", Kind.SHELL),
    ("bash", Kind.SHELL),
    ("execute_bash", Kind.SHELL),
    ("shell", Kind.SHELL),
    ("local_shell", Kind.SHELL),
    ("execute_ipython_cell", Kind.SHELL),
    ("edit_file", Kind.EDIT),
    ("apply_patch", Kind.EDIT),
    ("search_replace", Kind.EDIT),
    ("write_file", Kind.WRITE),
    ("create_file", Kind.WRITE),
    ("delete_file", Kind.DELETE),
    ("move_file", Kind.MOVE),
    ("rename_file", Kind.MOVE),
    ("grep_search", Kind.SEARCH),
    ("codebase_search", Kind.SEARCH),
    ("list_dir", Kind.SEARCH),
    ("web_search", Kind.FETCH),
    ("fetch_url", Kind.FETCH),
    ("think", Kind.THINK),
    ("todo_write", Kind.TODO),
    ("update_plan", Kind.TODO),
    # Words in names: camelCase, PascalCase, snake_case, kebab-case, SCREAMING_CASE, MCP names
    ("readFile", Kind.READ),
    ("ReadFile", Kind.READ),
    ("READ_FILE", Kind.READ),
    ("read-file", Kind.READ),
    ("openDocument", Kind.READ),
    ("mcp__github__get_file_contents", Kind.READ),
    ("showDiff", Kind.READ),
    ("runTests", Kind.SHELL),
    ("run_tests", Kind.SHELL),
    ("executeCommand", Kind.SHELL),
    ("python", Kind.SHELL),
    ("applyPatch", Kind.EDIT),
    ("modify_config", Kind.EDIT),
    ("saveNote", Kind.WRITE),
    ("createDirectory", Kind.WRITE),
    ("remove_branch", Kind.DELETE),
    ("unlink", Kind.DELETE),
    ("renameSymbol", Kind.MOVE),
    ("list_files", Kind.SEARCH),
    ("findReferences", Kind.SEARCH),
    ("searchCode", Kind.SEARCH),
    ("glob_files", Kind.SEARCH),
    ("fetchURL", Kind.FETCH),
    ("downloadFile", Kind.FETCH),
    ("http_get", Kind.FETCH),
    ("browse", Kind.FETCH),
    ("reasonAboutIt", Kind.THINK),
    ("ThinkTool", Kind.THINK),
    ("updateTodo", Kind.TODO),  # todo is tried before edit ("update")
    ("make_plan", Kind.TODO),
    # Nothing to go on
    ("my_custom_tool", Kind.OTHER),
    ("get_user_details", Kind.OTHER),
    ("cancel_reservation", Kind.OTHER),
    ("tools", Kind.OTHER),  # "ls" only counts as a whole word
    ("concatenate", Kind.OTHER),  # "cat" only counts as a whole word
    ("", Kind.OTHER),
]

# The word fallback agrees with the built-in table's own choices (these once did not).
WORD_REGRESSIONS = [
    ("search_web", Kind.FETCH),
    ("webSearch", Kind.FETCH),
    ("exit_plan_mode", Kind.SWITCH_MODE),
    ("write_todos", Kind.TODO),
    ("HTTPRequest", Kind.FETCH),
]


@pytest.mark.parametrize(("name", "kind"), TABLE)
def test_a_tool_name_has_its_kind(name: str, kind: Kind) -> None:
    assert DEFAULT_KINDS.kind(name) is kind
    # Arguments only matter for the editor tools.
    assert DEFAULT_KINDS.kind(name, {"command": "view", "path": "a.py"}) is kind


def test_the_table_covers_every_kind_and_enough_names() -> None:
    assert len(TABLE) >= 40
    assert {kind for _, kind in TABLE} == set(Kind)


@pytest.mark.parametrize(("name", "kind"), WORD_REGRESSIONS)
def test_word_fallback_agrees_with_the_built_in_table(name: str, kind: Kind) -> None:
    assert DEFAULT_KINDS.kind(name) is kind


def test_every_built_in_name_is_looked_up_exactly() -> None:
    for name, kind in BUILTIN.items():
        assert DEFAULT_KINDS.kind(name) is kind, name
    # Exact names: another spelling goes through the words (or nowhere).
    assert DEFAULT_KINDS.kind("task") is Kind.OTHER
    assert DEFAULT_KINDS.kind("Ls") is Kind.SEARCH
    assert DEFAULT_KINDS.kind("cat") is Kind.READ


EDITOR_CASES = [
    ("view", Kind.READ),
    ("create", Kind.WRITE),
    ("str_replace", Kind.EDIT),
    ("insert", Kind.EDIT),
    ("undo_edit", Kind.EDIT),
]


@pytest.mark.parametrize("tool", sorted(EDITOR_TOOLS))
@pytest.mark.parametrize(("command", "kind"), EDITOR_CASES)
def test_the_editor_command_decides_the_kind(tool: str, command: str, kind: Kind) -> None:
    args = {"command": command, "path": "/repo/a.py"}
    assert DEFAULT_KINDS.kind(tool, args) is kind
    # OpenAI-style agents send arguments as a JSON string (OpenHands does).
    assert DEFAULT_KINDS.kind(tool, json.dumps(args)) is kind
    assert DEFAULT_KINDS.kind(tool, json.dumps(args, indent=2)) is kind


def test_the_editor_cases_cover_every_editor_command() -> None:
    assert dict(EDITOR_CASES) == dict(EDITOR_COMMANDS)


@pytest.mark.parametrize("tool", sorted(EDITOR_TOOLS))
@pytest.mark.parametrize(
    "args",
    [
        None,
        {},
        {"path": "a.py"},
        {"command": "delete_everything"},
        {"command": "VIEW"},
        {"command": ["view"]},
        {"command": 1},
        {"command": None},
        "not json",
        '{"command": "view"',
        '["view"]',
        '"view"',
        "",
        ["view"],
        42,
    ],
)
def test_the_editor_without_a_known_command_is_an_edit(tool: str, args: Any) -> None:
    assert DEFAULT_KINDS.kind(tool, args) is Kind.EDIT


def test_the_editor_reads_the_real_openhands_argument_string() -> None:
    args = (
        '{"command": "view", "path": "/workspace/ponylang__ponyc__0.1/src/libponyc/ast/parser.c"}'
    )
    assert DEFAULT_KINDS.kind("str_replace_editor", args) is Kind.READ
    args = '{"command": "insert", "path": "/w/match.c", "insert_line": 3, "new_str": "x"}'
    assert DEFAULT_KINDS.kind("str_replace_editor", args) is Kind.EDIT


# --- overrides ----------------------------------------------------------------------------


def test_overrides_win_over_every_built_in_step() -> None:
    table = KindTable(
        {
            "Read": Kind.SHELL,
            "bash": Kind.READ,
            "str_replace_editor": Kind.SEARCH,
            "readFile": Kind.FETCH,
            "my_custom_tool": Kind.DELETE,
        }
    )
    assert table.kind("Read") is Kind.SHELL
    assert table.kind("bash") is Kind.READ
    assert table.kind("str_replace_editor", {"command": "view"}) is Kind.SEARCH
    assert table.kind("str_replace_editor", '{"command": "create"}') is Kind.SEARCH
    assert table.kind("readFile") is Kind.FETCH
    assert table.kind("my_custom_tool") is Kind.DELETE
    # Only the names given change, exactly as spelt.
    assert table.kind("read") is Kind.READ
    assert table.kind("Bash") is Kind.SHELL
    assert table.kind("str_replace_based_edit_tool", {"command": "view"}) is Kind.READ
    assert table.kind("my_custom_tool2") is Kind.OTHER
    assert DEFAULT_KINDS.kind("Read") is Kind.READ  # the default table is untouched


def test_an_override_may_say_the_kind_as_its_value() -> None:
    table = KindTable({"deploy": "shell"})  # type: ignore[dict-item]
    assert table.kind("deploy") is Kind.SHELL


def test_the_default_table_has_no_overrides() -> None:
    assert dict(DEFAULT_KINDS.overrides) == {}
    assert KindTable() == DEFAULT_KINDS


# --- parse --------------------------------------------------------------------------------


def test_parse_reads_name_kind_pairs() -> None:
    table = KindTable.parse("my_tool=read,deploy=shell")
    assert dict(table.overrides) == {"my_tool": Kind.READ, "deploy": Kind.SHELL}
    assert all(type(kind) is Kind for kind in table.overrides.values())
    assert table.kind("my_tool") is Kind.READ
    assert table.kind("deploy") is Kind.SHELL
    assert table.kind("Read") is Kind.READ


def test_parse_ignores_whitespace_and_empty_entries() -> None:
    table = KindTable.parse("  my_tool = read ,, deploy=shell ,\n Bash =other , ")
    assert dict(table.overrides) == {
        "my_tool": Kind.READ,
        "deploy": Kind.SHELL,
        "Bash": Kind.OTHER,
    }
    assert table.kind("Bash") is Kind.OTHER


@pytest.mark.parametrize("text", ["", " ", ",", " , ,, "])
def test_parse_of_nothing_is_no_overrides(text: str) -> None:
    assert dict(KindTable.parse(text).overrides) == {}


def test_parse_takes_every_kind_and_the_last_of_a_repeated_name() -> None:
    text = ",".join(f"tool_{kind.value}={kind.value}" for kind in Kind)
    table = KindTable.parse(text)
    assert {table.kind(f"tool_{kind.value}") for kind in Kind} == set(Kind)
    assert table.kind("x", None) is Kind.OTHER
    assert KindTable.parse("x=read,x=shell").kind("x") is Kind.SHELL


@pytest.mark.parametrize(
    ("text", "entry"),
    [
        ("my_tool=reader", "my_tool=reader"),
        ("a=read,b=execute", "b=execute"),  # ACP's name for shell is not a kind here
        ("a=READ", "a=READ"),
        ("my_tool", "my_tool"),
        ("my_tool=", "my_tool="),
        ("a=read, b = bogus ", "b = bogus"),
    ],
)
def test_parse_refuses_an_unknown_kind_naming_the_valid_ones(text: str, entry: str) -> None:
    with pytest.raises(ValueError, match="tool kind entry") as info:
        KindTable.parse(text)
    message = str(info.value)
    assert repr(entry) in message
    for kind in Kind:
        assert kind.value in message
    assert "read, edit, write, delete, move, search, shell, fetch, think, todo" in message
