"""Memory per kept conversation on the chat-backend path: Redis bytes per raw JSON byte of
each shared trace sent as edits, each recipe kept, confirmed at every turn.

Each trace is replayed turn by turn as `answers.py` does: a request per model call (the
history so far), answered by a backend behind `ToolRefMiddleware` on the real registry (in
process over ASGI, on an embedded engine emptied before each trace), its client a
`ToolReferenceManager` (each request an edit of the one before, after the first). Two
replays per trace: with the default settings, measured right after the last turn (the
chunks a later snapshot no longer holds still on their short lifetime), and with
`TOOLREF_EDIT_SUPERSEDED_TTL=1`, measured once those have expired: what the conversation
costs for the rest of its TTL.

Growth of Redis `used_memory` (less client buffers, `mem_clients_normal`) from the empty
engine, and the sum of `MEMORY USAGE` over its keys, are divided by the raw bytes: the
conversation as its client holds it (what a client resends each turn without toolref),
compact JSON.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import httpx
from redis.asyncio import Redis

from loadtests.answers import backend
from loadtests.bandwidth import on_the_wire
from loadtests.report import Section
from loadtests.traces import Trace, load
from toolref import AsyncRegistryClient, ToolReferenceManager, ToolRefMiddleware, formats
from toolref.wire.encoding import dumps_json
from toolref_server.app import create_app
from toolref_server.embedded import EmbeddedEngine
from toolref_server.settings import Settings

TARGET = 0.5
EXPIRY_WAIT = 15.0  # seconds to wait for superseded heads to expire


@dataclass(frozen=True, slots=True)
class Kept:
    raw: int  # bytes of the conversation as compact JSON
    messages: int
    turns: int
    used: int  # growth of used_memory less client buffers
    usage: int  # sum of MEMORY USAGE over the keys
    keys: dict[str, int]  # keys by kind (p pieces, b recipe nodes, k chunks)


async def _used(redis: Redis) -> int:
    info = await redis.info("memory")
    return int(info["used_memory"]) - int(info.get("mem_clients_normal", 0))


async def _usage(redis: Redis) -> tuple[int, dict[str, int]]:
    total, kinds = 0, dict[str, int]()
    for key in await redis.keys("tr:*"):
        kind = (key.decode() if isinstance(key, bytes) else key).split(":")[2]
        kinds[kind] = kinds.get(kind, 0) + 1
        total += int(await redis.memory_usage(key, samples=0) or 0)
    return total, kinds


async def _expire_superseded(redis: Redis, deadline: float) -> None:
    """Wait for chunks on a lifetime of a second or less to go (EXISTS expires them)."""
    while time.monotonic() < deadline:
        short = []
        for key in await redis.keys("tr:*:k:*"):
            if 0 <= await redis.pttl(key) <= 1000:
                short.append(key)
        if not short:
            return
        await asyncio.sleep(0.5)
        for key in short:
            await redis.exists(key)
    raise RuntimeError(f"superseded chunks did not expire within {EXPIRY_WAIT}s")


async def replay(url: str, trace: Trace, **settings: Any) -> Kept:
    """Send `trace` as edits, turn by turn, on the emptied engine at `url`."""
    fmt = formats.detect(trace.messages)
    messages = [on_the_wire(m, fmt.name) for m in trace.messages]
    cuts = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and i > 0]
    replies = {i: messages[i] for i in cuts}
    redis = Redis.from_url(url)
    await redis.execute_command("FLUSHALL", "SYNC")  # type: ignore[no-untyped-call]
    service = create_app(Settings(redis_url="unused", **settings), redis=redis)
    async with service.router.lifespan_context(service):
        before = await _used(redis)
        registry = AsyncRegistryClient(
            "http://localhost:8750", transport=httpx.ASGITransport(app=service)
        )
        app = ToolRefMiddleware(backend(replies), registry)
        manager = ToolReferenceManager()
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://backend"
        ) as http:
            for cut in cuts:
                answer = await manager.apost(http, "/chat", json={"messages": messages[:cut]})
                answer.raise_for_status()
        if manager.savings.resends:
            raise RuntimeError(f"{trace.name}: {manager.savings.resends} resends")
        if manager.savings.edits != len(cuts) - 1:
            raise RuntimeError(f"{trace.name}: {manager.savings.edits} edits of {len(cuts)}")
        if settings.get("edit_superseded_ttl") == 1:
            await _expire_superseded(redis, time.monotonic() + EXPIRY_WAIT)
        used = await _used(redis) - before
        usage, kinds = await _usage(redis)
    await redis.aclose()
    return Kept(len(dumps_json(messages)), len(messages), len(cuts), used, usage, kinds)


async def _warm(url: str, trace: Trace) -> None:
    """One replay first: the engine's first allocations (scripts, tables) are not a
    conversation's."""
    await replay(url, trace)


def run(traces: list[Trace]) -> Section:
    rows = []
    totals = {"raw": 0, "last": 0, "kept": 0, "usage": 0}
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="toolref-conv-mem-") as folder:
        engine = EmbeddedEngine(folder, config={"appendonly": "no", "save": '""'})
        engine.start()
        try:
            asyncio.run(_warm(engine.url, min(traces, key=lambda t: t.size)))
            for trace in traces:
                last = asyncio.run(replay(engine.url, trace))
                kept = asyncio.run(replay(engine.url, trace, edit_superseded_ttl=1))
                raw = kept.raw
                totals["raw"] += raw
                totals["last"] += last.used
                totals["kept"] += kept.used
                totals["usage"] += kept.usage
                worst = max(worst, kept.usage / raw)
                rows.append(
                    [
                        trace.name,
                        str(kept.messages),
                        str(kept.turns),
                        f"{raw:,}",
                        f"{last.used:,} ({last.used / raw:.2f})",
                        f"{kept.used:,} ({kept.used / raw:.2f})",
                        f"{kept.usage:,} ({kept.usage / raw:.2f})",
                        " ".join(f"{k}:{n}" for k, n in sorted(kept.keys.items())),
                    ]
                )
        finally:
            engine.stop()
    raw = totals["raw"]
    rows.append(
        [
            "all traces",
            "",
            "",
            f"{raw:,}",
            f"{totals['last']:,} ({totals['last'] / raw:.2f})",
            f"{totals['kept']:,} ({totals['kept'] / raw:.2f})",
            f"{totals['usage']:,} ({totals['usage'] / raw:.2f})",
            "",
        ]
    )
    verdict = "PASS" if worst <= TARGET else "FAIL"
    return Section(
        title="Memory per kept conversation",
        intro=(
            "The chat-backend path: each shared trace sent by `ToolReferenceManager` as edits "
            "through `ToolRefMiddleware` and the registry's `POST /v1/edits:apply` (in process, "
            "on an embedded engine emptied before each trace), each recipe kept: Redis "
            "`used_memory` growth (less client buffers) and the sum of `MEMORY USAGE` over its "
            "keys, per byte of the conversation as compact JSON (in brackets). `after the last "
            "turn`: default settings (chunks a later snapshot no longer holds on their "
            "`TOOLREF_EDIT_SUPERSEDED_TTL` of 600 s); `kept`: once those have expired, what the "
            "conversation holds for the rest of its TTL. Keys by kind: `p` pieces, `b` recipe "
            "nodes, `k` chunks."
        ),
        header=[
            "trace",
            "messages",
            "turns",
            "raw JSON bytes",
            "used_memory after the last turn",
            "used_memory kept",
            "MEMORY USAGE kept",
            "keys kept",
        ],
        rows=rows,
        figures={
            "kept_usage_worst": worst,
            "kept_all": totals["kept"] / raw,
            "last_turn_all": totals["last"] / raw,
        },
        verdicts=[
            f"{verdict}: a kept conversation holds at most {worst:.2f} Redis bytes (MEMORY "
            f"USAGE) per raw JSON byte, on every trace (target {TARGET}); used_memory over all "
            f"traces: {totals['kept'] / raw:.2f}. used_memory of one small conversation moves "
            "by tens of KB with the engine's table and allocator steps, so it is judged over "
            "all traces and MEMORY USAGE per trace",
            f"{'PASS' if totals['last'] / raw <= TARGET else 'FAIL'}: right after its last "
            f"turn: {totals['last'] / raw:.2f} used_memory bytes per raw JSON byte over all "
            f"traces (target {TARGET})",
        ],
    )


if __name__ == "__main__":
    from loadtests.report import usage

    usage(__doc__, "conversation_memory")
    found = load()
    if not found:
        raise SystemExit("conversation_memory: the shared traces are not in ../shared/traces")
    print(run(found).markdown())
