"""Anthropic Messages stream events (also through Bedrock InvokeModel and Vertex).

`message_start` carries a message snapshot whose `content` is normally empty; gateways that
replay a finished message put whole blocks there, and may stream the same blocks again.
Tool blocks found there are calls, closed at the end of the message unless the same block
(same position or id) streams again, in which case the streamed block is that call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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
    # `messages.stream()` also yields text, input_json, citation, thinking and signature
    # events derived from these, each holding the state so far.
    wire_types = frozenset(
        (
            "message_start",
            "message_delta",
            "message_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "ping",
            "error",
        )
    )

    def __init__(self) -> None:
        super().__init__()
        self._parent: str | None = None
        self._reason: str | None = None
        self._whole: dict[int, str | None] = {}  # call -> block id, of blocks message_start
        self._whole_ids: dict[str, int] = {}  # carried whole; by id, to spot a re-stream
        self._last_whole: int | None = None  # such a call that ended the content, if any

    def _chunks(self, event: Mapping[str, Any] | None) -> list[ToolChunk]:
        if event is None:
            return []
        kind = event.get("type")
        if kind == "content_block_delta":  # the hot path: keep it lean
            delta = event.get("delta")
            if not delta or delta.get("type") != "input_json_delta":
                return []
            return self._delta(event.get("index", 0), delta.get("partial_json"))
        if kind == "content_block_start":
            self._last_whole = None  # a block streamed after them: they were not last
            return self._release() + self._block_start(event)
        if kind == "content_block_stop":
            out = self._release()
            index = self._blocks.get(as_int(event.get("index", 0), "content block index"))
            if index is not None:
                self._discard_whole(index)
                self._held = index
            return out
        if kind == "message_delta":
            self._reason = (event.get("delta") or {}).get("stop_reason") or self._reason
            return self._message_end()
        if kind == "message_stop":
            error_type = _STOPS.get(self._reason or "")
            error = f"stop reason {self._reason!r} cut the message short" if error_type else None
            return [*self._message_end(), self._finish(0, self._reason, error, error_type)]
        if kind == "message_start":
            message = event.get("message") or {}
            self._parent = message.get("id") or self._parent
            self._reason = message.get("stop_reason") or self._reason
            return self._release() + self._whole_blocks(message.get("content") or ())
        if kind == "error":
            problem = event.get("error") or {}
            detail = ": ".join(str(problem[k]) for k in ("type", "message") if problem.get(k))
            failed = self._fail_all(f"the stream reported an error: {detail or 'no details'}")
            return [*self._release(), *self._close_whole(None), *failed]
        self._foreign(event)  # another provider's stream: say so, not "no calls"
        return []  # ping, and event types added after this adapter was written

    def end(self) -> list[ToolChunk]:
        return self._close_whole(None) + super().end()

    def _message_end(self) -> list[ToolChunk]:
        """Close what the message generated: a truncating stop reason cuts the last block."""
        stopped = _STOPS.get(self._reason or "")
        held = self._release(self._reason, stopped) if stopped else self._release()
        return self._close_whole(stopped) + held

    def _fields(self, block: Mapping[str, Any], position: int) -> dict[str, Any]:
        block_type = block["type"]
        meta: dict[str, Any] = {"block_index": position}
        meta.update((k, block[k]) for k in _META_FIELDS if block.get(k) is not None)
        return {
            "id": block.get("id"),
            "name": block.get("name"),
            "kind": block_type,
            "provider_executed": _TOOL_BLOCKS[block_type],
            "meta": meta,
            "parent_id": self._parent,
        }

    def _block_start(self, event: Mapping[str, Any]) -> list[ToolChunk]:
        block = event.get("content_block") or {}
        if block.get("type", "") not in _TOOL_BLOCKS:
            return []
        position = as_int(event.get("index", 0), "content block index")
        index = self._restreamed(position, block.get("id"))
        if index is not None:
            self._blocks[position] = index
            self._discard_whole(index)
            if block.get("input"):
                self._started_with[index] = block["input"]
            return []
        return [self._start(position, self._fields(block, position), block.get("input"))]

    def _restreamed(self, position: int, block_id: Any) -> int | None:
        """The call a streamed block repeats: a whole block at its position (unless the ids
        differ) or with its id."""
        index = self._blocks.get(position)
        if index is not None and index in self._whole:
            held_id = self._whole[index]
            if not block_id or not held_id or block_id == held_id:
                return index
        index = self._whole_ids.get(block_id) if isinstance(block_id, str) else None
        return index if index in self._whole else None

    def _whole_blocks(self, content: Iterable[Any]) -> list[ToolChunk]:
        out: list[ToolChunk] = []
        last: int | None = None
        for position, block in enumerate(content):
            last = None
            known = position in self._blocks  # a repeated message_start
            if not isinstance(block, Mapping) or block.get("type") not in _TOOL_BLOCKS or known:
                continue
            out.append(self._start(position, self._fields(block, position), block.get("input")))
            last = self._blocks[position]
            block_id = block.get("id") if isinstance(block.get("id"), str) else None
            self._whole[last] = block_id
            if block_id:
                self._whole_ids[block_id] = last
        self._last_whole = last if out else self._last_whole
        return out

    def _discard_whole(self, index: int) -> None:
        self._whole.pop(index, None)

    def _close_whole(self, stopped: str | None) -> list[ToolChunk]:
        out = [
            self._cut(index, self._reason or "", stopped)
            if stopped and index == self._last_whole
            else self._closed(index)
            for index in self._whole
        ]
        self._whole.clear()
        return out
