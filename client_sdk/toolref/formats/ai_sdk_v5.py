"""`ai-sdk-v5`: Vercel AI SDK 5 UIMessage `parts`.

Tool parts are `{"type": "tool-<name>", toolCallId, state, input, output | errorText}` and
`{"type": "dynamic-tool", toolName, ...}`. A part holds a complete invocation when its
`state` is `output-available` (result: `output`) or `output-error` (result: `errorText`,
an error). The marker replaces `input` and the result with one `toolRef` where `input` was::

    {"id": "m2", "role": "assistant", "parts": [{"type": "tool-weather", "toolCallId": "c1",
      "state": "output-available", "toolRef": "tr_x7k2m4qpeoaccwyd6n3h5ggwmu"}]}

If the result did not directly follow `input`, a `toolRefOrder` member lists the original
member order so the part comes back byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

from toolref.formats.evidence import DISTINCTIVE, FOREIGN, NEUTRAL, part_types
from toolref.formats.site import MARKER, Site

NAME: Final = "ai-sdk-v5"
_ROLES: Final = ("system", "user", "assistant")  # a tuple: roles may be any JSON
_RESULTS: Final = {"output-available": "output", "output-error": "errorText"}


def claim(message: Any) -> int:
    if not isinstance(message, dict) or "type" in message or "toolInvocations" in message:
        return FOREIGN
    parts = message.get("parts")
    if not isinstance(parts, list) or message.get("role") not in _ROLES:
        return FOREIGN
    if any(isinstance(p, dict) and "type" not in p for p in parts):
        return FOREIGN  # Gemini parts have no type
    types = part_types(parts)
    if "tool-invocation" in types:
        return FOREIGN
    if any(_is_tool(t) for t in types) or types & {"step-start", "source-url", "source-document"}:
        return DISTINCTIVE
    return NEUTRAL


def _is_tool(kind: str) -> bool:
    return kind.startswith("tool-") or kind == "dynamic-tool"


def sites(messages: Sequence[Any]) -> Iterator[Site]:
    for i, message in enumerate(messages):
        parts = message.get("parts") if isinstance(message, dict) else None
        if not isinstance(parts, list):
            continue
        for j, part in enumerate(parts):
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if not isinstance(kind, str) or not _is_tool(kind):
                continue
            if not ("input" in part or MARKER in part):
                continue
            name = part.get("toolName") if kind == "dynamic-tool" else kind[len("tool-") :]
            call_id = part.get("toolCallId")
            state = part.get("state")
            result_key = _RESULTS.get(state) if isinstance(state, str) else None
            if result_key is not None and result_key not in part and MARKER not in part:
                result_key = None
            yield Site(
                (i, "parts", j),
                call_id=call_id if isinstance(call_id, str) else None,
                name=name if isinstance(name, str) else None,
                args_key="input",
                result_key=result_key,
                is_error=state == "output-error",
            )
