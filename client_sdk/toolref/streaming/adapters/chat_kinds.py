"""The two kinds of an OpenAI Chat tool call (`toolref.streaming.adapters.openai_chat`): a
function's (`function: {name, arguments}`, JSON text) and a custom (freeform) tool's
(`type: "custom"`, `custom: {name, input}`, text as is: `ToolBuffer` gives
`{"input": text}`, as for the Responses adapter's `custom_tool_call`). O(1) a fragment.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from toolref.wire.errors import ChunkSequenceError

CUSTOM: Final = "custom"  # the kind of a freeform tool's call
FUNCTION: Final = "function"


def spec(fragment: Mapping[str, Any]) -> tuple[str | None, Mapping[str, Any], str]:
    """A fragment's kind (`CUSTOM`, `FUNCTION`, None: it does not say), what holds its
    name and its text (`custom` or `function`), and the member of its text."""
    typed = fragment.get("type")
    custom = fragment.get(CUSTOM)
    function = fragment.get(FUNCTION) or {}
    if isinstance(custom, Mapping) or typed == CUSTOM:
        if function or typed == FUNCTION:
            raise ChunkSequenceError(
                f"the tool call fragment at index {fragment.get('index')!r} (type {typed!r}) "
                "is both a custom call and a function call; a call streams `custom` "
                "(freeform tools) or `function`, not both"
            )
        return CUSTOM, custom if isinstance(custom, Mapping) else {}, "input"
    return (FUNCTION if function or typed == FUNCTION else None), function, "arguments"


def settled(index: int, before: str | None, streamed: bool, kind: str | None) -> str | None:
    """A call's kind once a fragment of `kind` came (`before`: the call's so far;
    `streamed`: it has text); refused when the call streams the other kind."""
    if kind is None or kind == before:
        return before
    if before is not None or (kind == CUSTOM and streamed):
        had = "a custom input" if before == CUSTOM else "function arguments"
        raise ChunkSequenceError(
            f"call {index} streamed {had} and now a {kind} fragment; a call streams "
            "`custom` (freeform tools) or `function`, not both"
        )
    return kind


def cut_off(kind: str | None, shown: str) -> str:
    """What a call the stream ended in (no finish_reason, no [DONE]) is told."""
    if kind == CUSTOM:
        return (
            "the stream ended with no finish_reason or [DONE] while this custom tool's "
            f"freeform input streamed ({shown}): whether it is whole cannot be told from "
            "text; retry the request"
        )
    return (
        "the stream ended with no finish_reason or [DONE] while these arguments were "
        f"not yet a whole JSON object ({shown}): they were cut off; retry the request"
    )
