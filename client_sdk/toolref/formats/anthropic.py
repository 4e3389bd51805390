"""`anthropic`: Messages API `messages`.

Calls are `tool_use` blocks (also `server_tool_use` and `mcp_tool_use`); results are blocks
whose type ends in `tool_result`, paired by `tool_use_id`, with `is_error`. Content may be a
string or a block list. The marker replaces `input` and `content` in place::

    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read",
      "toolRef": "tr_x7k2m4qpeoaccwyd6n3h5ggwmu"}]}
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
      "toolRef": "tr_x7k2m4qpeoaccwyd6n3h5ggwmu"}]}

A `tool_result` without `content` carries no payload and stays as it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

from toolref.formats.evidence import DISTINCTIVE, FOREIGN, NEUTRAL, part_types
from toolref.formats.site import MARKER, Site

NAME: Final = "anthropic"
_CALLS: Final = ("tool_use", "server_tool_use", "mcp_tool_use")  # types may be any JSON
_OWN_BLOCKS: Final = frozenset(
    {
        "tool_use",
        "tool_result",
        "image",
        "document",
        "thinking",
        "redacted_thinking",
        "server_tool_use",
        "mcp_tool_use",
        "mcp_tool_result",
        "web_search_tool_result",
        "search_result",
        "container_upload",
    }
)
_FOREIGN_BLOCKS: Final = frozenset(
    {
        "image_url",
        "input_audio",
        "input_text",
        "output_text",
        "input_image",
        "input_file",
        "refusal",
        "tool-invocation",
        "reasoning",
    }
)


def claim(message: Any) -> int:
    if not isinstance(message, dict) or "type" in message or "parts" in message:
        return FOREIGN
    if message.get("role") not in ("user", "assistant"):
        return FOREIGN
    if "tool_calls" in message or "toolInvocations" in message:
        return FOREIGN
    types = part_types(message.get("content"))
    if types & _FOREIGN_BLOCKS:
        return FOREIGN
    if types & _OWN_BLOCKS or any(t.endswith("_tool_result") for t in types):
        return DISTINCTIVE
    return NEUTRAL


def sites(messages: Sequence[Any]) -> Iterator[Site]:
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for j, block in enumerate(content):
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind in _CALLS and ("input" in block or MARKER in block):
                yield Site(
                    (i, "content", j),
                    call_id=_text(block.get("id")),
                    name=_text(block.get("name")),
                    args_key="input",
                )
            elif isinstance(kind, str) and kind.endswith("tool_result"):
                full = "content" in block or MARKER in block
                yield Site(
                    (i, "content", j),
                    call_id=_text(block.get("tool_use_id")),
                    result_key="content" if full else None,
                    is_error=block.get("is_error") is True,
                    bare=not full,
                )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
