"""`gemini`: Gemini `contents` (`role`: `user` or `model`, and `parts`).

Calls are `functionCall` parts (`args`), results `functionResponse` parts (`response`),
paired by `id` when both have one, otherwise in order: the first unanswered call of the same
function name. snake_case keys (`function_call`, `function_response`) are read too. The
marker replaces `args` and `response` inside the part's object::

    {"role": "model", "parts": [{"functionCall": {"name": "get_weather",
      "toolRef": "tr_x7k2m4qpeoaccwyd6n3h5ggwmu"}, "thoughtSignature": "..."}]}
    {"role": "user", "parts": [{"functionResponse": {"name": "get_weather",
      "toolRef": "tr_x7k2m4qpeoaccwyd6n3h5ggwmu"}}]}
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

from toolref.formats.evidence import DISTINCTIVE, FOREIGN, NEUTRAL
from toolref.formats.site import MARKER, Site

NAME: Final = "gemini"
_CALL_KEYS: Final = ("functionCall", "function_call")
_RESULT_KEYS: Final = ("functionResponse", "function_response")
_PART_KEYS: Final = frozenset(
    {
        *_CALL_KEYS,
        *_RESULT_KEYS,
        "text",
        "inlineData",
        "inline_data",
        "fileData",
        "file_data",
        "executableCode",
        "executable_code",
        "codeExecutionResult",
        "code_execution_result",
    }
)


def claim(message: Any) -> int:
    if not isinstance(message, dict) or "type" in message or "content" in message:
        return FOREIGN
    parts = message.get("parts")
    if not isinstance(parts, list) or message.get("role") not in (
        None,
        "user",
        "model",
        "function",
    ):
        return FOREIGN
    if any(not isinstance(p, dict) or "type" in p for p in parts):
        return FOREIGN
    if message.get("role") == "model" or any(_PART_KEYS & p.keys() for p in parts):
        return DISTINCTIVE
    return NEUTRAL


def text_result(text: str) -> Any:
    """A `functionResponse.response` must be an object; text goes under `output`."""
    return {"output": text}


def sites(messages: Sequence[Any]) -> Iterator[Site]:
    for i, message in enumerate(messages):
        parts = message.get("parts") if isinstance(message, dict) else None
        if not isinstance(parts, list):
            continue
        for j, part in enumerate(parts):
            if not isinstance(part, dict):
                continue
            for key in _CALL_KEYS:
                call = part.get(key)
                if isinstance(call, dict) and ("args" in call or MARKER in call):
                    yield Site((i, "parts", j, key), _id(call), _name(call), args_key="args")
            for key in _RESULT_KEYS:
                result = part.get(key)
                if isinstance(result, dict) and ("response" in result or MARKER in result):
                    yield Site(
                        (i, "parts", j, key), _id(result), _name(result), result_key="response"
                    )


def _id(obj: dict[str, Any]) -> str | None:
    value = obj.get("id")
    return value if isinstance(value, str) and value else None


def _name(obj: dict[str, Any]) -> str | None:
    value = obj.get("name")
    return value if isinstance(value, str) else None
