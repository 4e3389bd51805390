"""Per-turn cost: the longest shared trace replayed turn by turn through client
(`ToolReferenceManager`), chat backend (`ToolRefMiddleware`) and registry, each its own
process, over sockets; next to the same backend app reached directly with the raw
conversation (the bare turn), in the same run, turn by turn.

The time a turn adds is the toolref turn's time minus the bare turn's. With work
proportional to the new messages it stays level as the history grows: the last 20 turns
must add at most 1.5x what the first 20 do. The registry-to-backend bytes are the hydrate
answers the backend read: with one backend, the history it holds is never sent again.

    python -m loadtests.per_turn          # the section alone
    python -m loadtests.per_turn backend --port P --registry URL   # one backend process
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from loadtests.bandwidth import turns_of
from loadtests.report import Section
from loadtests.service_speed import _server
from loadtests.traces import Trace
from toolref import AsyncRegistryClient, ToolReferenceManager, ToolRefMiddleware
from toolref.wire.encoding import dumps_json
from toolref_server.embedded import EmbeddedEngine, free_port

WINDOW = 20
REPLAYS = 3
TARGET = 1.5  # last window over first window, time added per turn
BYTES_TARGET = 0.10  # registry-to-backend bytes over raw, one backend


# --- the backend process ---------------------------------------------------------------


class Counting(httpx.AsyncBaseTransport):
    """The backend's transport to the registry: counts the answer bytes and the time."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.bytes = 0
        self.seconds = 0.0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        start = time.perf_counter()
        response = await self.inner.handle_async_request(request)
        content = await response.aread()
        self.seconds += time.perf_counter() - start
        self.bytes += len(content)
        return httpx.Response(
            response.status_code, headers=response.headers, content=content, request=request
        )


def backend(registry: str) -> Any:
    """The chat backend: an app that parses the conversation (as any backend must) and
    answers a small JSON body; `/chat` behind the middleware, `/bare` not."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    counting = Counting()

    async def chat(request: Request) -> JSONResponse:
        body = json.loads(await request.body())
        return JSONResponse({"messages": len(body["messages"])})

    async def stats(request: Request) -> JSONResponse:
        return JSONResponse({"bytes": counting.bytes, "seconds": counting.seconds})

    inner = Starlette(
        routes=[
            Route("/chat", chat, methods=["POST"]),
            Route("/bare", chat, methods=["POST"]),
            Route("/stats", stats),
        ]
    )
    client = AsyncRegistryClient(registry, transport=counting, timeout=120)
    return ToolRefMiddleware(inner, client, paths={"/chat"})


def _serve_backend(port: int, registry: str) -> None:
    import uvicorn

    uvicorn.run(backend(registry), port=port, log_level="warning", access_log=False)


# --- the client --------------------------------------------------------------------------


@dataclass
class Turn:
    index: int
    history: int  # raw JSON bytes of the request the client would send
    bare: list[float] = field(default_factory=list)
    toolref: list[float] = field(default_factory=list)
    prepare: list[float] = field(default_factory=list)  # client side, outside the send
    registry: list[float] = field(default_factory=list)  # backend waiting on the registry

    def added(self) -> float:
        return statistics.median(t - b for t, b in zip(self.toolref, self.bare, strict=True))


class Timed(httpx.BaseTransport):
    """The client's transport: time spent sending and waiting, so that the rest of a
    toolref turn is the client's own preparation."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.seconds = 0.0
        self.sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        start = time.perf_counter()
        response = self.inner.handle_request(request)
        response.read()
        self.seconds += time.perf_counter() - start
        self.sent += len(request.content)
        return response


def _stats(http: httpx.Client, url: str) -> tuple[int, float]:
    found = http.get(url + "/stats").json()
    return int(found["bytes"]), float(found["seconds"])


def _replay(
    messages: list[dict[str, Any]], cuts: list[int], backends: list[str], replays: int
) -> tuple[list[Turn], int, int]:
    """Every turn, `replays` times (each replay its own conversation: its first message
    says which), bare and toolref alternating; the backends take toolref turns in turn.
    Returns the turns, the raw bytes and the registry-to-backend bytes of the first replay."""
    turns = [Turn(n, 0) for n in range(len(cuts))]
    raw_total = registry_total = 0
    timed = Timed()
    with httpx.Client(timeout=120) as bare_http, httpx.Client(transport=timed, timeout=120) as http:
        for replay in range(replays):
            manager = ToolReferenceManager()
            first = {**messages[0], "content": f"[replay {replay}] " + json.dumps(messages[0])}
            conversation = [first, *messages[1:]]
            for n, cut in enumerate(cuts):
                body = {"messages": conversation[:cut], "replay": replay}
                target = backends[n % len(backends)]
                start = time.perf_counter()
                content = dumps_json(body)
                answer = bare_http.post(
                    target + "/bare", content=content, headers={"Content-Type": "application/json"}
                )
                turns[n].bare.append(time.perf_counter() - start)
                answer.raise_for_status()
                before_bytes, before_seconds = _stats(bare_http, target)
                waited = timed.seconds
                start = time.perf_counter()
                answer = manager.post(http, target + "/chat", json=body)
                elapsed = time.perf_counter() - start
                answer.raise_for_status()
                after_bytes, after_seconds = _stats(bare_http, target)
                turn = turns[n]
                turn.toolref.append(elapsed)
                turn.prepare.append(elapsed - (timed.seconds - waited))
                turn.registry.append(after_seconds - before_seconds)
                turn.history = len(content)
                if replay == 0:
                    raw_total += len(content)
                    registry_total += after_bytes - before_bytes
    return turns, raw_total, registry_total


@contextmanager
def _system(backends: int) -> Iterator[list[str]]:
    """An embedded engine, a registry process and `backends` backend processes."""
    with tempfile.TemporaryDirectory(prefix="toolref-turn-") as folder, ExitStack() as stack:
        engine = EmbeddedEngine(folder, config={"appendonly": "no", "save": '""'})
        url = engine.start()
        stack.callback(engine.stop)
        env = {"TOOLREF_REDIS_URL": url, "TOOLREF_LOG_LEVEL": "warning"}
        port = free_port()
        command = [sys.executable, "-m", "toolref_server.cli", "serve", "--port", str(port)]
        registry = stack.enter_context(_server(command, env, f"http://127.0.0.1:{port}"))
        urls = []
        for _ in range(backends):
            where = free_port()
            command = [
                sys.executable, "-m", "loadtests.per_turn", "backend", "--port", str(where),
                "--registry", registry,
            ]  # fmt: skip
            urls.append(stack.enter_context(_server(command, {}, f"http://127.0.0.1:{where}")))
        yield urls


def _window(turns: list[Turn], first: bool) -> list[Turn]:
    return turns[:WINDOW] if first else turns[-WINDOW:]


def _ms(values: list[float]) -> str:
    return f"{statistics.mean(values) * 1000:.1f}"


def run(traces: list[Trace], replays: int = REPLAYS) -> Section:
    longest = max(traces, key=lambda t: len(t.messages))
    _, messages, cuts = turns_of(longest)
    with _system(1) as urls:
        turns, raw, registry = _replay(messages, cuts, urls, replays)
    with _system(2) as urls:
        _, raw_two, registry_two = _replay(messages, cuts, urls, 1)
    rows = []
    windows = {}
    for label, first in (("first", True), ("last", False)):
        chosen = _window(turns, first)
        added = [t.added() for t in chosen]
        windows[label] = statistics.mean(added)
        rows.append(
            [
                f"{chosen[0].index + 1}-{chosen[-1].index + 1}",
                f"{statistics.mean(t.history for t in chosen) / 1000:,.0f} KB",
                _ms([statistics.median(t.bare) for t in chosen]),
                _ms([statistics.median(t.toolref) for t in chosen]),
                _ms(added),
                _ms([statistics.median(t.registry) for t in chosen]),
                _ms([statistics.median(t.prepare) for t in chosen]),
            ]
        )
    growth = windows["last"] / windows["first"]
    share, share_two = registry / raw, registry_two / raw_two
    verdicts = [
        f"{'PASS' if growth <= TARGET else 'FAIL'}: the last {WINDOW} turns add {growth:.2f}x "
        f"the time the first {WINDOW} do (target at most {TARGET}x)",
        f"{'PASS' if share <= BYTES_TARGET else 'FAIL'}: the registry sent one backend "
        f"{registry / 1e6:.2f} MB over the conversation, {share:.1%} of the {raw / 1e6:.1f} MB "
        f"a client would upload raw (target at most {BYTES_TARGET:.0%}); two backends "
        f"alternating turns: {registry_two / 1e6:.2f} MB, {share_two:.1%} (each reads the "
        "history the other kept whole, once per turn)",
    ]
    return Section(
        title="Per-turn cost",
        intro=(
            f"The longest shared trace ({longest.name}, {len(messages)} messages, "
            f"{len(cuts)} turns) replayed turn by turn, {replays} times: the client "
            "(`ToolReferenceManager.post`, history refs on) sends each turn to a chat backend "
            "process behind `ToolRefMiddleware`, which hydrates through a registry process, "
            "all on loopback sockets with an embedded engine; the bare turn posts the raw "
            "conversation to the same backend app without the middleware. `added` is the "
            "median over replays of the toolref turn minus the bare one; `registry` is the "
            "backend's time waiting on the registry; `client` the manager's preparation "
            "(everything but the send). Command: `make bench` (this section alone: "
            "`python -m loadtests.per_turn`)."
        ),
        header=[
            "turns",
            "history",
            "bare ms",
            "toolref ms",
            "added ms",
            "registry ms",
            "client ms",
        ],
        rows=rows,
        figures={
            "growth": growth,
            "registry_share": share,
            "registry_share_two_backends": share_two,
        },
        verdicts=verdicts,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.per_turn")
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("backend", help="run one backend process")
    serve.add_argument("--port", type=int, required=True)
    serve.add_argument("--registry", required=True)
    args = parser.parse_args(argv)
    if args.command == "backend":
        _serve_backend(args.port, args.registry)
        return 0
    from loadtests import traces

    found = traces.load()
    if not found:
        print(f"per_turn: the shared traces are not at {traces.TRACES}", file=sys.stderr)
        return 2
    print(run(found).markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
