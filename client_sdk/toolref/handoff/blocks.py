"""Tool blocks: each tool call of a conversation with its result, read through the format layer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from toolref import formats
from toolref.formats import Format, Pair
from toolref.kit.kinds import DEFAULT_KINDS, Kind, KindTable
from toolref.kit.payload import arguments, command_of, path_of, text_of

LineRange = tuple[int, int | None]  # first line, last line (None: to the end); 1-based


@dataclass(frozen=True, slots=True)
class ToolBlock:
    order: int  # position of the call in the conversation
    key: str
    name: str
    kind: Kind
    args: Any
    result: str | None  # None: the call never got a result (interrupted)
    is_error: bool
    path: str | None = None
    lines: LineRange | None = None  # reads: the range read; None is the whole file
    command: str | None = None

    @property
    def interrupted(self) -> bool:
        return self.result is None


def tool_blocks(
    messages: Sequence[Any], fmt: Format, kinds: KindTable = DEFAULT_KINDS
) -> list[ToolBlock]:
    """Every call (with or without a result) in conversation order; orphan results are skipped."""
    blocks = []
    for order, pair in enumerate(
        p for p in formats.scan(messages, fmt).pairs if p.call is not None
    ):
        call, obj = pair.call, pair.call_obj
        if call is None or obj is None or call.args_key is None or call.args_key not in obj:
            continue  # a marker: hydrate before handing off
        args = obj[call.args_key]
        result = _result_text(pair)
        kind = kinds.kind(pair.name, args)
        blocks.append(
            ToolBlock(
                order=order,
                key=pair.key,
                name=pair.name,
                kind=kind,
                args=args,
                result=result,
                is_error=result is not None and pair.result is not None and pair.result.is_error,
                path=_path(kind, args),
                lines=read_range(args) if kind is Kind.READ else None,
                command=command_of(args) if kind is Kind.SHELL else None,
            )
        )
    return blocks


def _result_text(pair: Pair) -> str | None:
    """The result's text; "" for a result without a payload; None when there is no result."""
    site, obj = pair.result, pair.result_obj
    if site is None or obj is None:
        return None
    if site.result_key is None or site.result_key not in obj:
        return "" if site.bare else None
    return text_of(_without_media(obj[site.result_key]))


# Content blocks that carry an image, a document or audio (Anthropic, both OpenAI APIs,
# the AI SDK's tool output): base64 or a data URL no model reads from a markdown block.
_MEDIA: Final = {
    "image": "image",
    "input_image": "image",
    "image_url": "image",
    "document": "document",
    "input_file": "file",
    "file": "file",
    "input_audio": "audio",
    "media": "media",
}


def _without_media(result: Any) -> Any:
    """`result` with each media block of its content list (or of a list it holds one level
    down, as `{"type": "content", "value": [...]}`) named in a text block instead. Linear."""
    if isinstance(result, list):
        return [_named(item) for item in result]
    if isinstance(result, dict) and any(isinstance(v, list) for v in result.values()):
        return {k: [_named(i) for i in v] if isinstance(v, list) else v for k, v in result.items()}
    return result


# Where those blocks hold their bytes: a `{"type": "file", "name": ...}` entry of a
# directory listing has none of them, and stays as it is.
_PAYLOADS: Final = ("source", "data", "image_url", "file_data", "file_id", "file", "input_audio")


def _named(item: Any) -> Any:
    kind = item.get("type") if isinstance(item, dict) else None
    if not isinstance(kind, str) or kind not in _MEDIA or not any(k in item for k in _PAYLOADS):
        return item
    text = f"[{_media_type(item)}{_MEDIA[kind]}: not carried in this block]"
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


def _path(kind: Kind, args: Any) -> str | None:
    if kind in (Kind.READ, Kind.EDIT, Kind.WRITE, Kind.DELETE, Kind.MOVE):
        return path_of(args)
    return None


def read_range(args: Any) -> LineRange | None:
    """The lines a read covers, from the argument names agents use; None for a whole file."""
    found = arguments(args)
    if found.get("should_read_entire_file") is True:
        return None
    view = found.get("view_range")
    if isinstance(view, list) and len(view) == 2 and all(isinstance(v, int) for v in view):
        start, end = view
        return (max(1, start), None if end == -1 else end)
    for first, last in (
        ("start_line_one_indexed", "end_line_one_indexed_inclusive"),
        ("start_line", "end_line"),
        ("line_start", "line_end"),
    ):
        start, end = found.get(first), found.get(last)
        if isinstance(start, int):
            return (max(1, start), end if isinstance(end, int) else None)
    offset, limit = found.get("offset"), found.get("limit")
    if isinstance(offset, int) or isinstance(limit, int):
        start = offset if isinstance(offset, int) and offset > 0 else 1
        return (start, start + limit - 1 if isinstance(limit, int) and limit > 0 else None)
    return None
