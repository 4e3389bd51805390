"""`ai-sdk-v4`: Vercel AI SDK 4 UI messages with `toolInvocations`.

Each invocation object holds the call and, once `state` is `"result"`, the result:
`{state, toolCallId, toolName, args, result}`. The `tool-invocation` parts of AI SDK 4.2+
(`{"type": "tool-invocation", "toolInvocation": {...}}`) are read the same way. The marker
replaces `args` and `result` with one `toolRef` where `args` was::

    {"role": "assistant", "content": "", "toolInvocations": [{"state": "result",
      "toolCallId": "call_1", "toolName": "weather", "toolRef": "tr_x7k2m4qpeoaccwyd6n3h5ggwmu"}]}

If `result` did not directly follow `args`, a `toolRefOrder` member lists the original
member order so the object comes back byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

from toolref.formats.evidence import DISTINCTIVE, FOREIGN, NEUTRAL, part_types
from toolref.formats.site import MARKER, Path, Site

NAME: Final = "ai-sdk-v4"
_ROLES: Final = ("system", "user", "assistant", "data")  # a tuple: roles may be any JSON


def claim(message: Any) -> int:
    if not isinstance(message, dict) or "type" in message or "tool_calls" in message:
        return FOREIGN
    if message.get("role") not in _ROLES:
        return FOREIGN
    parts = message.get("parts")
    if parts is not None and not isinstance(parts, list):
        return FOREIGN
    if any(isinstance(p, dict) and "type" not in p for p in parts or ()):
        return FOREIGN
    types = part_types(parts)
    if (
        any(t.startswith("tool-") and t != "tool-invocation" for t in types)
        or "dynamic-tool" in types
    ):
        return FOREIGN
    if part_types(message.get("content")):
        return FOREIGN  # v4 UI message content is a string
    if "toolInvocations" in message or "tool-invocation" in types:
        return DISTINCTIVE
    return NEUTRAL


def sites(messages: Sequence[Any]) -> Iterator[Site]:
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        invocations = message.get("toolInvocations")
        if isinstance(invocations, list):
            for j, invocation in enumerate(invocations):
                yield from _site((i, "toolInvocations", j), invocation)
        parts = message.get("parts")
        if isinstance(parts, list):
            for j, part in enumerate(parts):
                if isinstance(part, dict) and part.get("type") == "tool-invocation":
                    yield from _site((i, "parts", j, "toolInvocation"), part.get("toolInvocation"))


def _site(path: Path, obj: Any) -> Iterator[Site]:
    if not isinstance(obj, dict) or not ("args" in obj or MARKER in obj):
        return
    call_id, name = obj.get("toolCallId"), obj.get("toolName")
    has_result = obj.get("state") == "result" and ("result" in obj or MARKER in obj)
    yield Site(
        path,
        call_id=call_id if isinstance(call_id, str) else None,
        name=name if isinstance(name, str) else None,
        args_key="args",
        result_key="result" if has_result else None,
    )
