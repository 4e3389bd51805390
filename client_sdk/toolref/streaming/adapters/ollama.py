"""Ollama's native `/api/chat` NDJSON lines: every tool call arrives whole, arguments as
an object. (Ollama's `/v1` endpoint speaks OpenAI Chat: use `OpenAIChatAdapter`.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolref.streaming.adapters.base import StreamAdapter
from toolref.streaming.chunk import TRUNCATED, ToolChunk


class OllamaAdapter(StreamAdapter):
    provider = "ollama"

    def __init__(self) -> None:
        super().__init__()
        self._count = 0

    def _chunks(self, event: Mapping[str, Any] | None) -> list[ToolChunk]:
        if event is None:
            return []
        if event.get("error"):
            return self._fail_all(f"Ollama sent an error: {event['error']}")
        out: list[ToolChunk] = []
        for call in (event.get("message") or {}).get("tool_calls") or ():
            function = call.get("function") or {}
            arguments = function.get("arguments")
            meta = {"index": function["index"]} if function.get("index") is not None else None
            self._turns.add(0)
            out.append(
                ToolChunk(
                    index=self._count,
                    id=call.get("id") or None,
                    name=function.get("name"),
                    args_snapshot={} if arguments is None else arguments,
                    meta=meta,
                    done=True,
                )
            )
            self._count += 1
        if not out and not event.get("done"):
            self._foreign(event)  # another provider's stream: say so, not "no calls"
        if event.get("done"):
            self._turns.add(0)
            reason = event.get("done_reason")
            if reason == "length":
                out.append(self._finish(0, reason, "done_reason 'length' cut it short", TRUNCATED))
            else:
                out.append(self._finish(0, reason))
        return out
