"""OpenAI Responses API events.

Calls are routed by `output_index` (GitHub Copilot rotates `item_id` on every event) and
identified by `call_id`; the `.done` arguments and the `output_item.done` item overwrite
whatever the deltas accumulated (Copilot streams ciphertext deltas).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolref.streaming.adapters.base import StreamAdapter, as_int
from toolref.streaming.chunk import ABORTED, TRUNCATED, ToolChunk

# item type -> (field holding its arguments, run by the provider)
_TOOL_ITEMS = {
    "function_call": ("arguments", False),
    "custom_tool_call": ("input", False),
    "mcp_call": ("arguments", True),
    "local_shell_call": ("action", False),  # Codex CLI's local shell: an object, no name
    "shell_call": ("action", False),  # the provider's where its environment is hosted
    "apply_patch_call": ("operation", False),
    "computer_call": ("actions", False),  # as `{"actions": [...]}`; or `action`, where none
}
_TOOLS = {  # the tool of an item naming none
    "local_shell_call": "local_shell",
    "shell_call": "shell",
    "apply_patch_call": "apply_patch",
    "computer_call": "computer",
}
_HOSTED = "container_reference"  # a shell call's `environment` the provider runs it in
_DELTAS = {
    "response.function_call_arguments.delta",
    "response.custom_tool_call_input.delta",
    "response.mcp_call_arguments.delta",
}
_DONES = {
    "response.function_call_arguments.done": "arguments",
    "response.custom_tool_call_input.done": "input",
    "response.mcp_call_arguments.done": "arguments",
}
_META_FIELDS = ("id", "status", "namespace", "caller", "server_label", "async")


class OpenAIResponsesAdapter(StreamAdapter):
    provider = "openai_responses"

    def __init__(self) -> None:
        super().__init__()
        self._index: dict[int, int] = {}  # output_index -> call index
        self._closed: set[int] = set()
        self._parent: str | None = None

    def _chunks(self, event: Mapping[str, Any] | None) -> list[ToolChunk]:
        if event is None:
            return []
        kind = event.get("type")
        if kind in _DELTAS:
            index = self._call_index(event)
            return [ToolChunk(index=index, args_delta=event.get("delta") or "")]
        if kind in _DONES:
            index = self._call_index(event)
            final = event.get(_DONES[kind])
            return [] if final is None else [ToolChunk(index=index, args_snapshot=final)]
        if kind in {"response.output_item.added", "response.output_item.done"}:
            return self._item(event, done=kind == "response.output_item.done")
        if kind in ("response.created", "response.in_progress"):
            response = event.get("response") or {}
            self._parent = response.get("id") or self._parent
            return []
        if kind == "response.completed":
            return self._completed(event.get("response") or {})
        if kind == "response.incomplete":
            details = (event.get("response") or {}).get("incomplete_details") or {}
            reason = details.get("reason") or "unknown"
            return [self._finish(0, "incomplete", f"response incomplete: {reason}", TRUNCATED)]
        if kind == "response.failed":
            error = (event.get("response") or {}).get("error") or {}
            return [self._finish(0, "failed", f"response failed: {_describe(error)}", ABORTED)]
        if kind == "error":
            return self._fail_all(f"the stream reported an error: {_describe(event)}")
        self._foreign(event)  # another provider's stream: say so, not "no calls"
        return []

    def _call_index(self, event: Mapping[str, Any]) -> int:
        output_index = as_int(event.get("output_index", 0), "output_index")
        index = self._index.get(output_index)
        if index is None:  # deltas without an output_item.added: open the call anyway
            index = self._index[output_index] = len(self._index)
        self._turns.add(0)
        return index

    def _item(self, event: Mapping[str, Any], *, done: bool) -> list[ToolChunk]:
        item = event.get("item") or {}
        spec = _TOOL_ITEMS.get(item.get("type", ""))
        if spec is None:
            return []
        field, provider_executed = spec
        if item["type"] == "computer_call" and item.get(field) is None:
            field = "action"  # the preview tool's single action
        environment = item.get("environment")
        if item["type"] == "shell_call" and isinstance(environment, Mapping):
            provider_executed = environment.get("type") == _HOSTED
        output_index = as_int(event.get("output_index", 0), "output_index")
        index = self._call_index(event)
        if index in self._closed:
            return []
        meta: dict[str, Any] = {"output_index": output_index}
        for name in _META_FIELDS:
            if item.get(name) is not None:
                meta["item_id" if name == "id" else name] = item[name]
        arguments = item.get(field)
        if isinstance(arguments, list):  # a batch of actions: arguments are an object
            arguments = {field: arguments}
        if done:
            self._closed.add(index)
        return [
            ToolChunk(
                index=index,
                id=item.get("call_id") or item.get("id"),
                name=item.get("name") or _TOOLS.get(item["type"]),
                kind=item["type"],
                provider_executed=provider_executed,
                args_snapshot=arguments if (done or arguments) else None,
                meta=meta,
                parent_id=self._parent,
                done=done,
            )
        ]

    def _completed(self, response: Mapping[str, Any]) -> list[ToolChunk]:
        out: list[ToolChunk] = []
        # Recover finished items whose output_item.done never came.
        for output_index, item in enumerate(response.get("output") or ()):
            if item.get("type") in _TOOL_ITEMS and output_index in self._index:
                out += self._item({"item": item, "output_index": output_index}, done=True)
        out.append(self._finish(0, response.get("status") or "completed"))
        return out


def _describe(error: Mapping[str, Any]) -> str:
    parts = [str(error[key]) for key in ("code", "message") if error.get(key)]
    return ": ".join(parts) or "no details"
