"""What a finished call takes: a repeat of what it shows, and nothing else."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from enum import StrEnum
from typing import Any

from toolref.acp.builder import Change
from toolref.acp.state import ATTRIBUTES, FIELDS, ToolCallState, digest
from toolref.wire.errors import AcpError

_COLLECTIONS = frozenset(("content", "locations"))


def refuse_after_finish(finished: ToolCallState, changes: Iterable[Change]) -> list[Any]:
    """Nothing (no notification) for a repeat of what a finished call shows; `AcpError`
    for a change. Builder changes cost the fields they name (read and hashed, never copied
    deep): they replace a field or extend a list, and that list is a fresh one here."""
    changes = list(changes)
    named = {getattr(change, "field", None) for change in changes}
    names = {name for name in named if isinstance(name, str) and name in ATTRIBUTES}
    if len(names) == len(named):
        state = dataclasses.replace(finished)  # shares the values: O(1)
        for name in names & _COLLECTIONS:
            attr = ATTRIBUTES[name]
            setattr(state, attr, list(getattr(finished, attr)))
    else:  # a change of another kind may touch anything
        state, names = finished.copy(), set(ATTRIBUTES)
    for change in changes:
        change(state)
    changed = [
        name for name in FIELDS.values() if name in names and _differs(finished, state, name)
    ]
    if not changed:
        return []
    raise AcpError(
        f"tool call {finished.id!r} is already {finished.status.value}, and this update "
        f"changes its {', '.join(changed)}: ACP v1 has no status after completed or "
        "failed, and clients show the call as done; put everything in the update that "
        "finishes it, or start a call with a new id",
        toolCallId=finished.id,
    )


def _differs(before: ToolCallState, after: ToolCallState, name: str) -> bool:
    """Whether one field's value differs: by identity first, else by digest (a read)."""
    old, new = (getattr(state, ATTRIBUTES[name]) for state in (before, after))
    if old is new:
        return False
    old, new = (v.value if isinstance(v, StrEnum) else v for v in (old, new))
    return digest(old) != digest(new)
