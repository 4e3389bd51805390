"""Checks of tool-call content items and locations against ACP v1's schema, by hand.

Each item is walked once: linear in its size. Members follow `$defs` of the v1 schema
(`ToolCallContent`, `ContentBlock` and its five block types, `ToolCallLocation`). A member
the schema does not name is refused as well: the spec reserves every root name ("MUST NOT
add custom fields"), and clients built on its models drop such members silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from toolref.acp.bounds import shown
from toolref.acp.content import MAX_LINE, is_line
from toolref.wire.errors import AcpError

_INT64: Final = 2**63
_ROLES: Final = ("assistant", "user")
_HOW: Final = {
    "content": "text_content(text), or {'type': 'content', 'content': <ACP content block>}",
    "diff": "diff_content(path, new_text, old_text)",
    "terminal": "terminal_content(terminal_id)",
}

# member -> (kind of value, required); "str?" etc. are the optional ones.
_Spec = dict[str, tuple[str, bool]]
_META: Final = ("meta", False)
_ANNOTATIONS: Final = ("annotations", False)
_ITEMS: Final[dict[str, _Spec]] = {
    "content": {"type": ("str", True), "content": ("block", True), "_meta": _META},
    "diff": {
        "type": ("str", True),
        "path": ("str", True),
        "newText": ("str", True),
        "oldText": ("str", False),
        "_meta": _META,
    },
    "terminal": {"type": ("str", True), "terminalId": ("str", True), "_meta": _META},
}
_BLOCKS: Final[dict[str, _Spec]] = {
    "text": {"text": ("str", True)},
    "image": {"data": ("str", True), "mimeType": ("str", True), "uri": ("str", False)},
    "audio": {"data": ("str", True), "mimeType": ("str", True)},
    "resource_link": {
        "name": ("str", True),
        "uri": ("str", True),
        "description": ("str", False),
        "mimeType": ("str", False),
        "size": ("int64", False),
        "title": ("str", False),
    },
    "resource": {"resource": ("resource", True)},
}
_RESOURCE: Final[_Spec] = {
    "uri": ("str", True),
    "text": ("str", False),
    "blob": ("str", False),
    "mimeType": ("str", False),
    "_meta": _META,
}
_ANNOTATION: Final[_Spec] = {
    "audience": ("roles", False),
    "lastModified": ("str", False),
    "priority": ("number", False),
    "_meta": _META,
}
_LOCATION: Final[_Spec] = {"path": ("str", True), "line": ("line", False), "_meta": _META}


def _fail(label: str, path: str, problem: str, fix: str) -> AcpError:
    where = f"{label}'s {path.rstrip('.')}" if path else label
    return AcpError(f"{where} {problem}; {fix}")


def _members(value: Any, spec: _Spec, label: str, path: str, fix: str) -> None:
    if not isinstance(value, Mapping):
        raise _fail(label, path, f"is a {type(value).__name__}, not an object", fix)
    for name, (kind, required) in spec.items():
        if name not in value:
            if required:
                raise AcpError(f"{label} lacks {path}{name}; {fix}")
            continue
        _value(value[name], kind, label, f"{path}{name}", fix)
    extra = [name for name in value if name not in spec]
    if extra:
        raise _fail(
            label,
            path,
            f"has {', '.join(map(repr, extra))}, which ACP v1 does not name (the spec reserves "
            "them, and clients drop them)",
            "put your own data under '_meta'",
        )


def _value(value: Any, kind: str, label: str, path: str, fix: str) -> None:
    if kind == "str":
        ok = isinstance(value, str)
    elif kind == "meta":
        ok = isinstance(value, Mapping) and all(isinstance(key, str) for key in value)
    elif kind == "int64":
        ok = type(value) is int and -_INT64 <= value < _INT64
    elif kind == "number":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif kind == "line":
        ok = is_line(value)
        fix = f"give a line number from 0 to {MAX_LINE} (the schema's uint32), or none"
    elif kind == "roles":
        ok = isinstance(value, list) and all(role in _ROLES for role in value)
        fix = f"give a list of {' or '.join(_ROLES)}"
    elif kind == "annotations":
        _members(value, _ANNOTATION, label, f"{path}.", fix)
        return
    elif kind == "resource":
        _members(value, _RESOURCE, label, f"{path}.", fix)
        if "text" not in value and "blob" not in value:
            raise AcpError(f"{label} lacks {path}.text or {path}.blob; {fix}")
        return
    else:  # "block"
        _block(value, label, f"{path}.", fix)
        return
    if not ok:
        raise _fail(label, path, f"is {shown(value, 60)}, not a valid {kind}", fix)


def _block(value: Any, label: str, path: str, fix: str) -> None:
    block_type = value.get("type") if isinstance(value, Mapping) else None
    spec = _BLOCKS.get(block_type) if isinstance(block_type, str) else None
    if spec is None:
        raise _fail(
            label,
            f"{path}type",
            f"is {block_type!r}: ACP v1's content blocks are {', '.join(_BLOCKS)}",
            fix,
        )
    spec = {"type": ("str", True), **spec, "annotations": _ANNOTATIONS, "_meta": _META}
    _members(value, spec, label, path, fix)


def checked_content(item: Any) -> dict[str, Any]:
    """`item` when ACP v1 takes it as a tool call's content item; else `AcpError` naming
    what is wrong and how to make one."""
    kind = item.get("type") if isinstance(item, Mapping) else None
    spec = _ITEMS.get(kind) if isinstance(kind, str) else None
    if spec is None or not isinstance(kind, str):
        raise AcpError(
            f"a content item {item!r:.60} has type {kind!r}: ACP v1's are content, diff and "
            "terminal; make one with text_content, diff_content or terminal_content "
            "(toolref.acp)"
        )
    _members(item, spec, f"a {kind} content item", "", f"make it with {_HOW[kind]}")
    return dict(item)


def checked_location(item: Any) -> dict[str, Any]:
    """`item` when ACP v1 takes it as a location (an absolute path, a uint32 line); else
    `AcpError` saying what to give."""
    fix = "make it with location(path, line) (toolref.acp)"
    if isinstance(item, Mapping) and (not isinstance(item.get("path"), str) or not item["path"]):
        raise AcpError(f"a location's path is {item.get('path')!r}: give the file's absolute path")
    _members(item, _LOCATION, "a location", "", fix)
    return dict(item)
