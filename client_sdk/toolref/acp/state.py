"""The state of one ACP tool call, and its wire form."""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from toolref.acp.kind import ToolKind
from toolref.wire.canonical import canonical_json


class ToolCallStatus(StrEnum):
    PENDING = "pending"  # input still streaming, or awaiting approval
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"


FINAL = frozenset((ToolCallStatus.COMPLETED, ToolCallStatus.FAILED))  # nothing after them

# Python attribute -> ACP field name, in the order the wire shows them.
FIELDS: dict[str, str] = {
    "title": "title",
    "kind": "kind",
    "status": "status",
    "content": "content",
    "locations": "locations",
    "raw_input": "rawInput",
    "raw_output": "rawOutput",
}

ATTRIBUTES: dict[str, str] = {wire: attr for attr, wire in FIELDS.items()}


@dataclass(slots=True)
class ToolCallState:
    """What the client shows for one tool call. `raw_input` / `raw_output` of `None` mean
    "never set": ACP v1 has no way to clear them once sent."""

    id: str
    title: str
    kind: ToolKind = ToolKind.OTHER
    status: ToolCallStatus = ToolCallStatus.PENDING
    content: list[dict[str, Any]] = field(default_factory=list)
    locations: list[dict[str, Any]] = field(default_factory=list)
    raw_input: Any = None
    raw_output: Any = None

    def fields(self) -> dict[str, Any]:
        """Every field with a value, by its ACP name (no `null`s: v1 reads them as no change)."""
        out: dict[str, Any] = {}
        for attr, wire in FIELDS.items():
            value = getattr(self, attr)
            if isinstance(value, StrEnum):
                out[wire] = value.value
            elif value is not None:
                out[wire] = copy.deepcopy(value) if isinstance(value, list | dict) else value
        return out

    def field(self, wire: str) -> Any:
        """One field by its ACP name, as `fields()` gives it (`None`: never set)."""
        value = getattr(self, ATTRIBUTES[wire])
        if isinstance(value, StrEnum):
            return value.value
        return copy.deepcopy(value) if isinstance(value, list | dict) else value

    def copy(self) -> ToolCallState:
        return copy.deepcopy(self)


def digest(value: Any) -> bytes:
    """What a field's value is compared by: a hash of its canonical JSON (an edit inside
    one content item counts), linear in its JSON."""
    return hashlib.blake2b(canonical_json(value), digest_size=16).digest()
