"""What a tool does, from its name (and, for multi-command tools, its arguments).

Summaries, the backend-switch handoff and ACP notifications all treat a file read, a shell
command or an edit differently, so they share this table. Lookup order:

1. `overrides` (exact name), for your own tools;
2. the built-in table (exact name): Claude Code, OpenAI-style agents, SWE-agent/OpenHands;
3. `str_replace_editor` / `str_replace_based_edit_tool`: the `command` argument decides;
4. words in the name (`read_`, `_search`, `bash`, ...), as listed in `_WORDS`;
5. otherwise `other`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from toolref.kit.payload import arguments


class Kind(StrEnum):
    READ = "read"
    EDIT = "edit"
    WRITE = "write"
    DELETE = "delete"
    MOVE = "move"
    SEARCH = "search"
    SHELL = "shell"
    FETCH = "fetch"
    THINK = "think"
    TODO = "todo"
    SWITCH_MODE = "switch_mode"
    OTHER = "other"


BUILTIN: Final[Mapping[str, Kind]] = {
    # Claude Code
    "Read": Kind.READ,
    "NotebookRead": Kind.READ,
    "LS": Kind.SEARCH,
    "Bash": Kind.SHELL,
    "BashOutput": Kind.SHELL,
    "KillShell": Kind.SHELL,
    "KillBash": Kind.SHELL,
    "Edit": Kind.EDIT,
    "MultiEdit": Kind.EDIT,
    "NotebookEdit": Kind.EDIT,
    "Write": Kind.WRITE,
    "Grep": Kind.SEARCH,
    "Glob": Kind.SEARCH,
    "WebFetch": Kind.FETCH,
    "WebSearch": Kind.FETCH,
    "TodoWrite": Kind.TODO,
    "ExitPlanMode": Kind.SWITCH_MODE,
    "Task": Kind.OTHER,
    # OpenAI-style agents (Cursor, Codex, SWE-agent, OpenHands, ...)
    "read_file": Kind.READ,
    "view_file": Kind.READ,
    "cat": Kind.READ,
    "list_dir": Kind.SEARCH,
    "list_directory": Kind.SEARCH,
    "run_terminal_cmd": Kind.SHELL,
    "bash": Kind.SHELL,
    "execute_bash": Kind.SHELL,
    "shell": Kind.SHELL,
    "local_shell": Kind.SHELL,
    "exec_command": Kind.SHELL,
    "execute_ipython_cell": Kind.SHELL,
    "edit_file": Kind.EDIT,
    "apply_patch": Kind.EDIT,
    "search_replace": Kind.EDIT,
    "write_file": Kind.WRITE,
    "create_file": Kind.WRITE,
    "delete_file": Kind.DELETE,
    "move_file": Kind.MOVE,
    "rename_file": Kind.MOVE,
    "grep": Kind.SEARCH,
    "grep_search": Kind.SEARCH,
    "file_search": Kind.SEARCH,
    "codebase_search": Kind.SEARCH,
    "find_file": Kind.SEARCH,
    "search_dir": Kind.SEARCH,
    "search_file": Kind.SEARCH,
    "web_search": Kind.FETCH,
    "fetch": Kind.FETCH,
    "fetch_url": Kind.FETCH,
    "think": Kind.THINK,
    "todo_write": Kind.TODO,
    "update_plan": Kind.TODO,
}

# str_replace_editor and Anthropic's text editor tool: one tool, `command` says what it does.
EDITOR_TOOLS: Final = frozenset({"str_replace_editor", "str_replace_based_edit_tool"})
EDITOR_COMMANDS: Final[Mapping[str, Kind]] = {
    "view": Kind.READ,
    "create": Kind.WRITE,
    "str_replace": Kind.EDIT,
    "insert": Kind.EDIT,
    "undo_edit": Kind.EDIT,
}

# Words in a tool name, tried in this order, for tools no table names. Web words come
# before search words (a web search fetches), mode words before plan words.
_WORDS: Final[tuple[tuple[Kind, tuple[str, ...]], ...]] = (
    (Kind.SWITCH_MODE, ("mode",)),
    (Kind.TODO, ("todo", "plan")),
    (Kind.THINK, ("think", "reason")),
    (Kind.DELETE, ("delete", "remove", "unlink")),
    (Kind.MOVE, ("move", "rename")),
    (Kind.FETCH, ("fetch", "http", "url", "web", "browse", "download", "request")),
    (Kind.EDIT, ("edit", "replace", "patch", "modify", "update")),
    (Kind.WRITE, ("write", "create", "save")),
    (Kind.SEARCH, ("search", "grep", "find", "glob", "list", "ls")),
    (Kind.READ, ("read", "view", "open", "cat", "get_file", "show")),
    (Kind.SHELL, ("bash", "shell", "exec", "terminal", "command", "cmd", "run", "python")),
)
# Separators, lower-to-upper steps (readFile), and the end of an acronym (HTTPRequest).
_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def _words(name: str) -> set[str]:
    words = {w.lower() for w in _SPLIT.split(name) if w}
    # Plurals count as the word: write_todos, list_files.
    return words | {w[:-1] for w in words if len(w) > 3 and w.endswith("s")}


@dataclass(frozen=True)
class KindTable:
    """Tool name (and arguments) -> `Kind`. `overrides` win over everything built in."""

    overrides: Mapping[str, Kind] = field(default_factory=dict)

    def kind(self, name: str, args: Any = None) -> Kind:
        if name in self.overrides:
            return Kind(self.overrides[name])
        if name in BUILTIN:
            return BUILTIN[name]
        if name in EDITOR_TOOLS:
            command = arguments(args).get("command")
            return (
                EDITOR_COMMANDS.get(command, Kind.EDIT) if isinstance(command, str) else Kind.EDIT
            )
        words = _words(name)
        joined = name.lower()
        for kind, hints in _WORDS:
            if any(hint in words or ("_" in hint and hint in joined) for hint in hints):
                return kind
        return Kind.OTHER

    @classmethod
    def parse(cls, text: str) -> KindTable:
        """`name=kind,name=kind` (as TOOLREF_TOOL_KINDS holds it); unknown kinds refused."""
        overrides: dict[str, Kind] = {}
        for entry in filter(None, (part.strip() for part in text.split(","))):
            name, _, value = entry.partition("=")
            try:
                overrides[name.strip()] = Kind(value.strip())
            except ValueError:
                valid = ", ".join(k.value for k in Kind)
                raise ValueError(
                    f"tool kind entry {entry!r} is not `name=kind` with a kind among {valid}"
                ) from None
        return cls(overrides)


DEFAULT_KINDS: Final = KindTable()
