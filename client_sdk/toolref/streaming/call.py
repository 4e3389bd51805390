"""A finished tool call, as the buffer delivers it, and its hand-off to the registry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from toolref.wire.canonical import Ref
from toolref.wire.errors import UnusableToolCallError
from toolref.wire.models import Invocation


class CallStatus(StrEnum):
    COMPLETE = "complete"  # arguments parsed to a JSON object; safe to run
    INVALID = "invalid"  # the call closed, but its arguments are not a JSON object
    INCOMPLETE = "incomplete"  # cut off by truncation, an error or an abort; never run it


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call of a streamed response.

    `arguments` is the parsed object for a complete call and `None` otherwise;
    `raw_arguments` is always the text that arrived, so an invalid call can be shown to the
    model (Anthropic suggests `{"INVALID_JSON": raw}`) instead of being run with `{}`.
    `meta` holds provider data the next turn needs back (Gemini's `thought_signature`,
    Responses' `item_id`), `original_id` when the id was changed to keep ids unique and
    `synthesized_id` when the provider sent none.
    """

    index: int
    id: str
    name: str
    status: CallStatus
    arguments: dict[str, Any] | None
    raw_arguments: str
    error: str | None = None
    error_type: str | None = None
    turn: int = 0
    kind: str = "function"
    provider_executed: bool = False
    parent_id: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def runnable(self) -> bool:
        """True when the client should run it: complete, and not run by the provider."""
        return self.status is CallStatus.COMPLETE and not self.provider_executed

    def invocation(self, result: Any, *, is_error: bool = False) -> Invocation:
        """This call with its result, ready for `RegistryClient.register`."""
        if self.status is not CallStatus.COMPLETE or self.arguments is None:
            raise UnusableToolCallError(
                f"tool call {self.id!r} ({self.name or 'unnamed'}) is {self.status.value}: "
                f"{self.error}; only complete calls have arguments to register. "
                "Send the model an error result for it instead",
                callId=self.id,
                status=self.status.value,
            )
        return Invocation(name=self.name, args=self.arguments, result=result, is_error=is_error)

    def ref(self, result: Any, *, is_error: bool = False) -> Ref:
        """The ref the registry will give this call with `result`, computed locally."""
        return self.invocation(result, is_error=is_error).digest().ref
