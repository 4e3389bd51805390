"""A fake LLM provider for end-to-end runs of real agent CLIs (and of the official SDKs).

It speaks, as the providers do, with server-sent events when the request says `"stream":
true` and one JSON answer otherwise:

- Anthropic Messages: `POST /v1/messages` (`?beta=true` too) and
  `POST /v1/messages/count_tokens` (`{"input_tokens": N}`);
- OpenAI Chat Completions: `POST /v1/chat/completions`;
- OpenAI Responses: `POST /v1/responses`.

The "model" is a script, and stateless: it counts the tool results already in the request
(k of them) and answers tool call k while k < `calls`, then a final text. A resent or
retried request therefore gets the same answer. Tool calls alternate between a shell tool
(`echo e2e-out-$((1000+k)) | tee step-kk.txt`: the output is computed by the shell, so it
proves the command really ran) and a read tool (the file the previous step wrote), using
the names and argument shapes of the tools the request offers (`Bash`/`Read` for Claude
Code, `shell`/`exec_command` for Codex, `run_shell_command`/`read_file` for Qwen Code).
Requests without tools (titles, summaries, quota probes) get plain text.

Every request is recorded (method, path, headers, the bytes as they came over the wire
and decoded from `Content-Encoding`), kept in `FakeProvider.requests`, listed by
`GET /_fake/requests` (one summary per request; `GET /_fake/requests/N` is request N's
body), and optionally written to a directory; with `record=False` (`--no-record`) none is
kept, for runs that last hours.

    python -m tests.e2e.fake_provider --port 8090 --calls 20 --workdir /tmp/work
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import itertools
import json
import shlex
import time
import zlib
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import zstandard
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

Api = Literal["messages", "chat", "responses"]
APIS: tuple[Api, ...] = ("messages", "chat", "responses")
FINAL_TEXT = "E2E-DONE: the scripted session is complete."
SIDE_TEXT = "Scripted side answer."
PIECE = 32  # characters of text or arguments per streamed event

SHELL_TOOLS = ("Bash", "run_shell_command", "shell_command", "exec_command", "shell")
READ_TOOLS = ("Read", "read_file", "ReadFile")


def marker(k: int) -> str:
    """What step k's shell command prints (the shell computes it: the command's text
    does not contain it)."""
    return f"e2e-out-{1000 + k}"


def step_file(workdir: Path, k: int) -> Path:
    return workdir / f"step-{k:02d}.txt"


# --- the script ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Call:
    """One scripted tool call: the tool's name, its arguments, and the text its result
    must contain once the agent ran it."""

    name: str
    arguments: dict[str, Any]
    expect: str


@dataclass(frozen=True, slots=True)
class Script:
    """`calls` tool calls in `workdir`, the kinds cycling through `kinds` ("shell" or
    "read"; a read needs the file the step before wrote, so step 0 is always a shell
    call), the tools found by the first of `shell`/`read` names the request offers.
    `settle`: for an agent that may lose the output of a command that exits at once."""

    calls: int
    workdir: Path
    kinds: tuple[str, ...] = ("shell", "read")
    shell: tuple[str, ...] = SHELL_TOOLS
    read: tuple[str, ...] = READ_TOOLS
    settle: float = 0.0  # seconds each shell command sleeps after its output

    def kind(self, k: int) -> str:
        return "shell" if k == 0 else self.kinds[k % len(self.kinds)]

    def expected(self, k: int) -> str:
        """The text tool result k must contain."""
        return marker(k) if self.kind(k) == "shell" else marker(k - 1)

    def step(self, k: int, tools: dict[str, dict[str, Any]]) -> Call:
        """Tool call k, with tools (name -> JSON schema of its arguments) from the request."""
        if self.kind(k) == "read":
            name = _first(self.read, tools)
            if name is not None:
                path = str(step_file(self.workdir, k - 1))
                return Call(name, read_arguments(tools[name], path), marker(k - 1))
            command = f"cat {shlex.quote(str(step_file(self.workdir, k - 1)))}"
            expect = marker(k - 1)
        else:
            target = shlex.quote(str(step_file(self.workdir, k)))
            command = f"echo e2e-out-$((1000+{k})) | tee {target} && ls"
            expect = marker(k)
        if self.settle:
            command += f"; sleep {self.settle}"
        name = _first(self.shell, tools)
        if name is None:
            raise LookupError(f"no shell tool among {sorted(tools)} (looked for {self.shell})")
        return Call(name, shell_arguments(tools[name], command, self.workdir), expect)


def _first(names: Sequence[str], tools: dict[str, dict[str, Any]]) -> str | None:
    return next((name for name in names if name in tools), None)


def shell_arguments(schema: dict[str, Any], command: str, workdir: Path) -> dict[str, Any]:
    """Arguments running `command` for a shell tool with this schema."""
    props: dict[str, Any] = schema.get("properties") or {}
    args: dict[str, Any] = {}
    if "cmd" in props and "command" not in props:
        args["cmd"] = command  # Codex's exec_command
    elif (props.get("command") or {}).get("type") == "array":
        args["command"] = ["bash", "-lc", command]  # Codex's shell
    else:
        args["command"] = command
    if "workdir" in props:
        args["workdir"] = str(workdir)
    required = set(schema.get("required") or ())
    if "description" in props:
        args["description"] = "scripted e2e step"
    if "is_background" in props and "is_background" in required:
        args["is_background"] = False
    return args


def read_arguments(schema: dict[str, Any], path: str) -> dict[str, Any]:
    props: dict[str, Any] = schema.get("properties") or {}
    key = next((k for k in ("file_path", "absolute_path", "path") if k in props), "file_path")
    return {key: path}


# --- what a request carries ---------------------------------------------------------------


def offered_tools(api: Api, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The request's tools: name -> the JSON schema of the arguments ({} when none)."""
    tools: dict[str, dict[str, Any]] = {}
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
    return tools


def _text_of(content: Any) -> str:
    """Text of a tool result's content: a string, or parts with `text`."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text_of(part) for part in content)
    if isinstance(content, dict):
        if isinstance(content.get("text"), str):
            return str(content["text"])
        return _text_of(content.get("content"))
    return ""


def tool_results(api: Api, body: dict[str, Any]) -> list[str]:
    """The texts of the tool results in a request, in order."""
    if api == "messages":
        return [
            _text_of(block.get("content"))
            for message in body.get("messages") or ()
            if isinstance(message, dict) and isinstance(message.get("content"), list)
            for block in message["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]
    if api == "chat":
        return [
            _text_of(message.get("content"))
            for message in body.get("messages") or ()
            if isinstance(message, dict) and message.get("role") == "tool"
        ]
    items = body.get("input")
    return [
        _text_of(item.get("output"))
        for item in (items if isinstance(items, list) else ())
        if isinstance(item, dict) and str(item.get("type", "")).endswith("_call_output")
    ]


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


# --- the answers, per API -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    """A tool call or a text."""

    text: str = ""
    call: Call | None = None
    index: int = 0  # the step, for ids

    @property
    def arguments(self) -> str:
        return json.dumps(self.call.arguments) if self.call else ""


def _pieces(text: str) -> list[str]:
    return [text[i : i + PIECE] for i in range(0, len(text), PIECE)] or [""]


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def _tokens(body: bytes) -> int:
    return max(1, len(body) // 4)


def anthropic_block(reply: Reply) -> dict[str, Any]:
    if reply.call is None:
        return {"type": "text", "text": reply.text}
    return {
        "type": "tool_use",
        "id": f"toolu_e2e_{reply.index:03d}",
        "name": reply.call.name,
        "input": reply.call.arguments,
    }


def anthropic_message(reply: Reply, model: str, input_tokens: int) -> dict[str, Any]:
    return {
        "id": f"msg_e2e_{reply.index:03d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [anthropic_block(reply)],
        "stop_reason": "tool_use" if reply.call else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": 8,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def anthropic_frames(reply: Reply, model: str, input_tokens: int) -> list[bytes]:
    whole = anthropic_message(reply, model, input_tokens)
    start = {**whole, "content": [], "stop_reason": None, "usage": {**whole["usage"]}}
    start["usage"]["output_tokens"] = 1
    block = anthropic_block(reply)
    if reply.call is None:
        opened = {**block, "text": ""}
        deltas = [{"type": "text_delta", "text": p} for p in _pieces(reply.text)]
    else:
        opened = {**block, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(reply.arguments)]
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": opened},
        ),
        *(
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": d})
            for d in deltas
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": 8},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return [_sse(data, event) for event, data in events]


def chat_completion(reply: Reply, model: str, input_tokens: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.call is not None:
        message["tool_calls"] = [
            {
                "id": f"call_e2e_{reply.index:03d}",
                "type": "function",
                "function": {"name": reply.call.name, "arguments": reply.arguments},
            }
        ]
    return {
        "id": f"chatcmpl-e2e-{reply.index:03d}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if reply.call else "stop",
            }
        ],
        "usage": _chat_usage(input_tokens),
    }


def _chat_usage(input_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": input_tokens,
        "completion_tokens": 8,
        "total_tokens": input_tokens + 8,
    }


def chat_frames(reply: Reply, model: str, input_tokens: int, usage: bool) -> list[bytes]:
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-e2e-{reply.index:03d}",
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    if reply.call is None:
        chunks = [chunk({"role": "assistant", "content": ""})]
        chunks += [chunk({"content": p}) for p in _pieces(reply.text)]
        chunks.append(chunk({}, "stop"))
    else:
        head = {
            "index": 0,
            "id": f"call_e2e_{reply.index:03d}",
            "type": "function",
            "function": {"name": reply.call.name, "arguments": ""},
        }
        chunks = [chunk({"role": "assistant", "content": None, "tool_calls": [head]})]
        chunks += [
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]})
            for p in _pieces(reply.arguments)
        ]
        chunks.append(chunk({}, "tool_calls"))
    if usage:
        chunks.append({**chunk({}), "choices": [], "usage": _chat_usage(input_tokens)})
    return [*(_sse(c) for c in chunks), b"data: [DONE]\n\n"]


def responses_item(reply: Reply) -> dict[str, Any]:
    if reply.call is None:
        return {
            "type": "message",
            "id": f"msg_e2e_{reply.index:03d}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
        }
    return {
        "type": "function_call",
        "id": f"fc_e2e_{reply.index:03d}",
        "call_id": f"call_e2e_{reply.index:03d}",
        "name": reply.call.name,
        "arguments": reply.arguments,
        "status": "completed",
    }


def responses_response(
    reply: Reply, model: str, input_tokens: int, status: str = "completed"
) -> dict[str, Any]:
    done = status == "completed"
    return {
        "id": f"resp_e2e_{reply.index:03d}",
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "output": [responses_item(reply)] if done else [],
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
        "usage": (
            {
                "input_tokens": input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 8,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": input_tokens + 8,
            }
            if done
            else None
        ),
    }


def responses_frames(reply: Reply, model: str, input_tokens: int) -> list[bytes]:
    item = responses_item(reply)
    created = responses_response(reply, model, input_tokens, "in_progress")
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": created},
        {"type": "response.in_progress", "response": created},
    ]
    if reply.call is None:
        part = {"type": "output_text", "text": "", "annotations": []}
        where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        events += [
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**item, "status": "in_progress", "content": []},
            },
            {"type": "response.content_part.added", **where, "part": part},
            *(
                {"type": "response.output_text.delta", **where, "delta": p, "logprobs": []}
                for p in _pieces(reply.text)
            ),
            {"type": "response.output_text.done", **where, "text": reply.text, "logprobs": []},
            {"type": "response.content_part.done", **where, "part": item["content"][0]},
        ]
    else:
        where = {"item_id": item["id"], "output_index": 0}
        events += [
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**item, "status": "in_progress", "arguments": ""},
            },
            *(
                {"type": "response.function_call_arguments.delta", **where, "delta": p}
                for p in _pieces(reply.arguments)
            ),
            {
                "type": "response.function_call_arguments.done",
                **where,
                "arguments": reply.arguments,
            },
        ]
    events += [
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": responses_response(reply, model, input_tokens)},
    ]
    return [_sse({**e, "sequence_number": n}, e["type"]) for n, e in enumerate(events)]


# --- the app ------------------------------------------------------------------------------


class FakeProvider:
    """The fake: `scripts` per API (one `Script` for all when given one), `requests` as
    they came (unless not `record`), `dump` a directory each request is also written to."""

    def __init__(
        self,
        script: Script | dict[Api, Script],
        dump: Path | None = None,
        delay: float = 0.0,
        record: bool = True,
    ) -> None:
        self.scripts: dict[Api, Script] = (
            dict(script) if isinstance(script, dict) else dict.fromkeys(APIS, script)
        )
        self.requests: list[Recorded] = []
        self.dump = dump
        self.delay = delay  # seconds between streamed events
        self.record = record
        self._ids = itertools.count()
        self.app = Starlette(
            routes=[
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/_fake/requests", self._list, methods=["GET"]),
                Route("/_fake/requests/{index:int}", self._one, methods=["GET"]),
                Route("/{rest:path}", self._other, methods=["GET", "POST", "HEAD", "PUT"]),
            ]
        )

    # what was asked

    def turns(self, api: Api) -> list[Recorded]:
        """The requests of one API that offered tools (the session's turns; side calls and
        token counts left out)."""
        return [
            r for r in self.requests if r.api == api and r.answer not in ("side", "count_tokens")
        ]

    async def _record(self, request: Request) -> Recorded:
        wire = await request.body()
        encoding = request.headers.get("content-encoding", "")
        record = Recorded(
            index=next(self._ids),
            method=request.method,
            path=request.url.path,
            query=request.url.query,
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw],
            wire=wire,
            body=decode_body(wire, encoding) if encoding else wire,
        )
        if self.record:
            self.requests.append(record)
        if self.dump is not None:
            self.dump.mkdir(parents=True, exist_ok=True)
            stem = self.dump / f"{record.index:03d}"
            stem.with_suffix(".body").write_bytes(record.body)
            meta = {**record.summary(), "headers": record.headers}
            stem.with_suffix(".json").write_text(json.dumps(meta, indent=1))
        return record

    def _reply(self, api: Api, record: Recorded, body: dict[str, Any]) -> Reply:
        record.api, record.stream = api, bool(body.get("stream"))
        tools = offered_tools(api, body)
        record.results = k = len(tool_results(api, body))
        if not tools:
            record.answer = "side"
            return Reply(text=SIDE_TEXT, index=k)
        script = self.scripts[api]
        if k >= script.calls:
            record.answer = "text"
            return Reply(text=f"{FINAL_TEXT} ({k} tool calls)", index=k)
        try:
            call = script.step(k, tools)
        except LookupError as exc:
            record.answer = f"error: {exc}"
            return Reply(text=f"E2E-ERROR: {exc}", index=k)
        record.answer = f"tool:{call.name}"
        return Reply(call=call, index=k)

    def _stream(self, frames: list[bytes]) -> StreamingResponse:
        async def events() -> AsyncIterator[bytes]:
            for n, frame in enumerate(frames):
                if n and self.delay:
                    await asyncio.sleep(self.delay)
                yield frame

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"cache-control": "no-cache"}
        )

    async def _parse(self, request: Request) -> tuple[Recorded, dict[str, Any] | Response]:
        record = await self._record(request)
        try:
            body = json.loads(record.body)
        except ValueError as exc:
            record.answer = f"error: body is not JSON ({exc})"
            return record, JSONResponse({"error": {"message": record.answer}}, status_code=400)
        if not isinstance(body, dict):
            record.answer = "error: body is not a JSON object"
            return record, JSONResponse({"error": {"message": record.answer}}, status_code=400)
        return record, body

    async def _messages(self, request: Request) -> Response:
        record, body = await self._parse(request)
        if isinstance(body, Response):
            return body
        reply = self._reply("messages", record, body)
        model, tokens = str(body.get("model", "fake")), _tokens(record.body)
        if record.stream:
            return self._stream(anthropic_frames(reply, model, tokens))
        return JSONResponse(anthropic_message(reply, model, tokens))

    async def _count_tokens(self, request: Request) -> Response:
        record = await self._record(request)
        record.api, record.answer = "messages", "count_tokens"
        return JSONResponse({"input_tokens": _tokens(record.body)})

    async def _chat(self, request: Request) -> Response:
        record, body = await self._parse(request)
        if isinstance(body, Response):
            return body
        reply = self._reply("chat", record, body)
        model, tokens = str(body.get("model", "fake")), _tokens(record.body)
        if record.stream:
            options = body.get("stream_options") or {}
            usage = bool(isinstance(options, dict) and options.get("include_usage"))
            return self._stream(chat_frames(reply, model, tokens, usage))
        return JSONResponse(chat_completion(reply, model, tokens))

    async def _responses(self, request: Request) -> Response:
        record, body = await self._parse(request)
        if isinstance(body, Response):
            return body
        reply = self._reply("responses", record, body)
        model, tokens = str(body.get("model", "fake")), _tokens(record.body)
        if record.stream:
            return self._stream(responses_frames(reply, model, tokens))
        return JSONResponse(responses_response(reply, model, tokens))

    async def _list(self, request: Request) -> Response:
        return JSONResponse([r.summary() for r in self.requests])

    async def _one(self, request: Request) -> Response:
        index: int = request.path_params["index"]
        if not 0 <= index < len(self.requests):
            return JSONResponse({"error": "no such request"}, status_code=404)
        return Response(self.requests[index].body, media_type="application/json")

    async def _other(self, request: Request) -> Response:
        record = await self._record(request)
        record.answer = "404"
        return JSONResponse({"error": {"message": f"fake: no {request.url.path}"}}, status_code=404)


# --- sizes, for reports -------------------------------------------------------------------


def sizes(records: Iterable[Recorded]) -> list[tuple[int, int, int]]:
    """(tool results, wire bytes, decoded bytes) per request."""
    return [(r.results, len(r.wire), len(r.body)) for r in records]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--calls", type=int, default=20, help="tool calls before the final text")
    parser.add_argument("--workdir", type=Path, required=True, help="where the agent works")
    parser.add_argument("--dump", type=Path, help="write each request's body and headers here")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds between streamed events")
    parser.add_argument("--no-record", action="store_true", help="keep no requests in memory")
    args = parser.parse_args(argv)
    import uvicorn

    script = Script(args.calls, args.workdir.resolve())
    fake = FakeProvider(script, dump=args.dump, delay=args.delay, record=not args.no_record)
    uvicorn.run(fake.app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
