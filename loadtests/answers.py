"""Answers: the bytes a chat backend sends back over a whole conversation, with toolref and
without, so that what edits save on upload is not spent again on the way down.

Each shared trace is replayed turn by turn: a request per model call (the conversation so
far, as a client would send it), answered by a backend that returns the next assistant
message. The same backend runs bare and behind `ToolRefMiddleware` on the real registry (in
process, on an embedded engine), its client a `ToolReferenceManager` (edits once the
backend says it reads them). An answer counts its status line, headers and body, as
HTTP/1.1 puts them on the wire (headers a server adds to both, such as Date, are left out
of both).
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from typing import Any

import httpx
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from loadtests.bandwidth import on_the_wire
from loadtests.report import Section
from loadtests.traces import Trace
from toolref import AsyncRegistryClient, ToolReferenceManager, ToolRefMiddleware, formats
from toolref_server.app import create_app
from toolref_server.embedded import EmbeddedEngine
from toolref_server.settings import Settings

TARGET = 1.5


def http_size(response: httpx.Response) -> int:
    """Bytes of the answer on an HTTP/1.1 wire: status line, headers, blank line, body."""
    head = len(f"HTTP/1.1 {response.status_code} {response.reason_phrase}\r\n")
    head += sum(len(k) + len(v) + 4 for k, v in response.headers.raw)
    return head + 2 + len(response.content)


def backend(replies: dict[int, dict[str, Any]]) -> Starlette:
    """Answers a conversation of n messages with the assistant message that came next."""

    async def chat(request: Request) -> Response:
        messages = (await request.json())["messages"]
        return JSONResponse({"message": replies[len(messages)]})

    return Starlette(routes=[Route("/chat", chat, methods=["POST"])])


async def _replay(url: str, trace: Trace) -> list[int]:
    """Answer bytes summed over the conversation: bare, and with toolref (edits)."""
    fmt = formats.detect(trace.messages)
    messages = [on_the_wire(m, fmt.name) for m in trace.messages]
    cuts = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and i > 0]
    replies = {i: messages[i] for i in cuts}
    redis = Redis.from_url(url)
    await redis.flushall()
    service = create_app(Settings(redis_url="unused"), redis=redis)
    totals = []
    async with service.router.lifespan_context(service):
        for make in _clients(service):
            app, manager = make(backend(replies))
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://backend"
            ) as http:
                total = 0
                for cut in cuts:
                    body = {"messages": messages[:cut]}
                    if manager is None:
                        answer = await http.post("/chat", json=body)
                    else:
                        answer = await manager.apost(http, "/chat", json=body)
                    answer.raise_for_status()
                    total += http_size(answer)
                totals.append(total)
    await redis.aclose()
    return totals


Client = Callable[[Starlette], tuple[Any, ToolReferenceManager | None]]


def _clients(service: Any) -> list[Client]:
    def registry() -> AsyncRegistryClient:
        return AsyncRegistryClient(
            "http://localhost:8750", transport=httpx.ASGITransport(app=service)
        )

    def bare(app: Starlette) -> tuple[Any, None]:
        return app, None

    def with_edits(app: Starlette) -> tuple[Any, ToolReferenceManager]:
        return ToolRefMiddleware(app, registry()), ToolReferenceManager()

    return [bare, with_edits]


def run(traces: list[Trace]) -> Section:
    rows = []
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="toolref-answers-") as folder:
        engine = EmbeddedEngine(folder, config={"appendonly": "no", "save": '""'})
        engine.start()
        try:
            for trace in traces:
                bare, edits = asyncio.run(_replay(engine.url, trace))
                worst = max(worst, edits / bare)
                rows.append([trace.name, f"{bare:,}", f"{edits:,} ({edits / bare:.2f}x)"])
        finally:
            engine.stop()
    verdict = "PASS" if worst <= TARGET else "FAIL"
    return Section(
        title="Answers",
        intro=(
            "Bytes a chat backend answers over each shared conversation (one request per "
            "model call, answered with the next assistant message), bare and behind "
            "`ToolRefMiddleware`, counted as HTTP/1.1 sends them: status line, headers and "
            "body. With toolref an answer adds the recipe kept (`Toolref-History`), that the "
            "backend reads edits (`Toolref-Edits`) and what the request saved "
            "(`Toolref-Savings`); its body is the app's, untouched."
        ),
        header=["trace", "bare backend", "toolref (edits)"],
        rows=rows,
        figures={"worst": worst},
        verdicts=[
            f"{verdict}: answers with toolref are at most {worst:.2f}x a bare backend's, "
            f"summed over each conversation (target <= {TARGET})"
        ],
    )
