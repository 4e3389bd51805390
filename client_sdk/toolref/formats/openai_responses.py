"""`openai-responses`: Responses API input items.

Calls are `function_call` items (`arguments`, a JSON string), `custom_tool_call` items
(`input`) and `local_shell_call` items (`action`, tool `local_shell`: Codex CLI's); results
are `function_call_output`, `custom_tool_call_output` and `local_shell_call_output` items
(`output`), paired by `call_id` (a `local_shell_call_output` without one: by its `id`, which
OpenAI's SDK sets to the call's). Items the provider ran (`mcp_call`, `web_search_call`,
...) are neither. The marker replaces the payload member in place::

    {"type": "function_call", "call_id": "call_1", "name": "shell",
     "toolRef": "tr_x7k2m4qpeoaccwyd6n3h5ggwmu"}
    {"type": "function_call_output", "call_id": "call_1",
     "toolRef": "tr_x7k2m4qpeoaccwyd6n3h5ggwmu"}
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

from toolref.formats.evidence import DISTINCTIVE, FOREIGN, NEUTRAL, part_types
from toolref.formats.site import MARKER, Site

NAME: Final = "openai-responses"
_ARGS: Final = {
    "function_call": "arguments",
    "custom_tool_call": "input",
    "local_shell_call": "action",
}
_TOOLS: Final = {"local_shell_call": "local_shell"}  # the tool of a call item naming none
_RESULTS: Final = frozenset(
    {"function_call_output", "custom_tool_call_output", "local_shell_call_output"}
)
_BY_ID: Final = frozenset({"local_shell_call_output"})  # may name its call by `id`
_OWN_PARTS: Final = frozenset(
    {"input_text", "output_text", "input_image", "input_file", "summary_text", "reasoning_text"}
)
_FOREIGN_PARTS: Final = frozenset(
    {"tool_use", "server_tool_use", "mcp_tool_use", "tool_result", "image_url", "image", "thinking"}
)


def claim(message: Any) -> int:
    if not isinstance(message, dict) or "parts" in message or "tool_calls" in message:
        return FOREIGN
    if "toolInvocations" in message:
        return FOREIGN
    kind = message.get("type")
    if isinstance(kind, str):
        return DISTINCTIVE
    if kind is not None or message.get("role") in ("tool", "model"):
        return FOREIGN
    types = part_types(message.get("content"))
    if types & _FOREIGN_PARTS or any(t.endswith("tool_result") for t in types):
        return FOREIGN
    return DISTINCTIVE if types & _OWN_PARTS else NEUTRAL


def sites(messages: Sequence[Any]) -> Iterator[Site]:
    for i, item in enumerate(messages):
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if not isinstance(kind, str):
            continue
        call_id = item.get("call_id")
        if call_id is None and kind in _BY_ID:
            call_id = item.get("id")
        call_id = call_id if isinstance(call_id, str) else None
        if kind in _ARGS:
            key = _ARGS[kind]
            if key in item or MARKER in item:
                name = item.get("name", _TOOLS.get(kind))
                yield Site(
                    (i,),
                    call_id=call_id,
                    name=name if isinstance(name, str) else None,
                    args_key=key,
                )
        elif kind in _RESULTS and ("output" in item or MARKER in item):
            yield Site((i,), call_id=call_id, result_key="output")
