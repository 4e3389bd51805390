"""The `Toolref-References` header as every toolref backend writes it: JSON in ASCII (`\\u`
escapes), so any call id fits a header, and both SDKs read it back with a JSON parser.

The JS helper (`client_sdk/js/src/backend.ts`, pinned by its vitest "Toolref-References:
any call id, in ASCII") writes `HEADER` for these references; the Python middleware writes
the same bytes, and the Python SDK's manager reads them (it confirms the refs). These pass
before and after issue 28's fix of the JS helper: they pin the side it now agrees with."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import httpx

from toolref import ToolReferenceManager
from toolref.receiving.middleware import _with_references_header
from toolref.wire.headers import REFERENCES_HEADER

REF = "tr_aaaaaaaaaaaaaaaaaaaaaaaaaa"
HEADER = '{"call_\\u20ac":"tr_aaaaaaaaaaaaaaaaaaaaaaaaaa"}'


def conversation(result: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "read"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_€",
                    "type": "function",
                    "function": {"name": "read", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_€", "content": result},
    ]


def build(content: bytes, headers: dict[str, str]) -> httpx.Request:
    return httpx.Request("POST", "http://chat.test/chat", content=content, headers=headers)


def test_the_middleware_writes_the_header_in_ascii() -> None:
    start = _with_references_header({"headers": []}, {"call_€": REF})
    assert start["headers"] == [(b"toolref-references", HEADER.encode("ascii"))]


def test_the_python_sdk_confirms_the_refs_of_that_header() -> None:
    manager = ToolReferenceManager(history_refs=False)
    body = {"messages": conversation("x" * 2_000)}
    exchange = manager.exchange(build, body, format="openai-chat")
    first = next(exchange)
    assert isinstance(first, httpx.Request)
    sent = json.loads(first.content)
    assert sent["messages"][2]["content"] == "x" * 2_000  # not confirmed yet: in full
    answer = httpx.Response(
        200, json={}, headers={"Toolref-Protocol": "2", REFERENCES_HEADER: HEADER}
    )
    with contextlib.suppress(StopIteration):
        exchange.send(answer)
    assert REF in manager.confirmed
