"""ACP `ToolKind` from a tool's name, through the shared kind table."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final

from toolref.kit.kinds import DEFAULT_KINDS, Kind, KindTable


class ToolKind(StrEnum):
    """The ten kinds ACP v1 knows; clients pick icons and follow-along behaviour by them."""

    READ = "read"
    EDIT = "edit"
    DELETE = "delete"
    MOVE = "move"
    SEARCH = "search"
    EXECUTE = "execute"
    THINK = "think"
    FETCH = "fetch"
    SWITCH_MODE = "switch_mode"
    OTHER = "other"


# ACP has no separate write, shell or todo kinds.
FROM_KIND: Final[Mapping[Kind, ToolKind]] = {
    Kind.READ: ToolKind.READ,
    Kind.EDIT: ToolKind.EDIT,
    Kind.WRITE: ToolKind.EDIT,
    Kind.DELETE: ToolKind.DELETE,
    Kind.MOVE: ToolKind.MOVE,
    Kind.SEARCH: ToolKind.SEARCH,
    Kind.SHELL: ToolKind.EXECUTE,
    Kind.FETCH: ToolKind.FETCH,
    Kind.THINK: ToolKind.THINK,
    Kind.TODO: ToolKind.THINK,
    Kind.SWITCH_MODE: ToolKind.SWITCH_MODE,
    Kind.OTHER: ToolKind.OTHER,
}


def tool_kind(
    name: str,
    args: Any = None,
    *,
    table: KindTable = DEFAULT_KINDS,
    overrides: Mapping[str, ToolKind | str] | None = None,
) -> ToolKind:
    """The ACP kind of tool `name`: `overrides` (exact names) first, then the kind table
    (`TOOLREF_TOOL_KINDS`-style overrides go in `table`), mapped onto ACP's ten kinds."""
    if overrides and name in overrides:
        return ToolKind(overrides[name])
    return FROM_KIND[table.kind(name, args)]
