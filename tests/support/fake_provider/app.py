"""The fake provider as an ASGI app: routes per API, a model answering, every request kept.

Anthropic Messages (`POST /v1/messages`, `?beta=true` too, and `/v1/messages/count_tokens`),
OpenAI Chat Completions (`POST /v1/chat/completions`) and OpenAI Responses
(`POST /v1/responses`), streamed when the request says `"stream": true` (`delay` seconds
between events, as a model's tokens come), one JSON answer otherwise; and the Responses
WebSocket mode (`GET /v1/responses` upgraded: `sockets`; `websockets=False` refuses it).
`GET /_fake/requests` lists a summary per request, `GET /_fake/requests/N` is request N's
body.

    python -m tests.support.fake_provider --port 8090 --calls 20 --workdir /tmp/work
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute

from tests.support.fake_provider import sockets
from tests.support.fake_provider.reading import Recorded, decode_body, tool_results
from tests.support.fake_provider.script import Script
from tests.support.fake_provider.sockets import SocketLog
from tests.support.fake_provider.wire import APIS, Api, Reply, frames, whole

# The model: the answer to a request of an API (its JSON body).
Model = Callable[[Api, dict[str, Any]], Reply]


def _tokens(body: bytes) -> int:
    return max(1, len(body) // 4)


class FakeProvider:
    """The fake: `model` answers (one per API when given a dict), `requests` as they came
    (none kept without `record`, for runs that last hours), `dump` a directory each request
    is also written to, `delay` seconds between streamed events."""

    def __init__(
        self,
        model: Model | dict[Api, Model],
        dump: Path | None = None,
        delay: float = 0.0,
        record: bool = True,
        websockets: bool = True,
    ) -> None:
        self.models: dict[Api, Model] = (
            dict(model) if isinstance(model, dict) else dict.fromkeys(APIS, model)
        )
        self.requests: list[Recorded] = []
        self.sockets: list[SocketLog] = []
        self.dump = dump
        self.delay = delay
        self.record = record
        self._ids = itertools.count()
        ws = [WebSocketRoute("/v1/responses", sockets.route(self))] if websockets else []
        self.app = Starlette(
            routes=[
                *ws,
                Route("/v1/messages", self._answer("messages"), methods=["POST"]),
                Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
                Route("/v1/chat/completions", self._answer("chat"), methods=["POST"]),
                Route("/v1/responses", self._answer("responses"), methods=["POST"]),
                Route("/_fake/requests", self._list, methods=["GET"]),
                Route("/_fake/requests/{index:int}", self._one, methods=["GET"]),
                Route("/{rest:path}", self._other, methods=["GET", "POST", "HEAD", "PUT"]),
            ]
        )

    # what was asked

    def bodies(self) -> list[bytes]:
        """The body of every request, in order, as the app got it (decoded)."""
        return [r.body for r in self.requests]

    def turns(self, api: Api) -> list[Recorded]:
        """The requests of one API that offered tools (the session's turns; side calls and
        token counts left out)."""
        return [
            r
            for r in self.requests
            if r.api == api and r.answer not in ("side", "count_tokens", "prewarm")
        ]

    def next_index(self) -> int:
        return next(self._ids)

    async def _record(self, request: Request) -> Recorded:
        wire = await request.body()
        encoding = request.headers.get("content-encoding", "")
        record = Recorded(
            index=self.next_index(),
            method=request.method,
            path=request.url.path,
            query=request.url.query,
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw],
            wire=wire,
            body=decode_body(wire, encoding) if encoding else wire,
        )
        return self.keep(record)

    def keep(self, record: Recorded) -> Recorded:
        """Keep a request (when recording), and dump it (when dumping)."""
        if self.record:
            self.requests.append(record)
        if self.dump is not None:
            self.dump.mkdir(parents=True, exist_ok=True)
            stem = self.dump / f"{record.index:03d}"
            stem.with_suffix(".body").write_bytes(record.body)
            meta = {**record.summary(), "headers": record.headers}
            stem.with_suffix(".json").write_text(json.dumps(meta, indent=1))
        return record

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

    # the answers

    def _answer(self, api: Api) -> Callable[[Request], Any]:
        async def answer(request: Request) -> Response:
            record, body = await self._parse(request)
            if isinstance(body, Response):
                return body
            record.api, record.stream = api, bool(body.get("stream"))
            record.results = len(tool_results(api, body))
            reply = self.models[api](api, body)
            record.answer = reply.answer
            model, tokens = str(body.get("model", "fake")), _tokens(record.body)
            if not record.stream:
                return JSONResponse(whole(api, reply, model, tokens))
            options = body.get("stream_options") or {}
            usage = bool(isinstance(options, dict) and options.get("include_usage"))
            return self._stream(frames(api, reply, model, tokens, usage))

        return answer

    def _stream(self, events: list[bytes]) -> StreamingResponse:
        async def paced() -> AsyncIterator[bytes]:
            for n, event in enumerate(events):
                if n and self.delay:
                    await asyncio.sleep(self.delay)
                yield event

        return StreamingResponse(
            paced(), media_type="text/event-stream", headers={"cache-control": "no-cache"}
        )

    async def _count_tokens(self, request: Request) -> Response:
        record = await self._record(request)
        record.api, record.answer = "messages", "count_tokens"
        return JSONResponse({"input_tokens": _tokens(record.body)})

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


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A fake LLM provider running a scripted session")
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
