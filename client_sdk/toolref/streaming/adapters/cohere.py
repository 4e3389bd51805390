"""Cohere v2 chat stream events (`tool-call-start`, `-delta`, `-end`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolref.streaming.adapters.base import StreamAdapter, as_int
from toolref.streaming.chunk import ABORTED, TRUNCATED, ToolChunk

_STOPS = {"MAX_TOKENS": TRUNCATED, "ERROR": ABORTED, "TIMEOUT": ABORTED}


def _tool_call(event: Mapping[str, Any]) -> Mapping[str, Any]:
    calls = ((event.get("delta") or {}).get("message") or {}).get("tool_calls") or {}
    if isinstance(calls, list):  # the SDK types say one object; some clients send a list
        return calls[0] if calls else {}
    return calls


class CohereAdapter(StreamAdapter):
    provider = "cohere"

    def __init__(self) -> None:
        super().__init__()
        self._index: dict[int, int] = {}
        self._parent: str | None = None

    def _chunks(self, event: Mapping[str, Any] | None) -> list[ToolChunk]:
        if event is None:
            return []
        kind = event.get("type")
        if kind == "tool-call-delta":
            index = self._index.get(as_int(event.get("index", 0), "index"))
            function = _tool_call(event).get("function") or {}
            text = function.get("arguments")
            return [ToolChunk(index=index, args_delta=text)] if text and index is not None else []
        if kind == "tool-call-start":
            position = as_int(event.get("index", 0), "index")
            index = self._index[position] = len(self._index)
            self._turns.add(0)
            call = _tool_call(event)
            function = call.get("function") or {}
            return [
                ToolChunk(
                    index=index,
                    id=call.get("id"),
                    name=function.get("name"),
                    args_delta=function.get("arguments") or None,
                    parent_id=self._parent,
                )
            ]
        if kind == "tool-call-end":
            index = self._index.get(as_int(event.get("index", 0), "index"))
            return [] if index is None else [ToolChunk(index=index, done=True)]
        if kind == "message-start":
            self._parent = event.get("id")
            return []
        if kind == "message-end":
            delta = event.get("delta") or {}
            reason = delta.get("finish_reason")
            error_type = _STOPS.get(reason or "")
            detail = delta.get("error")
            error = f"finish_reason {reason!r}" + (f": {detail}" if detail else "")
            return [self._finish(0, reason, error if error_type else None, error_type)]
        self._foreign(event)  # another provider's stream: say so, not "no calls"
        return []
