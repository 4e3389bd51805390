"""`openai-responses`: Responses API input items.

Calls are `function_call` items (`arguments`, a JSON string), `custom_tool_call` items
(`input`), `local_shell_call` items (`action`, tool `local_shell`: Codex CLI's),
`shell_call` items (`action`, tool `shell`), `apply_patch_call` items (`operation`, tool
`apply_patch`) and `computer_call` items (`actions`, or `action` beside an `actions`
member, tool `computer`); results are their `*_output` items (`output`: a string, an array
of `{stdout, stderr, outcome}` for a shell call, a `computer_screenshot` object for a
computer call; an `apply_patch_call_output` whose `status` is `failed` is an error, one
without `output` answers its call with nothing to replace), paired by `call_id` (a
`local_shell_call_output` without one: by its `id`, which OpenAI's SDK sets to the
call's). A `computer_call` holding `action` alone is no call: its marker would name
neither member, and could be filled back as the other. Items the provider ran
(`mcp_call`, `web_search_call`, ...) are neither. The marker replaces the payload member
in place::

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
    "shell_call": "action",
    "apply_patch_call": "operation",
}
_TOOLS: Final = {  # the tool of a call item naming none
    "local_shell_call": "local_shell",
    "shell_call": "shell",
    "apply_patch_call": "apply_patch",
    "computer_call": "computer",
}
_RESULTS: Final = frozenset(
    {
        "function_call_output",
        "custom_tool_call_output",
        "local_shell_call_output",
        "shell_call_output",
        "apply_patch_call_output",
        "computer_call_output",
    }
)
# Results whose `output` must keep its shape (an array, an object): no text stands in.
SHAPED: Final = frozenset({"shell_call_output", "computer_call_output"})
_BARE: Final = frozenset({"apply_patch_call_output"})  # `output` optional: answers without it
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
        if kind in _ARGS or kind == "computer_call":
            key = _ARGS.get(kind) or _computer_key(item)
            if key is not None and (key in item or MARKER in item):
                name = item.get("name", _TOOLS.get(kind))
                yield Site(
                    (i,),
                    call_id=call_id,
                    name=name if isinstance(name, str) else None,
                    args_key=key,
                )
        elif kind in _RESULTS:
            full = "output" in item or MARKER in item
            if full or kind in _BARE:
                failed = kind in _BARE and item.get("status") == "failed"
                key = "output" if full else None
                yield Site((i,), call_id=call_id, result_key=key, is_error=failed, bare=not full)


def _computer_key(item: dict[str, Any]) -> str | None:
    """The member holding a `computer_call`'s arguments: `actions` (the `computer` tool's
    batch), or `action` where an `actions` member (null) stands beside it; a marker names
    the other member, which stayed beside it, or neither (`actions`). None for `action`
    alone: marked, it would name neither, and be filled back as `actions`."""
    if MARKER in item:
        return "action" if "actions" in item and "action" not in item else "actions"
    if item.get("actions") is not None:
        return "actions"
    if "actions" in item:
        return "action" if "action" in item else "actions"
    return None
