"""The relay: each shared trace replayed turn by turn as an agent would send it, through
`toolref relay` and the service's gateway to a provider, next to the same provider reached
directly, in the same run.

The agent posts each turn's whole conversation (streamed answers) to the relay on loopback;
the relay sends edits to the gateway (the service, on an embedded engine), which restores
each request and forwards it to the provider: the scripted LLM backend of
examples/llm_backend.py, which knows nothing of toolref. Bytes: what the agent sent, and
what left the relay for the gateway. Time to first byte: direct, and through relay and
gateway, median over the turns.

    python -m loadtests.relay
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn
from examples.llm_backend import create_backend

from loadtests.bandwidth import turns_of
from loadtests.report import Section
from loadtests.traces import Trace, load
from toolref_relay import Relay, RelayConfig
from toolref_server.app import create_app
from toolref_server.embedded import EmbeddedEngine
from toolref_server.settings import Settings

TARGET = 20.0  # agent bytes over relay bytes, over a 20-turn session
_PATHS = {"anthropic": "/v1/messages", "openai-chat": "/v1/chat/completions"}


@asynccontextmanager
async def _serve(app: Any) -> AsyncIterator[str]:
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False)
    )
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


def _body(fmt: str, messages: list[dict[str, Any]]) -> bytes:
    body: dict[str, Any] = {"model": "scripted-1", "stream": True, "messages": messages}
    if fmt == "anthropic":
        body["max_tokens"] = 1024
    return json.dumps(body, ensure_ascii=False).encode()


async def _first_byte(client: httpx.AsyncClient, url: str, content: bytes) -> float:
    """Seconds to the answer's first body byte (the answer is then read to its end)."""
    started = time.perf_counter()
    headers = {"content-type": "application/json", "x-api-key": "k", "authorization": "Bearer k"}
    async with client.stream("POST", url, content=content, headers=headers) as answer:
        first: float | None = None
        async for _ in answer.aiter_raw():
            if first is None:
                first = time.perf_counter() - started
        if answer.status_code != 200:
            raise RuntimeError(f"{url} answered {answer.status_code}")
    return first if first is not None else time.perf_counter() - started


async def _replay(trace: Trace, engine_url: str) -> list[str] | None:
    fmt, messages, cuts = turns_of(trace)
    path = _PATHS.get(fmt.name)
    if path is None:
        return None
    provider = create_backend(None, delay=0.0)
    async with _serve(provider) as provider_url:
        settings = Settings(redis_url=engine_url, upstreams=f"p={provider_url}")
        async with _serve(create_app(settings)) as gateway:
            relay = Relay(RelayConfig(gateway), report=lambda _: None)
            async with _serve(relay) as relay_url, httpx.AsyncClient(timeout=60) as agent:
                direct, relayed, sent = [], [], 0
                for cut in cuts:
                    content = _body(fmt.name, messages[:cut])
                    sent += len(content)
                    direct.append(await _first_byte(agent, provider_url + path, content))
                    relayed.append(await _first_byte(agent, f"{relay_url}/llm/p{path}", content))
                tally = relay.tally
    assert tally.inflated == sent, (tally.inflated, sent)  # every body counted (raw: + headers)
    return [
        f"{trace.name} ({fmt.name}, {len(cuts)} turns)",
        f"{sent / 1e6:.2f} MB",
        f"{tally.wire / 1e3:.1f} KB",
        f"{tally.ratio:.1f}x",
        f"{statistics.median(direct) * 1e3:.2f} ms",
        f"{statistics.median(relayed) * 1e3:.2f} ms",
    ]


async def _run(found: list[Trace]) -> list[list[str]]:
    rows = []
    with tempfile.TemporaryDirectory() as data:
        engine = EmbeddedEngine(data)
        url = engine.start()
        try:
            for trace in found:
                row = await _replay(trace, url)
                if row is not None:
                    rows.append(row)
        finally:
            engine.stop()
    return rows


def run(found: list[Trace]) -> Section:
    rows = asyncio.run(_run(found))
    ratios = [float(row[3].removesuffix("x")) for row in rows]
    turns = [int(row[0].rsplit(", ", 1)[1].split()[0]) for row in rows]
    long_enough = [r for r, t in zip(ratios, turns, strict=True) if t >= 20]
    verdicts = (
        [
            f"Sessions of 20 turns or more: the agent sent {min(long_enough):.1f}x to "
            f"{max(long_enough):.1f}x the bytes the relay sent (target {TARGET:.0f}x): "
            + ("met." if min(long_enough) >= TARGET else "missed.")
        ]
        if long_enough
        else []
    )
    return Section(
        title="Relay",
        intro=(
            "Each shared trace replayed as an agent sends it: every turn, the whole "
            "conversation so far, streamed answers, posted to `toolref relay` on loopback, "
            "which sends edits to the service's gateway on an embedded "
            "engine; the gateway restores each request and forwards it to the scripted provider of "
            "examples/llm_backend.py (no toolref). `agent sent` is every request body the "
            "agent sent, `relay sent` every body the relay sent the gateway (resends "
            "included); time to first byte is the median over the turns, directly to the "
            "provider and through relay and gateway, in the same run. The real agent CLIs "
            "are in the next section. Command: `make bench` "
            "(this section alone: `python -m loadtests.relay`)."
        ),
        header=["trace", "agent sent", "relay sent", "ratio", "TTFB direct", "TTFB relayed"],
        rows=rows,
        verdicts=verdicts,
    )


def main() -> int:
    found = load()
    if not found:
        print("relay bench: the shared traces are absent", file=sys.stderr)
        return 2
    print(run(found).markdown())
    return 0


if __name__ == "__main__":
    from loadtests.report import usage

    usage(__doc__, "relay")
    raise SystemExit(main())
