"""Anthropic Messages stream events (also through Bedrock InvokeModel and Vertex)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolref.streaming.adapters.base import BlockAdapter, as_int
from toolref.streaming.chunk import FILTERED, TRUNCATED, ToolChunk

_TOOL_BLOCKS = {"tool_use": False, "server_tool_use": True, "mcp_tool_use": True}
_META_FIELDS = ("caller", "server_name", "toolset_name")
_STOPS = {
    "max_tokens": TRUNCATED,
    "model_context_window_exceeded": TRUNCATED,
    "refusal": FILTERED,
}


class AnthropicAdapter(BlockAdapter):
    provider = "anthropic"

    def __init__(self) -> None:
        super().__init__()
        self._parent: str | None = None
        self._reason: str | None = None

    def _chunks(self, event: Mapping[str, Any] | None) -> list[ToolChunk]:
        if event is None:
            return []
        kind = event.get("type")
        if kind == "content_block_delta":  # the hot path: keep it lean
            delta = event.get("delta")
            if not delta or delta.get("type") != "input_json_delta":
                return []
            return self._delta(event.get("index", 0), delta.get("partial_json"))
        if kind == "ping":
            return []
        if kind == "message_delta":
            self._reason = (event.get("delta") or {}).get("stop_reason") or self._reason
            stopped = _STOPS.get(self._reason or "")
            return self._release(self._reason, stopped) if stopped else self._release()
        out = self._release()
        if kind == "content_block_start":
            out += self._block_start(event)
        elif kind == "content_block_stop":
            self._stop(as_int(event.get("index", 0), "content block index"))
        elif kind == "message_start":
            self._parent = (event.get("message") or {}).get("id")
        elif kind == "message_stop":
            error_type = _STOPS.get(self._reason or "")
            error = f"stop reason {self._reason!r} cut the message short" if error_type else None
            out.append(self._finish(0, self._reason, error, error_type))
        elif kind == "error":
            problem = event.get("error") or {}
            detail = ": ".join(str(problem[k]) for k in ("type", "message") if problem.get(k))
            out += self._fail_all(f"the stream reported an error: {detail or 'no details'}")
        return out

    def _block_start(self, event: Mapping[str, Any]) -> list[ToolChunk]:
        block = event.get("content_block") or {}
        block_type = block.get("type", "")
        if block_type not in _TOOL_BLOCKS:
            return []
        position = as_int(event.get("index", 0), "content block index")
        meta: dict[str, Any] = {"block_index": position}
        meta.update((k, block[k]) for k in _META_FIELDS if block.get(k) is not None)
        fields = {
            "id": block.get("id"),
            "name": block.get("name"),
            "kind": block_type,
            "provider_executed": _TOOL_BLOCKS[block_type],
            "meta": meta,
            "parent_id": self._parent,
        }
        return [self._start(position, fields, block.get("input"))]
