"""ACP `ToolKind` from a tool's name, through the shared kind table."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final

from toolref.kit.kinds import DEFAULT_KINDS, Kind, KindTable
from toolref.wire.errors import AcpError


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


def _valid() -> str:
    return ", ".join(k.value for k in ToolKind)


def as_kind(value: ToolKind | str) -> ToolKind:
    """`value` as a `ToolKind`; `AcpError` listing ACP v1's kinds when it is none of them."""
    try:
        return ToolKind(value)
    except (ValueError, TypeError):
        raise AcpError(f"tool kind {value!r} is not one of ACP v1's: {_valid()}") from None


def _mapped(where: str, value: ToolKind | str) -> ToolKind:
    try:
        return ToolKind(value)
    except (ValueError, TypeError):
        raise AcpError(
            f"{where} is {value!r}, not one of ACP v1's tool kinds: {_valid()}; map the tool "
            "to one of those (a shell tool is 'execute', a write tool 'edit')"
        ) from None


def checked_kinds(kinds: Mapping[str, ToolKind | str]) -> dict[str, ToolKind]:
    """A copy of a `kinds` option (tool name -> kind), each kind checked where the option is
    given, not at the tool's first call: `AcpError` naming the entry and ACP v1's kinds."""
    if not isinstance(kinds, Mapping):
        raise AcpError(
            f"kinds is a {type(kinds).__name__}: give a mapping of tool name to kind, such as "
            '{"my_tool": "fetch"}'
        )
    checked: dict[str, ToolKind] = {}
    for name, kind in kinds.items():
        if not isinstance(name, str):
            raise AcpError(f"kinds has the tool name {name!r}: tool names are strings")
        checked[name] = _mapped(f"kinds[{name!r}]", kind)
    return checked


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
        return _mapped(f"overrides[{name!r}]", overrides[name])
    return FROM_KIND[table.kind(name, args)]
