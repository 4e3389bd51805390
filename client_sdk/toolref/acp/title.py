"""A human title and file locations for a tool call, from its name and arguments."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

from toolref.acp.content import is_line
from toolref.wire.encoding import LONE_SURROGATE

# The argument that says most about a call, in order of preference.
_SUBJECTS: Final = (
    "command",
    "cmd",
    "file_path",
    "path",
    "filename",
    "pattern",
    "query",
    "url",
    "description",
)
_PATHS: Final = ("file_path", "path", "filename", "notebook_path")
_LIMIT: Final = 80


def title_for(name: str, arguments: Any) -> str:
    """`bash: ls -la`, `read_file: /src/app.py`, or just the name; a lone surrogate (of a
    model's `"\\ud800"`) as U+FFFD, as clients parse no title holding one."""
    return LONE_SURROGATE.sub("\ufffd", _title(name, arguments))


def _title(name: str, arguments: Any) -> str:
    if isinstance(arguments, Mapping):
        for key in _SUBJECTS:
            value = arguments.get(key)
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                value = " ".join(value)  # argv-style commands
            if isinstance(value, str) and value.strip():
                subject = " ".join(value.split())
                title = f"{name or 'tool call'}: {subject}"
                return title if len(title) <= _LIMIT else title[: _LIMIT - 1] + "…"
    return name or "tool call"


def locations_for(arguments: Any) -> list[dict[str, Any]]:
    """The absolute file path a call names, as an ACP location, with its line when the
    model gave one the schema takes (a uint32; another is dropped, as a client reading the
    schema's default-on-error would drop it, and the path kept). A path holding a lone
    surrogate names no file, and clients parse no notification holding one: none then."""
    if not isinstance(arguments, Mapping):
        return []
    for key in _PATHS:
        path = arguments.get(key)
        if isinstance(path, str) and os.path.isabs(path):
            if LONE_SURROGATE.search(path) is not None:
                return []
            line = arguments.get("line", arguments.get("offset"))
            if is_line(line):
                return [{"path": path, "line": line}]
            return [{"path": path}]
    return []
