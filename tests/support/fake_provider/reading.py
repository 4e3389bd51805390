"""What a request to the fake provider carries (its tools, its tool results, the turn it
asks about), and how the fake records it."""

from __future__ import annotations

import gzip
import json
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

import zstandard

from tests.support.fake_provider.wire import Api


def offered_tools(api: Api, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The request's tools: name -> the JSON schema of the arguments ({} when none)."""
    tools: dict[str, dict[str, Any]] = {}
    if api == "gemini":
        return _gemini_tools(body)
    for tool in body.get("tools") or ():
        if not isinstance(tool, dict):
            continue
        if api == "chat":
            function = tool.get("function") or {}
            name, schema = function.get("name"), function.get("parameters")
        elif api == "messages":
            name, schema = tool.get("name"), tool.get("input_schema")
        else:
            name, schema = tool.get("name"), tool.get("parameters")
        if isinstance(name, str):
            tools[name] = schema if isinstance(schema, dict) else {}
    if api == "responses":
        for item in _items(body):
            if item.get("type") == "additional_tools":
                _responses_tools(item.get("tools"), tools, 0)
    return tools


def _responses_tools(found: Any, tools: dict[str, dict[str, Any]], depth: int) -> None:
    """The tools of a Responses `additional_tools` item (the latest Codex's default model
    gets its tools so), namespaces opened (depth bounded at 4): a function's schema, or a
    freeform (`custom`) tool's `{"x-custom": its format}`."""
    for tool in found if isinstance(found, list) and depth < 4 else ():
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            continue
        if tool.get("type") == "namespace":
            _responses_tools(tool.get("tools"), tools, depth + 1)
        elif tool.get("type") == "custom":
            tools[tool["name"]] = {"x-custom": tool.get("format") or {}}
        else:
            schema = tool.get("parameters")
            tools[tool["name"]] = schema if isinstance(schema, dict) else {}


def _gemini_tools(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Gemini's `tools[].functionDeclarations[]`, their schema in `parametersJsonSchema`
    (Gemini CLI) or `parameters`."""
    tools: dict[str, dict[str, Any]] = {}
    for tool in body.get("tools") or ():
        for declared in (tool.get("functionDeclarations") or ()) if isinstance(tool, dict) else ():
            if not isinstance(declared, dict) or not isinstance(declared.get("name"), str):
                continue
            schema = declared.get("parametersJsonSchema", declared.get("parameters"))
            tools[declared["name"]] = schema if isinstance(schema, dict) else {}
    return tools


def _gemini_parts(body: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The `kind` members (`functionCall`, `functionResponse`) of every part of every
    content, in order."""
    found = body.get("contents")
    contents = [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []
    return [
        part[kind]
        for content in contents
        for part in content.get("parts") or ()
        if isinstance(part, dict) and isinstance(part.get(kind), dict)
    ]


def text_of(content: Any) -> str:
    """Text of a message's or a tool result's content: a string, or parts with `text`."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(text_of(part) for part in content)
    if isinstance(content, dict):
        if isinstance(content.get("text"), str):
            return str(content["text"])
        if isinstance(content.get("output"), str):  # Gemini's functionResponse.response
            return str(content["output"])
        return text_of(content.get("content"))
    return ""


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    found = body.get("messages")
    return [m for m in found if isinstance(m, dict)] if isinstance(found, list) else []


def _items(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A Responses request's input items (a string input is one user message)."""
    found = body.get("input")
    if isinstance(found, str):
        return [{"role": "user", "content": found}]
    return [i for i in found if isinstance(i, dict)] if isinstance(found, list) else []


def _blocks(message: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]


def tool_results(api: Api, body: dict[str, Any]) -> list[str]:
    """The texts of the tool results in a request, in order."""
    if api == "messages":
        return [
            text_of(block.get("content"))
            for message in _messages(body)
            for block in _blocks(message, "tool_result")
        ]
    if api == "chat":
        return [text_of(m.get("content")) for m in _messages(body) if m.get("role") == "tool"]
    if api == "gemini":
        return [text_of(r.get("response")) for r in _gemini_parts(body, "functionResponse")]
    return [
        text_of(item.get("output"))
        for item in _items(body)
        if str(item.get("type", "")).endswith("_call_output")
    ]


@dataclass(frozen=True, slots=True)
class Turn:
    """What a conversation ends with: the user's last words, when they spoke last; the last
    tool result, when one came last; and the tool calls made so far."""

    user: str | None
    result: str | None
    calls: int


def last_turn(api: Api, body: dict[str, Any]) -> Turn:
    if api == "gemini":
        found = body.get("contents")
        contents = [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []
        parts = (
            [p for p in (contents[-1].get("parts") or ()) if isinstance(p, dict)]
            if contents
            else []
        )
        calls = len(_gemini_parts(body, "functionCall"))
        answered = [
            p["functionResponse"] for p in parts if isinstance(p.get("functionResponse"), dict)
        ]
        if answered:
            return Turn(None, text_of(answered[-1].get("response")), calls)
        return Turn(text_of(parts), None, calls)
    if api == "responses":
        items = _items(body)
        calls = sum(1 for i in items if i.get("type") == "function_call")
        last = items[-1] if items else {}
        if last.get("type") == "function_call_output":
            return Turn(None, text_of(last.get("output")), calls)
        return Turn(text_of(last.get("content")), None, calls)
    messages = _messages(body)
    last = messages[-1] if messages else {}
    if api == "chat":
        calls = sum(len(m.get("tool_calls") or []) for m in messages)
        if last.get("role") == "tool":
            return Turn(None, text_of(last.get("content")), calls)
        return Turn(text_of(last.get("content")), None, calls)
    calls = sum(len(_blocks(m, "tool_use")) for m in messages)
    results = _blocks(last, "tool_result")
    if results:
        return Turn(None, text_of(results[-1].get("content")), calls)
    return Turn(text_of(last.get("content")), None, calls)


def decode_body(raw: bytes, encoding: str) -> bytes:
    """A request body without its `Content-Encoding` (zstd from Codex, gzip, deflate)."""
    for coding in reversed([c.strip().lower() for c in encoding.split(",") if c.strip()]):
        if coding == "zstd":
            raw = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
        elif coding in ("gzip", "x-gzip"):
            raw = gzip.decompress(raw)
        elif coding == "deflate":
            raw = zlib.decompress(raw)
        elif coding != "identity":
            raise ValueError(f"unsupported content-encoding {coding!r}")
    return raw


@dataclass(slots=True)
class Recorded:
    """One request as the fake got it, and what it answered."""

    index: int
    method: str
    path: str
    query: str
    headers: list[tuple[str, str]]
    wire: bytes  # as it came over the wire
    body: bytes  # without its Content-Encoding
    api: Api | None = None
    stream: bool = False
    results: int = 0  # tool results in the request
    answer: str = ""  # "tool:NAME", "text", "side", "count_tokens", "error: ..."
    at: float = field(default_factory=time.time)

    def json(self) -> Any:
        return json.loads(self.body)

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def summary(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "api": self.api,
            "stream": self.stream,
            "wire_bytes": len(self.wire),
            "body_bytes": len(self.body),
            "content_encoding": self.header("content-encoding"),
            "tool_results": self.results,
            "answer": self.answer,
            "at": self.at,
        }
