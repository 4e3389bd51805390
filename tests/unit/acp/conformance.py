"""Every ACP notification a test sees is checked against the official v1 schema
(`../shared/acp/schema.v1.json`; required under CI=true, skipped only locally when absent),
for keys outside the spec's field lists, for nulls, for a lossless round trip through
the `agent-client-protocol` package's pydantic models, and for its nesting as a whole
JSON-RPC line: what serde_json (Rust ACP clients) parses."""

from __future__ import annotations

import json
import os
from functools import cache
from typing import Any

import pytest
from acp.schema import SessionNotification
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from tests.conftest import SHARED

SCHEMA_PATH = SHARED / "acp" / "schema.v1.json"
TOOL_CALL_FIELDS = frozenset(
    {
        "sessionUpdate",
        "toolCallId",
        "title",
        "kind",
        "status",
        "content",
        "locations",
        "rawInput",
        "rawOutput",
        "_meta",
    }
)
# serde_json's default recursion limit: it parses 127 levels of arrays and objects in one
# JSON text, and its 128th open bracket is "recursion limit exceeded".
SERDE_JSON_DEPTH = 127
ALLOWED = {
    "tool_call": TOOL_CALL_FIELDS,
    "tool_call_update": TOOL_CALL_FIELDS,
    "plan": frozenset({"sessionUpdate", "entries", "_meta"}),
}


@cache
def validator() -> Draft202012Validator | None:
    if not SCHEMA_PATH.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"required under CI=true: the ACP schema at {SCHEMA_PATH}")
        return None
    schema = json.loads(SCHEMA_PATH.read_text())
    return Draft202012Validator(
        {
            "$schema": schema["$schema"],
            "$defs": schema["$defs"],
            "$ref": "#/$defs/SessionNotification",
        }
    )


def _no_nulls(value: Any, where: str) -> None:
    if value is None:
        raise AssertionError(f"null at {where}: v1 reads null as no change, never send it")
    if isinstance(value, dict):
        for key, item in value.items():
            if key not in ("rawInput", "rawOutput"):  # any JSON, nested nulls included
                if key == "_meta" and item is not None:
                    continue  # opaque: carried as given, nulls inside included
                _no_nulls(item, f"{where}.{key}")
    elif isinstance(value, list):
        for n, item in enumerate(value):
            _no_nulls(item, f"{where}[{n}]")


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in a JSON text, counted as serde_json
    counts it (the outermost `{` is level 1)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def check(notification: dict[str, Any]) -> None:
    """Raise AssertionError unless `notification` (session/update params) conforms."""
    checker = validator()
    if checker is not None:
        error = best_match(checker.iter_errors(notification))
        assert error is None, f"{error.message} at {list(error.absolute_path)}"
    assert set(notification) == {"sessionId", "update"}, notification
    update = notification["update"]
    extra = set(update) - ALLOWED[update["sessionUpdate"]]
    assert not extra, f"keys outside the spec: {sorted(extra)}"
    _no_nulls(update, "update")
    model = SessionNotification.model_validate(notification)
    dumped = model.model_dump(mode="json", by_alias=True, exclude_unset=True)
    assert dumped == notification, (dumped, notification)
    json.dumps(notification)  # plain JSON, no enums or other Python objects
    line = json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": notification})
    depth = json_depth(line)
    assert depth <= SERDE_JSON_DEPTH, f"the JSON-RPC line is {depth} levels deep"
    assert json.loads(json.dumps(notification)) == notification
