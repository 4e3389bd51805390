"""The handoff block: markdown between `[CONTEXT FROM PREVIOUS SESSION]` markers.

Each result is cut head and tail to `per_result_chars` with an explicit
`[... N characters omitted ...]` line. The whole block fits `max_chars`: when something must
give, files read or changed (by a file tool, or a shell command that reads or writes one:
`cat F`, `sed -n '1,9p' F`, `cat > F`) are placed before other command output and results, the most
recent first in each, older ones get a shorter cut, and the oldest are left out (the block
says how many).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Final

from toolref.handoff.blocks import ToolBlock
from toolref.handoff.commands import touches_files
from toolref.handoff.dedup import Kept
from toolref.kit.kinds import Kind
from toolref.kit.payload import arguments, exit_status

OPEN: Final = "[CONTEXT FROM PREVIOUS SESSION]"
CLOSE: Final = "[/CONTEXT FROM PREVIOUS SESSION]"
INTRO: Final = (
    "This conversation continues from another model. The tool results below are verbatim "
    "(repeats removed, long outputs cut where marked): rely on them, not on memory, for "
    "what files contain and what commands printed."
)
_SECTIONS: Final = (
    ("Files Read", (Kind.READ,)),
    ("Files Modified", (Kind.EDIT, Kind.WRITE, Kind.DELETE, Kind.MOVE)),
    ("Commands Run", (Kind.SHELL,)),
    ("Other Tool Results", None),
)
FILE_KINDS: Final = frozenset({Kind.READ, Kind.EDIT, Kind.WRITE, Kind.DELETE, Kind.MOVE})
_MIN_CUT: Final = 200


@dataclass
class Rendered:
    text: str
    kept: int = 0
    omitted_chars: int = 0
    left_out: int = 0
    sections: dict[str, int] = field(default_factory=dict)


def cut(text: str, limit: int) -> tuple[str, int]:
    """`text` cut to about `limit` characters, head and tail, and how many were left out."""
    if len(text) <= limit:
        return text, 0
    head = limit * 2 // 3
    tail = limit - head
    omitted = len(text) - head - tail
    return (
        f"{text[:head]}\n[... {omitted} characters omitted ...]\n{text[-tail:] if tail else ''}",
        omitted,
    )


def _fence(text: str) -> str:
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=2)
    ticks = "`" * (longest + 1)
    return f"{ticks}\n{text}\n{ticks}"


def _compact(args: Any, limit: int = 200) -> str:
    text = (
        args
        if isinstance(args, str)
        else json.dumps(args, ensure_ascii=False, separators=(",", ":"))
    )
    return _one_line(text, limit)  # one line: headings and list items must not break


_DONE: Final = {"completed": "x", "in_progress": "~", "cancelled": "-"}


def _todo_list(block: ToolBlock) -> str | None:
    """A todo tool's list, from its arguments (its result only says it was saved)."""
    if block.kind is not Kind.TODO:
        return None
    todos = arguments(block.args).get("todos")
    if not isinstance(todos, list):
        return None
    lines = [
        f"- [{_DONE.get(str(t.get('status')), ' ')}] {t.get('content')}"
        for t in todos
        if isinstance(t, dict) and isinstance(t.get("content"), str)
    ]
    return "\n".join(lines) or None


def _title(kept: Kept) -> str:
    block = kept.block
    if block.kind is Kind.READ:
        span = "whole file" if block.lines is None else _span(block)
        title = f"{block.path or block.name} ({span})"
    elif block.kind in (Kind.EDIT, Kind.WRITE, Kind.DELETE, Kind.MOVE):
        title = f"{block.name} {block.path or _compact(block.args, 120)}"
    elif block.kind is Kind.SHELL:
        status = exit_status(block.result) if block.result is not None else None
        known = f" (exit {status})" if status is not None else ""
        title = f"$ {_one_line(block.command or _compact(block.args), 300)}{known}"
    elif block.kind is Kind.TODO and _todo_list(block):
        title = f"{block.name} (the plan at that point)"
    else:
        title = f"{block.name} {_compact(block.args, 200)}"
    if block.is_error:
        title += " [error]"
    if kept.stale:
        title += " [read before a later edit of this file: may be out of date]"
    return title


def _span(block: ToolBlock) -> str:
    start, end = block.lines or (1, None)
    return f"lines {start}-{end}" if end is not None else f"lines {start}-end"


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _entry(kept: Kept, limit: int) -> tuple[str, int]:
    result = _todo_list(kept.block) or kept.block.result or ""
    body, omitted = cut(result, limit)
    shown = _fence(body) if body else "(empty)"
    return f"### {_title(kept)}\n{shown}\n", omitted


def render(
    kept: list[Kept], summary: str | None, max_chars: int, per_result_chars: int
) -> Rendered:
    done = [k for k in kept if not k.block.interrupted]
    interrupted = [k for k in kept if k.block.interrupted]
    intro = [OPEN, INTRO, ""]
    if summary:
        text, _ = cut(summary.strip(), max(_MIN_CUT, max_chars // 4))
        intro += ["## Conversation summary", text, ""]
    budget = max_chars - len("\n".join(intro)) - len(CLOSE) - 200
    stops = _interrupted_lines(interrupted, budget // 4)
    budget -= len("\n".join(stops)) + 1
    chosen: dict[int, tuple[str, int]] = {}
    # Files read or changed first (what the next model must not quote from memory), then
    # everything else. In each, most recent first: they get their full cut while the
    # budget lasts; once one does not fit even cut short, everything older is left out.
    for first in (True, False):
        for index in range(len(done) - 1, -1, -1):
            if _about_files(done[index].block) is not first:
                continue
            entry = _fitting(done[index], per_result_chars, budget - 40)  # 40: a heading
            if entry is None:
                break
            chosen[index] = entry
            budget -= len(entry[0]) + 1
    left_out = len(done) - len(chosen)
    rendered = Rendered("", kept=len(chosen) + len(interrupted), left_out=left_out)
    body: list[str] = []
    for heading, kinds in _SECTIONS:
        entries = [
            chosen[i]
            for i, k in enumerate(done)
            if i in chosen
            and (k.block.kind in kinds if kinds is not None else _other(k.block.kind))
        ]
        if entries:
            rendered.sections[heading] = len(entries)
            body += [f"## {heading}", *(text for text, _ in entries)]
            rendered.omitted_chars += sum(omitted for _, omitted in entries)
    if left_out:
        body.append(f"({left_out} older tool result(s) left out to fit the size limit.)\n")
    rendered.text = "\n".join([*intro, *body, *stops, CLOSE])
    return rendered


def _about_files(block: ToolBlock) -> bool:
    """A file read or changed, by a file tool or a shell command (`cat`, `sed -n`, `>`)."""
    if block.kind in FILE_KINDS:
        return True
    return block.kind is Kind.SHELL and block.command is not None and touches_files(block.command)


def _fitting(kept: Kept, per_result_chars: int, room: int) -> tuple[str, int] | None:
    for limit in (per_result_chars, max(_MIN_CUT, per_result_chars // 4), _MIN_CUT):
        text, omitted = _entry(kept, limit)
        if len(text) <= room:
            return text, omitted
    return None


def _interrupted_lines(interrupted: list[Kept], room: int) -> list[str]:
    """The interrupted calls, most recent kept when they do not all fit in `room`."""
    if not interrupted:
        return []
    lines = [
        f"- {k.block.name} {_compact(k.block.args, 120)}: no result (interrupted)"
        for k in interrupted
    ]
    shown: list[str] = []
    used = len("## Interrupted Tool Calls") + 40
    for line in reversed(lines):
        if used + len(line) + 1 > room:
            break
        shown.insert(0, line)
        used += len(line) + 1
    missing = len(lines) - len(shown)
    more = [f"- ({missing} older interrupted call(s) not listed)"] if missing else []
    return ["## Interrupted Tool Calls", *more, *shown, ""]


def _other(kind: Kind) -> bool:
    return not any(kind in kinds for _, kinds in _SECTIONS if kinds is not None)
