"""AWS Bedrock ConverseStream events, as boto3 yields them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolref.streaming.adapters.base import BlockAdapter, as_int
from toolref.streaming.chunk import FILTERED, TRUNCATED, ToolChunk

_STOPS = {
    "max_tokens": TRUNCATED,
    "model_context_window_exceeded": TRUNCATED,
    "guardrail_intervened": FILTERED,
    "content_filtered": FILTERED,
}


class BedrockAdapter(BlockAdapter):
    provider = "bedrock"

    def _chunks(self, event: Mapping[str, Any] | None) -> list[ToolChunk]:
        if event is None:
            return []
        if "contentBlockDelta" in event:
            body = event["contentBlockDelta"]
            tool_use = (body.get("delta") or {}).get("toolUse")
            if not tool_use:
                return []
            return self._delta(body.get("contentBlockIndex", 0), tool_use.get("input"))
        if "messageStop" in event:
            reason = event["messageStop"].get("stopReason")
            error_type = _STOPS.get(reason or "")
            out = self._release(reason, error_type) if error_type else self._release()
            error = f"stopReason {reason!r} cut the message short" if error_type else None
            return [*out, self._finish(0, reason, error, error_type)]
        if "contentBlockStart" in event:
            body = event["contentBlockStart"]
            out = self._release()
            tool_use = (body.get("start") or {}).get("toolUse")
            if tool_use:
                block = as_int(body.get("contentBlockIndex", 0), "contentBlockIndex")
                server = tool_use.get("type") == "server_tool_use"
                fields = {
                    "id": tool_use.get("toolUseId"),
                    "name": tool_use.get("name"),
                    "kind": tool_use.get("type") or "function",
                    "provider_executed": server,
                    "meta": {"block_index": block},
                }
                out.append(self._start(block, fields, tool_use.get("input")))
            return out
        if "contentBlockStop" in event:
            out = self._release()
            body = event["contentBlockStop"]
            self._stop(as_int(body.get("contentBlockIndex", 0), "contentBlockIndex"))
            return out
        for key, value in event.items():
            if key.endswith("Exception"):  # modelStreamErrorException, throttlingException...
                message = value.get("message") if isinstance(value, Mapping) else value
                return self._release() + self._fail_all(f"Bedrock sent {key}: {message}")
        self._foreign(event)  # another provider's stream: say so, not "no calls"
        return []  # messageStart, metadata, and event kinds added later
