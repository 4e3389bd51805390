"""Which tool results a text may stand in for: the one rule of hydrate's summary mode
(`toolref_server.registry.compaction`) and context editing
(`toolref_server.context.facts`).

A text takes the place of a result only where the result is the client's to replace and a
string keeps the request one the provider takes: not an Anthropic server tool's result
(`web_search_tool_result`, `web_fetch_tool_result`, `code_execution_tool_result`,
`mcp_tool_result`, ...: typed content the provider checks), not a `tool_result` holding
`tool_reference` blocks (the tools it loads would be gone), not a Responses output whose
`output` keeps its shape (`SHAPED`: a shell call's array, a computer call's screenshot
object), and not the result of a call code made (`direct`: Anthropic's and OpenAI's
programmatic tool calling). Pure; each check O(the result's content list).
"""

from __future__ import annotations

from typing import Any

from toolref.formats.openai_responses import SHAPED


def textual(block: Any, payload: Any) -> bool:
    """Whether a text may take the place of `payload`, the result held by `block` (its
    message, block or item: its `type` says which kind of result it is)."""
    kind = block.get("type") if isinstance(block, dict) else None
    if isinstance(kind, str) and kind.endswith("tool_result") and kind != "tool_result":
        return False  # a server tool's: typed content
    if isinstance(kind, str) and kind in SHAPED:
        return False
    return not (
        isinstance(payload, list)
        and any(isinstance(part, dict) and part.get("type") == "tool_reference" for part in payload)
    )


def direct(call: Any) -> bool:
    """Whether the model made this call (its block or item): no `caller`, or one of type
    `direct` (Anthropic's `{"type": "code_execution_20250825", "tool_id": ...}` and OpenAI's
    `{"type": "program", "caller_id": ...}`: code the model wrote made it)."""
    caller = call.get("caller") if isinstance(call, dict) else None
    return not isinstance(caller, dict) or caller.get("type") in (None, "direct")
