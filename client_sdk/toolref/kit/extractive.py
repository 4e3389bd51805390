"""The `extractive` summarizer: deterministic, no model, always within its budget.

What it keeps depends on the tool's kind (`toolref.kit.kinds`):

- read: path, bytes, line count, first and last lines;
- shell: command, exit status when the output reports one, line count, last lines;
- search: match count, files matched, first matches;
- edit / write: path, lines changed (added and removed, from the arguments);
- fetch: URL, length, title (HTML `<title>` or the first heading);
- anything else: a JSON outline (keys, array lengths, value heads and tails).

An error result is labelled as one. The same invocation always gives the same summary.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from toolref.kit.kinds import DEFAULT_KINDS, Kind, KindTable
from toolref.kit.payload import (
    arguments,
    command_of,
    exit_status,
    is_text_blocks,
    path_of,
    pattern_of,
    text_of,
    url_of,
)

NAME: Final = "extractive"
VERSION: Final = "v1"
_ELLIPSIS: Final = "…"


def summarize(
    invocation: Mapping[str, Any], max_chars: int, kinds: KindTable = DEFAULT_KINDS
) -> str:
    """A summary of `invocation` (wire form) in at most `max_chars` characters."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    name = str(invocation.get("name", ""))
    args, result = invocation.get("args"), invocation.get("result")
    kind = kinds.kind(name, args)
    lead = "error from " if invocation.get("isError") else ""
    try:
        text = text_of(result)
        header, body_lines = _RULES.get(kind, _other)(name, args, result, text)
    except RecursionError:  # JSON nested beyond what Python can walk
        header, body_lines = f"{name}: a result nested too deeply to outline", []
    return _fit(f"{lead}{header}", body_lines, max_chars)


def _lines(text: str) -> list[str]:
    return text.splitlines()


def _count(text: str) -> str:
    lines = len(_lines(text))
    return f"{len(text.encode())} bytes, {lines} line{'s' if lines != 1 else ''}"


def _read(name: str, args: Any, result: Any, text: str) -> tuple[str, Iterable[str]]:
    path = path_of(args) or "?"
    lines = _lines(text)
    return f"{name} {path}: {_count(text)}", _head_tail(lines)


def _shell(name: str, args: Any, result: Any, text: str) -> tuple[str, Iterable[str]]:
    command = command_of(args) or name
    status = exit_status(result)
    known = f", exit {status}" if status is not None else ""
    lines = _lines(text)
    return f"$ {_short(_one_line(command), 160)}{known}: {_count(text)}", _tail(lines)


def _search(name: str, args: Any, result: Any, text: str) -> tuple[str, Iterable[str]]:
    pattern = pattern_of(args)
    parsed = _json(result)
    if isinstance(parsed, list):  # structured results: one item per match
        what = f" {pattern!r}" if pattern else ""
        count = f"{len(parsed)} result{'s' if len(parsed) != 1 else ''}"
        # Outlined lazily: only the items that fit the budget cost anything.
        return f"{name}{what}: {count}", (_outline(item, 1) for item in parsed)
    lines = [line for line in _lines(text) if line.strip()]
    files = sorted({m.group(1) for line in lines if (m := _FILE_HIT.match(line))})
    what = f" {pattern!r}" if pattern else ""
    where = f" in {len(files)} file{'s' if len(files) != 1 else ''}" if files else ""
    head = f"{name}{what}: {len(lines)} match{'es' if len(lines) != 1 else ''}{where}"
    shown = [f"files: {', '.join(files)}"] if files else []
    return head, [*shown, *lines]


def _edit(name: str, args: Any, result: Any, text: str) -> tuple[str, Iterable[str]]:
    found = arguments(args)
    if not found and isinstance(args, str):
        found = {"input": args}  # apply_patch style: the patch itself is the argument
    path = path_of(found) or _patched_path(found) or "?"
    added, removed = _changed(found)
    detail = f", +{added} -{removed} lines" if added or removed else ""
    return f"{name} {path}{detail}", _head_tail(_lines(text))


def _fetch(name: str, args: Any, result: Any, text: str) -> tuple[str, Iterable[str]]:
    url = url_of(args) or pattern_of(args) or "?"
    title = _title(text)
    titled = f", title {title!r}" if title else ""
    return f"{name} {url}: {len(text)} chars{titled}", _head_tail(_lines(text))


def _other(name: str, args: Any, result: Any, text: str) -> tuple[str, Iterable[str]]:
    data = _json(result)
    if isinstance(data, dict | list) and not is_text_blocks(result):
        return f"{name}: {_outline(data)}", []
    return f"{name}: {_count(text)}", _head_tail(_lines(text))


def _json(result: Any) -> Any:
    """A string result that is JSON, parsed; anything else as it is."""
    if isinstance(result, str) and result[:1] in ("{", "["):
        try:
            return json.loads(result)
        except ValueError:
            return result
    return result


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + _ELLIPSIS


_RULES: Final = {
    Kind.READ: _read,
    Kind.SHELL: _shell,
    Kind.SEARCH: _search,
    Kind.EDIT: _edit,
    Kind.WRITE: _edit,
    Kind.FETCH: _fetch,
}
_FILE_HIT: Final = re.compile(r"^([^\s:][^:]*\.[A-Za-z0-9_]+):\d+")
_HEADING: Final = re.compile(r"^#\s+(.+)$", re.MULTILINE)


def _title(text: str) -> str | None:
    head = text[:20_000]
    start = head.lower().find("<title")
    if start >= 0:  # find, not a regex, over the page: no backtracking on odd markup
        open_end = head.find(">", start)
        close = head.lower().find("</title>", open_end)
        if open_end >= 0 and close >= 0:
            return _one_line(head[open_end + 1 : close])[:120] or None
    match = _HEADING.search(head)
    if match is None:
        return None
    return _one_line(match.group(1))[:120] or None


_OLD_KEYS: Final = ("old_string", "old_str", "oldText")
_NEW_KEYS: Final = (
    "new_string",
    "new_str",
    "newText",
    "content",
    "file_text",
    "new_source",
    "code_edit",
)
_PATCH_FILE: Final = re.compile(r"^\*\*\* (?:Update|Add|Delete) File: (.+)$", re.MULTILINE)


def _changed(args: Mapping[str, Any]) -> tuple[int, int]:
    """Lines added and removed, from edit arguments: old/new strings, `edits` lists, whole
    contents, or an `apply_patch` patch (its + and - lines)."""
    patch = next((args[k] for k in ("input", "patch") if isinstance(args.get(k), str)), None)
    if patch is not None and "*** Begin Patch" in patch:
        lines = patch.splitlines()
        added = sum(1 for line in lines if line.startswith("+"))
        removed = sum(1 for line in lines if line.startswith("-"))
        return added, removed
    added = removed = 0
    edits = args.get("edits")
    for edit in edits if isinstance(edits, list) else [args]:
        if isinstance(edit, Mapping):
            old = next((edit[k] for k in _OLD_KEYS if isinstance(edit.get(k), str)), "")
            new = next((edit[k] for k in _NEW_KEYS if isinstance(edit.get(k), str)), "")
            removed += len(old.splitlines())
            added += len(new.splitlines())
    return added, removed


def _patched_path(args: Mapping[str, Any]) -> str | None:
    patch = next((args[k] for k in ("input", "patch") if isinstance(args.get(k), str)), "")
    files = _PATCH_FILE.findall(patch)
    return ", ".join(files) if files else None


def _outline(value: Any, depth: int = 0) -> str:
    if isinstance(value, Mapping):
        if depth >= 2:
            return f"{{{len(value)} keys}}"
        inner = ", ".join(f"{k}: {_outline(v, depth + 1)}" for k, v in list(value.items())[:12])
        more = f", +{len(value) - 12} keys" if len(value) > 12 else ""
        return f"{{{inner}{more}}}"
    if isinstance(value, list):
        if not value:
            return "[]"
        if depth >= 2:
            return f"[{len(value)} items]"
        return f"[{len(value)} × {_outline(value[0], depth + 1)}]"
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:30] + _ELLIPSIS + value[-8:])
    return json.dumps(value)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _head_tail(lines: list[str], head: int = 6, tail: int = 4) -> list[str]:
    if len(lines) <= head + tail:
        return lines
    return [*lines[:head], f"[… {len(lines) - head - tail} lines …]", *lines[-tail:]]


def _tail(lines: list[str], tail: int = 8) -> list[str]:
    if len(lines) <= tail:
        return lines
    return [f"[… {len(lines) - tail} lines …]", *lines[-tail:]]


def _fit(head: str, lines: Iterable[str], max_chars: int) -> str:
    """`head` then as many `lines` as fit; lines are cut short rather than dropped early."""
    if len(head) >= max_chars:
        return head[: max_chars - 1] + _ELLIPSIS if max_chars > 1 else head[:max_chars]
    out = head
    for line in lines:
        room = max_chars - len(out) - 1
        if room <= 0:
            break
        piece = line if len(line) <= room else line[: max(0, room - 1)] + _ELLIPSIS
        if len(piece) > room:
            break
        out += "\n" + piece
    return out
