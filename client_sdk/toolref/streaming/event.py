"""What `ToolBuffer.feed` reports while a response streams."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolref.streaming.call import ToolCall
from toolref.streaming.partial import partial_arguments


@dataclass(frozen=True, slots=True)
class CallStarted:
    """A call opened. `id` and `name` are what the provider has sent so far (maybe nothing)."""

    turn: int
    index: int
    id: str | None
    name: str | None


@dataclass(slots=True, eq=False)
class ArgumentsProgress:
    """Arguments grew. Emitted at most once per call per throttle interval; `text` and
    `value` are computed only when read, so unread events cost nothing."""

    turn: int
    index: int
    id: str | None
    name: str | None
    _parts: list[str] = field(repr=False)
    _count: int = field(repr=False)
    _object: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def text(self) -> str:
        """The argument text received up to this event."""
        return "".join(self._parts[: self._count])

    @property
    def value(self) -> dict[str, Any] | None:
        """A best-effort object for display (`partial_arguments`); never run a call on it."""
        if self._object is not None:
            return self._object
        return partial_arguments(self.text)


@dataclass(frozen=True, slots=True)
class CallCompleted:
    """A call closed with arguments that parse to a JSON object."""

    call: ToolCall


@dataclass(frozen=True, slots=True)
class CallFailed:
    """A call closed invalid or incomplete; `call.error` says why."""

    call: ToolCall


ToolEvent = CallStarted | ArgumentsProgress | CallCompleted | CallFailed
