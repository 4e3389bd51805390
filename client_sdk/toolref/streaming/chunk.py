"""The provider-neutral fragment every adapter emits and `ToolBuffer` consumes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PathPart = str | int


@dataclass(slots=True, frozen=True)
class ArgPatch:
    """Set one leaf of an arguments object: `path` from the root, e.g. `("items", 0, "name")`.

    `append` concatenates a string to the string already at `path` (Vertex streams long
    strings as several `stringValue`s for one `jsonPath`).
    """

    path: tuple[PathPart, ...]
    value: Any
    append: bool = False


# Not frozen: a chunk is built for every streamed event and a frozen dataclass costs 5x
# to construct. Treat chunks as immutable all the same.
@dataclass(slots=True, kw_only=True)
class ToolChunk:
    """One normalized piece of a streamed tool call, or of the turn that holds the calls.

    Routing: `turn` (choice or candidate index) and `index` (the call's position key within
    the turn; `None` addresses the whole turn). Content: `id` and `name` as the provider
    sent them, `args_delta` (text appended), `args_snapshot` (text or object replacing
    everything so far: whole calls, cumulative resends, authoritative final payloads) and
    `args_patch` (leaf updates to an object). Lifecycle: `done` closes the call (or, with
    `index=None`, every call still open in the turn); `error` with `error_type` closes
    them as incomplete. `meta` is merged into the call's provider metadata.
    """

    index: int | None = None
    turn: int = 0
    id: str | None = None
    name: str | None = None
    args_delta: str | None = None
    args_snapshot: str | Mapping[str, Any] | None = None
    args_patch: tuple[ArgPatch, ...] | None = None
    kind: str | None = None
    provider_executed: bool | None = None
    done: bool = False
    error: str | None = None
    error_type: str | None = None
    finish_reason: str | None = None
    meta: Mapping[str, Any] | None = None
    timestamp: float | None = None
    parent_id: str | None = None


# error_type values the adapters use for turn-level failures.
TRUNCATED = "truncated"  # the model ran out of tokens; open calls are cut short
ABORTED = "aborted"  # the stream ended or failed before its terminal event
MALFORMED = "malformed"  # the provider itself reports an unusable call
FILTERED = "filtered"  # a content filter stopped the response
