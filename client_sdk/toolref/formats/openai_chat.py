"""`openai-chat`: Chat Completions messages.

Calls are the assistant's `tool_calls`: `function.arguments` (a JSON string, kept as a
string) or, for custom tools, `custom.input`; results are `role: "tool"` messages, paired by
`tool_call_id`. The marker replaces `arguments` inside `function` (`input` inside `custom`),
and `content` in the tool message, in place::

    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "read_file", "toolRef": "tr_x7k2m4qpeoaccwyd6n3h5ggwmu"}}]}
    {"role": "tool", "tool_call_id": "call_1", "toolRef": "tr_x7k2m4qpeoaccwyd6n3h5ggwmu"}
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

from toolref.formats.evidence import DISTINCTIVE, FOREIGN, NEUTRAL, part_types
from toolref.formats.site import MARKER, Site

NAME: Final = "openai-chat"
# Function calls carry `arguments`; custom tool calls (`type: "custom"`) carry `input`.
_CALL_KINDS: Final = (("function", "arguments"), ("custom", "input"))
_OWN_PARTS: Final = frozenset({"image_url", "input_audio"})
_FOREIGN_PARTS: Final = frozenset(
    {
        "tool_use",
        "server_tool_use",
        "mcp_tool_use",
        "tool_result",
        "image",
        "document",
        "thinking",
        "redacted_thinking",
        "input_text",
        "output_text",
        "input_image",
        "input_file",
    }
)


def claim(message: Any) -> int:
    if not isinstance(message, dict) or "type" in message or "parts" in message:
        return FOREIGN
    if "toolInvocations" in message or message.get("role") == "model":
        return FOREIGN
    types = part_types(message.get("content"))
    if types & _FOREIGN_PARTS or any(t.endswith("tool_result") for t in types):
        return FOREIGN
    if message.get("role") == "tool" or "tool_calls" in message or types & _OWN_PARTS:
        return DISTINCTIVE
    return NEUTRAL


def sites(messages: Sequence[Any]) -> Iterator[Site]:
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            for j, call in enumerate(calls):
                if not isinstance(call, dict):
                    continue
                for kind, args_key in _CALL_KINDS:
                    spec = call.get(kind)
                    if isinstance(spec, dict) and (args_key in spec or MARKER in spec):
                        yield Site(
                            (i, "tool_calls", j, kind),
                            call_id=_text(call.get("id")),
                            name=_text(spec.get("name")),
                            args_key=args_key,
                        )
        if message.get("role") == "tool" and ("content" in message or MARKER in message):
            yield Site(
                (i,),
                call_id=_text(message.get("tool_call_id")),
                name=_text(message.get("name")),
                result_key="content",
            )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
