"""A chat backend as an app embeds toolref, for the benches of the chat-backend path: an
app behind `ToolRefMiddleware`, which restores each edit through a registry process
(`POST /v1/edits:apply`), run by uvicorn in a process of its own.

    python -m loadtests.chat_backend --port P --registry URL

Routes: `/llm/...` (POST: the app reads the body and answers a small JSON body, or, for a
body that asks `"stream": true`, streams the answer scripted for it, else
`loadtests.fast_upstream`'s fixed one, as the relay path's upstream does, as a provider
would; what a real backend does next, parse it and call a model, is the same with
toolref or without, and is left out of what this bench measures), the same app at
`/bare/...` without the middleware (the turn a backend without toolref serves), `/control`
(a request of constant cost the middleware passes through, to see how fast the machine
runs), `/stats` (what the middleware added; `/stats/app-cpu`: the app's own CPU so far, in
its thread, less its calls of `send`) and `/__next-answer` (POST `{"format": ...,
"message": {...}}`: the next streamed answer, as `loadtests.fast_upstream` takes it).

The middleware's added time of a request is the wall time from the request reaching the
middleware to the last piece of its answer sent (what the client waits for; the answer's
keep, `PUT /v1/answers`, follows it), less the app's own time (inside the app, less its
calls of the middleware's `send`, which taps the answer): reading the edit, the
registry's round trip, restoring, and passing the answer on. Requests are measured one at
a time (the benches send them so).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any, Final

from loadtests import scripted
from loadtests.fast_upstream import EVENTS
from toolref import AsyncRegistryClient, ToolRefMiddleware
from toolref.receiving.channel_server import serve_channel
from toolref.wire.endpoints import CHANNEL
from toolref.wire.errors import ToolrefError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
_STREAM: Final = re.compile(rb'"stream"\s*:\s*true')
_PIECE: Final = 4096  # bytes of a streamed answer per body message


@dataclass
class Clock:
    """What the middleware added, request by request (seconds)."""

    added: list[float] = field(default_factory=list)
    app_cpu: float = 0.0  # the app's own CPU in every request so far (seconds)
    inner: float = 0.0  # the app's time in the request being measured
    inner_cpu: float = 0.0  # the app's CPU (this thread's) in the request being measured


async def _read(receive: Any) -> bytes:
    """The whole body, as Starlette's `Request.body` reads it (one piece is not copied)."""
    pieces = []
    while True:
        message = await receive()
        pieces.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(pieces)


async def _answer(send: Any, answer: dict[str, Any]) -> None:
    content = json.dumps(answer).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(content))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": content})


async def _json(receive: Any, send: Any, answer: dict[str, Any]) -> None:
    body = await _read(receive)
    await _answer(send, {**answer, "read": len(body)} if body else answer)


class Backend:
    """The ASGI app of the process (see the module docstring)."""

    def __init__(self, registry: str) -> None:
        self.clock = Clock()
        self.scripted: list[bytes] = []  # streamed answers to give, in turn
        client = AsyncRegistryClient(registry, timeout=120)
        # serving a channel: the client's turns ride it (the SDK's `AsyncTransport`)
        self.middleware = ToolRefMiddleware(self.app, client, channel_path=CHANNEL)

    async def app(self, scope: Scope, receive: Any, given: Any) -> None:
        start, start_cpu = time.perf_counter(), time.thread_time()
        sending = sending_cpu = 0.0  # in the middleware's `send` (its tap, its keep): not the app's

        async def send(message: Message) -> None:
            nonlocal sending, sending_cpu
            began, began_cpu = time.perf_counter(), time.thread_time()
            await given(message)
            sending += time.perf_counter() - began
            sending_cpu += time.thread_time() - began_cpu

        body = await _read(receive)
        if _STREAM.search(body) is not None:  # as the relay path's upstream answers
            anthropic = str(scope["path"]).endswith("/messages")
            events = self.scripted.pop(0) if self.scripted else EVENTS[anthropic]
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            for at in range(0, len(events), _PIECE):  # as a provider's stream comes
                piece = events[at : at + _PIECE]
                more = at + _PIECE < len(events)
                await send({"type": "http.response.body", "body": piece, "more_body": more})
        else:
            await _answer(send, {"ok": True, "read": len(body)})
        self.clock.inner += time.perf_counter() - start - sending
        self.clock.inner_cpu += time.thread_time() - start_cpu - sending_cpu

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        path = scope["path"]
        if path == "/__next-answer":
            script = json.loads(await _read(receive))
            self.scripted.append(scripted.stream(script["format"], script["message"]))
            await _answer(send, {"ok": True})
        elif path == "/stats":
            await _json(receive, send, {"added": self.clock.added, "app_cpu": self.clock.app_cpu})
        elif path == "/stats/app-cpu":
            await _json(receive, send, {"app_cpu": self.clock.app_cpu})
        elif scope["type"] == "websocket" and path == CHANNEL:
            # the middleware's channel, each turn timed as one over HTTP is
            await serve_channel(scope, receive, send, self.timed, refuse=_busy)
        elif path.startswith("/llm/"):
            await self.timed(scope, receive, send)
        else:  # /bare/..., /control: no toolref
            await _json(receive, send, {"ok": True})

    async def timed(self, scope: Scope, receive: Any, send: Any) -> None:
        """A request through the middleware, its added time kept (`Clock.added`)."""
        self.clock.inner = self.clock.inner_cpu = 0.0
        start = time.perf_counter()
        ended = [start]

        async def timed(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                ended[0] = time.perf_counter()  # the client has the whole answer

        await self.middleware(scope, receive, timed)
        self.clock.added.append(ended[0] - start - self.clock.inner)
        self.clock.app_cpu += self.clock.inner_cpu


def _busy(error: ToolrefError) -> Any:
    """A channel's turn past its limit: 503, the problem's detail."""

    async def busy(scope: Scope, receive: Any, send: Any) -> None:
        content = json.dumps(error.to_problem()).encode()
        headers = [(b"content-type", b"application/problem+json")]
        await send({"type": "http.response.start", "status": error.status, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    return busy


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m loadtests.chat_backend")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--registry", required=True)
    args = parser.parse_args(argv)
    uvicorn.run(Backend(args.registry), port=args.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
