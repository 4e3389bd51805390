"""Reading tool payloads the way agents shape them: arguments, paths, commands, result text.

Arguments arrive as objects or (OpenAI) JSON strings; results as strings, content-block
lists, or objects wrapping the text. These helpers find the common fields under the names
real agents use, without guessing beyond them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

PATH_KEYS: Final = (
    "file_path",
    "path",
    "filePath",
    "target_file",
    "filename",
    "file",
    "notebook_path",
)
COMMAND_KEYS: Final = ("command", "cmd", "script", "code")
URL_KEYS: Final = ("url", "uri", "href")
PATTERN_KEYS: Final = ("pattern", "query", "regex", "search_term", "glob")
_TEXT_KEYS: Final = ("content", "output", "text", "stdout", "result", "data", "body")


def arguments(args: Any) -> dict[str, Any]:
    """Arguments as an object: a JSON-object string is parsed; anything else gives {}."""
    if isinstance(args, Mapping):
        return dict(args)
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def first(args: Any, keys: tuple[str, ...]) -> str | None:
    """The first of `keys` holding a non-empty string (a list of strings is joined)."""
    found = arguments(args)
    for key in keys:
        value = found.get(key)
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            value = " ".join(value)
        if isinstance(value, str) and value:
            return value
    return None


def path_of(args: Any) -> str | None:
    return first(args, PATH_KEYS)


def command_of(args: Any) -> str | None:
    return first(args, COMMAND_KEYS)


def url_of(args: Any) -> str | None:
    return first(args, URL_KEYS)


def pattern_of(args: Any) -> str | None:
    return first(args, PATTERN_KEYS)


def text_of(result: Any) -> str:
    """The text a result carries: a string, the text blocks of a block list, or the text
    member of an object; other JSON is rendered compactly."""
    if isinstance(result, str):
        return result
    if is_text_blocks(result):
        return "\n".join(text_of(item) for item in result)
    if isinstance(result, Mapping):
        if isinstance(result.get("text"), str) and result.get("type") in _TEXT_TYPES:
            return str(result["text"])
        for key in _TEXT_KEYS:
            if isinstance(result.get(key), str | list) and len(result) <= 3:
                return text_of(result[key])
    if result is None or result == []:
        return ""
    return json.dumps(result, ensure_ascii=False, separators=(",", ":"))


def is_text_blocks(value: Any) -> bool:
    """A non-empty list of text blocks (or strings), as content lists carry text."""
    return isinstance(value, list) and bool(value) and all(_is_text_block(v) for v in value)


_TEXT_TYPES: Final = ("text", "input_text", "output_text", None)


def _is_text_block(item: Any) -> bool:
    if isinstance(item, str):
        return True
    return (
        isinstance(item, Mapping)
        and item.get("type") in _TEXT_TYPES[:3]
        and isinstance(item.get("text"), str)
    )


_EXIT_PATTERNS: Final = (
    re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>"),
    re.compile(r"\bexit(?:ed)?(?: with)?(?: status| code)?[:= ]\s*(-?\d+)", re.IGNORECASE),
    re.compile(r"\breturn ?code[:= ]\s*(-?\d+)", re.IGNORECASE),
)


def exit_status(result: Any) -> int | None:
    """The exit status a shell result reports, when it reports one."""
    if isinstance(result, Mapping):
        for key in ("exit_code", "exitCode", "returncode", "return_code", "status_code"):
            value = result.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        metadata = result.get("metadata")
        if isinstance(metadata, Mapping):
            return exit_status(metadata)
    text = text_of(result)
    for pattern in _EXIT_PATTERNS:
        match = pattern.search(text[:2000]) or pattern.search(text[-2000:])
        if match:
            return int(match.group(1))
    return None


# Content blocks that carry an image, a document or audio (Anthropic, both OpenAI APIs,
# the AI SDK's tool output, a Responses `computer_call_output`'s screenshot): base64 or a
# data URL no model reads from a markdown block.
_MEDIA: Final = {
    "image": "image",
    "computer_screenshot": "image",
    "input_image": "image",
    "image_url": "image",
    "document": "document",
    "input_file": "file",
    "file": "file",
    "input_audio": "audio",
    "media": "media",
}


def without_media(result: Any, note: str = "not carried in this block") -> Any:
    """`result` with each media block of its content list (or of a list it holds one level
    down, as `{"type": "content", "value": [...]}`; or `result` itself, a Responses
    `computer_screenshot`) named in a text block instead (`[image/png image: <note>]`).
    Linear."""
    if isinstance(result, dict) and result.get("type") == "computer_screenshot":
        return _named(result, note)
    if isinstance(result, list):
        return [_named(item, note) for item in result]
    if isinstance(result, dict) and any(isinstance(v, list) for v in result.values()):
        return {
            k: [_named(i, note) for i in v] if isinstance(v, list) else v for k, v in result.items()
        }
    return result


# Where those blocks hold their bytes: a `{"type": "file", "name": ...}` entry of a
# directory listing has none of them, and stays as it is.
_PAYLOADS: Final = ("source", "data", "image_url", "file_data", "file_id", "file", "input_audio")


def _named(item: Any, note: str) -> Any:
    kind = item.get("type") if isinstance(item, dict) else None
    if not isinstance(kind, str) or kind not in _MEDIA or not any(k in item for k in _PAYLOADS):
        return item
    text = f"[{_media_type(item)}{_MEDIA[kind]}: {note}]"
    return {"type": "text", "text": text}


def _media_type(item: dict[str, Any]) -> str:
    """The media type a block names (`image/png `), or ""."""
    source = item.get("source")
    for found in (
        source.get("media_type") if isinstance(source, dict) else None,
        item.get("media_type"),
        item.get("mediaType"),
    ):
        if isinstance(found, str) and found:
            return f"{found[:100]} "
    url = item.get("image_url")
    url = url.get("url") if isinstance(url, dict) else url
    if isinstance(url, str) and url.startswith("data:"):
        return f"{url[5:].partition(';')[0].partition(',')[0][:100]} "
    return ""
