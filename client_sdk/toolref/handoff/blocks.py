"""Tool blocks: each tool call of a conversation with its result, read through the format layer."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from toolref import formats
from toolref.formats import Format, Pair
from toolref.kit.kinds import DEFAULT_KINDS, Kind, KindTable
from toolref.kit.payload import arguments, command_of, path_of, text_of, without_media

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
    text = _verbatim(without_media(_without_encrypted(obj[site.result_key])))
    notes = _media_parts(obj.get("parts"))
    return "\n".join([text, *notes]) if text and notes else text or "\n".join(notes)


# Gemini's media parts (a `functionResponse`'s `parts`: a screenshot beside its `response`).
_GEMINI_MEDIA: Final = ("inlineData", "inline_data", "fileData", "file_data")


def _media_parts(parts: Any) -> list[str]:
    """A note for each media part of a Gemini `functionResponse`'s `parts`
    (`[image/png image: not carried in this block]`), as `without_media` names a media
    block: their base64 is no use in a markdown block, but a result that had an image must
    not read as one without. Linear in the parts."""
    if not isinstance(parts, list):
        return []
    notes = []
    for part in parts:
        media = (
            next((part[k] for k in _GEMINI_MEDIA if k in part), None)
            if isinstance(part, dict)
            else None
        )
        if not isinstance(media, dict):
            continue
        mime = media.get("mimeType", media.get("mime_type"))
        mime = mime[:100] if isinstance(mime, str) and mime else ""
        major = mime.partition("/")[0]
        kind = major if major in ("image", "audio", "video") else "file"
        notes.append(f"[{mime + ' ' if mime else ''}{kind}: not carried in this block]")
    return notes


def _without_encrypted(result: Any) -> Any:
    """`result` without the `encrypted_content` of its `web_search_result` blocks
    (Anthropic's: the page, readable by Anthropic alone): base64 that no model reads and
    that took the result's share of the block; the page's `url` and `title` stay. Linear."""
    if not isinstance(result, list):
        return result
    return [
        {k: v for k, v in item.items() if k != "encrypted_content"}
        if isinstance(item, dict) and item.get("type") == "web_search_result"
        else item
        for item in result
    ]


# Members of a result object that say how it went, not what it holds (MCP's `isError`, and
# its `structuredContent`, which the spec has the text repeat).
_ABOUT: Final = frozenset({"type", "isError", "is_error", "structuredContent", "_meta"})
_TEXT_BLOCKS: Final = ("text", "input_text", "output_text")


def _verbatim(result: Any) -> str:
    """The result's text (`text_of`); but an object of more than one member (besides
    `_ABOUT`) that is no text block, such as `{"stdout": ..., "stderr": ..., "exit_code":
    2}`, as its whole JSON: `text_of` keeps its text member alone, and the block says its
    results are verbatim. Linear."""
    if (
        isinstance(result, Mapping)
        and result.get("type") not in _TEXT_BLOCKS
        and len(result.keys() - _ABOUT) > 1
    ):
        return json.dumps(result, ensure_ascii=False, separators=(",", ":"))
    return text_of(result)


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
