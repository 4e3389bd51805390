"""Which tool blocks a handoff carries: the latest of each thing, every side effect.

- Reads: by path and line range; a read is dropped when later reads of the same path cover
  its lines (a whole-file read covers all), found in O(log n) per read over the merged
  ranges read later. A read followed by an edit or write of the same
  file is kept but marked as older than the edit.
- Shell commands: by exact command, the last run wins, except commands with side effects,
  which are all kept, in order. Only a command that repeats is classified, once; past
  `CLASSIFIED_CHARS` of classified text (or over `commands.MAX_COMMAND_CHARS` in one) a
  command counts as having side effects, so it is kept: the work is bounded whatever the
  input.
- Edits and writes: by path, the last wins.
- Everything else is kept, and so are errors and calls that never got a result.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Final

from toolref.handoff.blocks import LineRange, ToolBlock
from toolref.handoff.commands import has_side_effects
from toolref.kit.kinds import Kind

CLASSIFIED_CHARS: Final = 1 << 21  # shell text classified per handoff, at most


@dataclass(frozen=True, slots=True)
class Kept:
    block: ToolBlock
    stale: bool = False  # a read of a file edited or written after it


_END: Final = float("inf")


def _bounds(lines: LineRange | None) -> tuple[float, float]:
    if lines is None:
        return 1, _END
    return lines[0], _END if lines[1] is None else lines[1]


class Coverage:
    """The lines of one file that later reads showed: sorted, disjoint, merged ranges
    (adjacent ones joined, lines being whole numbers). `covers` is a binary search; `add`
    merges, each range merged away once, so n reads cost O(n log n) comparisons (plus the
    list's own memmove on insert)."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def covers(self, lines: LineRange | None) -> bool:
        first, last = _bounds(lines)
        at = bisect.bisect_right(self.starts, first) - 1
        return at >= 0 and self.ends[at] >= last

    def add(self, lines: LineRange | None) -> None:
        first, last = _bounds(lines)
        low = bisect.bisect_left(self.ends, first - 1)  # first range that touches or follows
        high = bisect.bisect_right(self.starts, last + 1)  # past the last range that touches
        if low < high:
            first = min(first, self.starts[low])
            last = max(last, self.ends[high - 1])
        self.starts[low:high] = [first]
        self.ends[low:high] = [last]


def deduplicate(blocks: list[ToolBlock]) -> tuple[list[Kept], int]:
    """The blocks to carry, in conversation order, and how many were dropped as duplicates."""
    later_reads: dict[str, Coverage] = {}
    later_commands: dict[str, bool | None] = {}  # command -> side effects (None: not asked)
    budget = CLASSIFIED_CHARS
    later_changes: set[str] = set()
    kept: list[Kept] = []
    dropped = 0
    for block in reversed(blocks):
        if block.is_error or block.interrupted:
            kept.append(Kept(block))
            continue
        if block.kind is Kind.READ and block.path is not None:
            reads = later_reads.setdefault(block.path, Coverage())
            if reads.covers(block.lines):
                dropped += 1
                continue
            reads.add(block.lines)
            kept.append(Kept(block, stale=block.path in later_changes))
        elif block.kind is Kind.SHELL and block.command is not None:
            command = block.command
            if command not in later_commands:
                later_commands[command] = None  # the last run: kept whatever it does
                kept.append(Kept(block))
                continue
            effects = later_commands[command]
            if effects is None:
                budget -= len(command)
                effects = budget < 0 or has_side_effects(command)
                later_commands[command] = effects
            if effects:
                kept.append(Kept(block))
            else:
                dropped += 1
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
