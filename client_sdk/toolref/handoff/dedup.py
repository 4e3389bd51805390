"""Which tool blocks a handoff carries: the latest of each thing, every side effect.

- Reads: by path and line range; a read is dropped when a later read of the same path covers
  its lines (a whole-file read covers all). A read followed by an edit or write of the same
  file is kept but marked as older than the edit.
- Shell commands: by exact command, the last run wins, except commands with side effects,
  which are all kept, in order.
- Edits and writes: by path, the last wins.
- Everything else is kept, and so are errors and calls that never got a result.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolref.handoff.blocks import LineRange, ToolBlock, covers
from toolref.handoff.commands import has_side_effects
from toolref.kinds import Kind


@dataclass(frozen=True, slots=True)
class Kept:
    block: ToolBlock
    stale: bool = False  # a read of a file edited or written after it


def deduplicate(blocks: list[ToolBlock]) -> tuple[list[Kept], int]:
    """The blocks to carry, in conversation order, and how many were dropped as duplicates."""
    later_reads: dict[str, list[LineRange | None]] = {}
    later_commands: set[str] = set()
    later_changes: set[str] = set()
    kept: list[Kept] = []
    dropped = 0
    for block in reversed(blocks):
        if block.is_error or block.interrupted:
            kept.append(Kept(block))
            continue
        if block.kind is Kind.READ and block.path is not None:
            reads = later_reads.setdefault(block.path, [])
            if any(covers(later, block.lines) for later in reads):
                dropped += 1
                continue
            reads.append(block.lines)
            kept.append(Kept(block, stale=block.path in later_changes))
        elif block.kind is Kind.SHELL and block.command is not None:
            if has_side_effects(block.command):
                kept.append(Kept(block))
            elif block.command in later_commands:
                dropped += 1
            else:
                later_commands.add(block.command)
                kept.append(Kept(block))
        elif block.kind in (Kind.EDIT, Kind.WRITE) and block.path is not None:
            if block.path in later_changes:
                dropped += 1
            else:
                later_changes.add(block.path)
                kept.append(Kept(block))
        else:
            kept.append(Kept(block))
    kept.reverse()
    return kept, dropped
