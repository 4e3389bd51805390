"""What stands between an agent and the fake provider, with the bytes of every hop counted.

A `Chain` is given the fake's URL and yields a `Hops`: the base URL the agent uses, and one
`RecordingProxy` per hop (each forwards to the next, keeping what passed, as it passed).

- `direct`: agent -> fake (one hop, recorded by a proxy in front of the fake);
- `relay`: agent -> relay -> gateway -> fake: the toolref relay (`toolref relay --gateway
  GW --port RP`, a process) in front of the toolref service's gateway (`create_app` with
  `upstreams="fake=..."`, in process on the test engine), the agent's base URL
  `http://127.0.0.1:RP/llm/fake`.

TOOLREF_E2E_CHAIN picks some (comma-separated); by default the tests run each CLI through
the relay.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp
from starlette.websockets import WebSocket

from tests.support.fake_provider import Recorded, decode_body
from tests.support.servers import serve
from toolref.asgi.hops import HOP_BY_HOP
from toolref.websocket.bridge import Limits, bridge
from toolref.websocket.driver import Refusal, Unreachable, connect

CHAINS: Final = ("direct", "relay")
# An upgrade's own headers: the proxy's client writes its own for the next hop.
_HANDSHAKE: Final = frozenset(
    {"sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions"}
    | {"sec-websocket-protocol", "sec-websocket-accept"}
)
_WS_LIMITS: Final = Limits(max_message=64 * 1024 * 1024, idle=600.0, lifetime=3600.0)
UPSTREAM: Final = "fake"  # the fake's name at the gateway
KEY: Final = "e2e-tenant-key"  # the tenant's toolref key, the relay's to send


def chain_names() -> list[str]:
    """The chains to run: TOOLREF_E2E_CHAIN's (comma-separated: `direct,relay` runs both),
    else the relay's."""
    names = [n for n in os.environ.get("TOOLREF_E2E_CHAIN", "").split(",") if n]
    for name in names:
        if name not in CHAINS:
            raise ValueError(f"TOOLREF_E2E_CHAIN={name!r}: one of {', '.join(CHAINS)}")
    return names or ["relay"]


@dataclass
class RecordingProxy:
    """Forwards every request to `target` (streaming the answer back as it comes) and
    records each: the request as it arrived, and the bytes of its answer. A WebSocket
    is joined to one opened to `target` (refused with the status the next hop answered),
    each client message recorded as it came (`Recorded`, method `WS`)."""

    name: str
    target: str
    requests: list[Recorded] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)  # answer body bytes, per request
    statuses: list[int] = field(default_factory=list)
    # Seconds from a request's arrival (whole) to the first byte of its answer's body.
    first_byte: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.client = httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(600, connect=10))
        self.app = Starlette(
            routes=[
                WebSocketRoute("/{rest:path}", self._socket),
                Route("/{rest:path}", self._forward, methods=["GET", "POST", "HEAD", "PUT"]),
            ],
        )

    @property
    def sent_bytes(self) -> int:
        return sum(len(r.wire) for r in self.requests)

    @property
    def received_bytes(self) -> int:
        return sum(self.answered)

    async def _forward(self, request: Request) -> Response:
        wire = await request.body()
        arrived = time.perf_counter()
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        encoding = request.headers.get("content-encoding", "")
        try:
            body = decode_body(wire, encoding) if encoding else wire
        except Exception:  # a body that does not inflate: kept as sent
            body = wire
        record = Recorded(
            index=len(self.requests),
            method=request.method,
            path=request.url.path,
            query=request.url.query,
            headers=headers,
            wire=wire,
            body=body,
        )
        self.requests.append(record)
        slot = len(self.answered)
        self.answered.append(0)
        self.first_byte.append(0.0)
        url = self.target.rstrip("/") + request.url.path
        if request.url.query:
            url += "?" + request.url.query
        upstream = httpx.Request(  # not `build_request`: no headers of the client's own
            request.method,
            url,
            headers=[(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP],
            content=wire,
        )
        answer = await self.client.send(upstream, stream=True)
        self.statuses.append(answer.status_code)

        async def relay() -> AsyncIterator[bytes]:
            async for chunk in answer.aiter_raw():
                if not self.answered[slot]:
                    self.first_byte[slot] = time.perf_counter() - arrived
                self.answered[slot] += len(chunk)
                yield chunk

        return StreamingResponse(
            relay(),
            status_code=answer.status_code,
            headers={k: v for k, v in answer.headers.items() if k.lower() not in HOP_BY_HOP},
            background=BackgroundTask(answer.aclose),
        )

    async def _socket(self, websocket: WebSocket) -> None:
        if (await websocket.receive())["type"] != "websocket.connect":
            return
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in websocket.scope["headers"]
            if k.decode("latin-1").lower() not in HOP_BY_HOP | _HANDSHAKE
        ]
        path, query = websocket.url.path, websocket.url.query
        url = self.target.rstrip("/") + path + (f"?{query}" if query else "")
        try:
            upstream = await connect(
                url,
                headers,
                subprotocols=list(websocket.scope.get("subprotocols") or ()),
                max_message=_WS_LIMITS.max_message,
                connect_timeout=10,
            )
        except Refusal as exc:
            await websocket.send({"type": "websocket.close", "code": 1008})
            self.statuses.append(exc.status)
            return
        except Unreachable:
            await websocket.send({"type": "websocket.close", "code": 1011})
            return
        self.statuses.append(101)
        accepted = upstream.accepted
        await websocket.send(
            {"type": "websocket.accept", "subprotocol": accepted.subprotocol, "headers": []}
        )

        async def recorded(message: str | bytes) -> str | bytes:
            wire = message.encode() if isinstance(message, str) else message
            self.requests.append(
                Recorded(len(self.requests), "WS", path, query, headers, wire, wire)
            )
            self.answered.append(0)
            self.first_byte.append(0.0)
            return message

        await bridge(websocket.receive, websocket.send, upstream, _WS_LIMITS, inbound=recorded)

    async def aclose(self) -> None:
        await self.client.aclose()


@dataclass
class Hops:
    """The agent's base URL (a provider root: the CLI adds `/v1` where it needs it) and the
    hops in order, the agent's first."""

    chain: str
    base: str
    hops: list[RecordingProxy]

    @property
    def first(self) -> RecordingProxy:
        return self.hops[0]

    @property
    def last(self) -> RecordingProxy:
        return self.hops[-1]


Chain = Callable[[str], AbstractAsyncContextManager[Hops]]


@asynccontextmanager
async def proxied(name: str, target: str) -> AsyncIterator[tuple[RecordingProxy, str]]:
    proxy = RecordingProxy(name, target)
    try:
        async with serve(proxy.app) as url:
            yield proxy, url
    finally:
        await proxy.aclose()


@asynccontextmanager
async def direct(fake_url: str) -> AsyncIterator[Hops]:
    async with proxied("agent->fake", fake_url) as (proxy, url):
        yield Hops("direct", url, [proxy])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def relay_command(gateway: str, port: int) -> list[str]:
    """`toolref relay --gateway GATEWAY --port PORT --no-channel`, from this venv: each turn
    an HTTP request, which the recording proxy between relay and gateway counts (the
    channel, one WebSocket for every turn, has its own tests: tests/integration/
    test_channel.py)."""
    script = Path(sys.executable).with_name("toolref")
    if not script.exists():
        found = shutil.which("toolref")
        if found is None:
            raise RuntimeError(
                "no `toolref` command in this venv (`make e2e` installs it): the relay chain "
                "needs `toolref relay` (TOOLREF_E2E_CHAIN=direct runs the direct chain alone)"
            )
        script = Path(found)
    return [str(script), "relay", "--gateway", gateway, "--port", str(port), "--no-channel"]


async def wait_listening(port: int, process: asyncio.subprocess.Process, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.returncode is not None:
            raise RuntimeError(f"the relay exited ({process.returncode}) before it listened")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise RuntimeError(f"the relay did not listen on {port} within {seconds} s")


def relay_chain(
    gateway_app: Callable[[str], AbstractAsyncContextManager[ASGIApp]], log: Path
) -> Chain:
    """agent -> relay -> gateway -> fake. `gateway_app(upstream_url)` gives the toolref
    service with `upstreams="fake=<upstream_url>"` (and cleans up after it); the relay runs
    as a process, its output in `log`."""

    @asynccontextmanager
    async def chain(fake_url: str) -> AsyncIterator[Hops]:
        async with AsyncExitStack() as stack:
            to_fake, to_fake_url = await stack.enter_async_context(
                proxied("gateway->fake", fake_url)
            )
            app = await stack.enter_async_context(gateway_app(to_fake_url))
            gateway_url = await stack.enter_async_context(serve(app))
            to_gateway, to_gateway_url = await stack.enter_async_context(
                proxied("relay->gateway", gateway_url)
            )
            port = free_port()
            out = stack.enter_context(log.open("ab"))
            process = await asyncio.create_subprocess_exec(
                *relay_command(to_gateway_url, port),
                env={**os.environ, "TOOLREF_KEY": KEY},
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL,
            )

            async def stop() -> None:
                if process.returncode is None:
                    process.terminate()
                    try:
                        await asyncio.wait_for(process.wait(), 10)
                    except TimeoutError:
                        process.kill()
                        await process.wait()

            stack.push_async_callback(stop)
            await wait_listening(port, process, 30)
            to_relay, to_relay_url = await stack.enter_async_context(
                proxied("agent->relay", f"http://127.0.0.1:{port}")
            )
            yield Hops("relay", f"{to_relay_url}/llm/{UPSTREAM}", [to_relay, to_gateway, to_fake])

    return chain
