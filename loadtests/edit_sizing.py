"""What an edited conversation costs the service: Redis bytes held right after its last turn,
and CPU per turn (the registry's edit step in this process, and the engine's), for each
shared trace replayed one request per assistant turn, each turn an edit of the last.

    python -m loadtests.edit_sizing

The edit step runs as the gateway runs it (`toolref_server.registry.edits.apply_edit` on the
app's own services, an embedded engine), without the upstream hop. Each trace is replayed
`REPEATS` times (the engine flushed, a new app each time); a turn's CPU is its least over
the replays (the work is the same each time; the least is the least disturbed by the
other processes of a shared machine). Redis bytes are read right after the last turn of
the last replay, every superseded node still held. Numbers go to docs/operations.md
("Sizing").
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from loadtests.bandwidth import turns_of
from loadtests.traces import load
from toolref.asgi.budget import Budget
from toolref.edits import wire
from toolref.edits.edit import Inline, dictionary, dictionary_order, diff
from toolref.edits.request import Cut, cut
from toolref_server.app import create_app
from toolref_server.embedded import EmbeddedEngine
from toolref_server.registry.edits import apply_edit
from toolref_server.settings import LOCAL_TENANT, Settings
from toolref_server.storage import keys

HEADERS = [
    ("content-type", "application/json"),
    ("x-api-key", "sk-bench"),
    ("anthropic-version", "2023-06-01"),
    ("user-agent", "bench/1.0"),
]


def encoded(base: Cut | None, new: Cut) -> bytes:
    if base is None:
        return wire.encode(None, diff([], new.entries, new.segments), b"")
    ops = diff(base.entries, new.entries, new.segments)
    inline = sum(len(op.data) for op in ops if isinstance(op, Inline))
    size = min(sum(map(len, base.segments)), max(32 << 10, 32 * inline), 1 << 20)
    order = dictionary_order(len(base.entries), ops)
    return wire.encode(base.ref, ops, dictionary(order, base.segments.__getitem__, size))


async def engine_cpu(redis: Any) -> float:
    info = await redis.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


REPEATS = 5


def turns(messages: list[Any], cuts: list[int]) -> list[tuple[bytes, Cut, bytes]]:
    """Each turn's body, its cut and the edit sent (against the turn before)."""
    found = []
    base: Cut | None = None
    for at in cuts:
        body = json.dumps({"model": "m", "messages": messages[:at]}).encode()
        new = cut(HEADERS, body, "messages")
        assert new is not None
        found.append((body, new, encoded(base, new)))
        base = new
    return found


async def replay(app: Any, sent: list[tuple[bytes, Cut, bytes]]) -> list[float]:
    """Each turn's CPU in this process (seconds), every turn checked exact."""
    services = app.state.services
    budget = Budget(1 << 30)
    cpu: list[float] = []
    for body, new, data in sent:
        started = time.process_time()
        with budget.account() as account:
            applied = await apply_edit(services, LOCAL_TENANT, data, new.secrets, account)
        cpu.append(time.process_time() - started)
        assert applied.ref == new.ref
        assert applied.request.body == body
    return cpu


async def measure(url: str, redis: Any, messages: list[Any], cuts: list[int]) -> dict[str, Any]:
    sent = turns(messages, cuts)
    body = sent[-1][0]
    wire_bytes = sum(len(data) for _, _, data in sent)
    runs = []
    for _ in range(REPEATS):
        await redis.flushall()
        app = create_app(Settings(redis_url=url), redis=redis)
        engine_before = await engine_cpu(redis)
        async with app.router.lifespan_context(app):
            runs.append(await replay(app, sent))
        engine = await engine_cpu(redis) - engine_before
    cpu = [min(each) for each in zip(*runs, strict=True)]
    held = 0
    kinds: dict[str, int] = {}
    async for key in redis.scan_iter(match=keys.scan_pattern(LOCAL_TENANT)):
        size = int(await redis.memory_usage(key, samples=0) or 0)
        held += size
        kind = key.split(b":")[2].decode()
        kinds[kind] = kinds.get(kind, 0) + size
    first, last = cpu[:20], cpu[-20:]
    return {
        "turns": len(cuts),
        "raw": len(body),
        "redis": held,
        "kinds": kinds,
        "ratio": held / len(body),
        "cpu_ms": 1000 * statistics.mean(cpu),
        "engine_ms": 1000 * engine / len(cuts),
        "last20_over_first20": statistics.mean(last) / statistics.mean(first),
        "wire": wire_bytes,
    }


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        engine = EmbeddedEngine(Path(folder), config={"appendonly": "no"})
        url = engine.start()
        try:
            from redis.asyncio import Redis

            redis = Redis.from_url(url)
            for trace in load():
                _, messages, cuts = turns_of(trace)
                if len(cuts) < 20:
                    continue
                found = await measure(url, redis, messages, cuts)
                print(
                    f"{trace.name[:48]:48} turns {found['turns']:4} raw {found['raw']:8} "
                    f"redis {found['redis']:7} ({found['ratio']:.2f}/B {found['kinds']}) "
                    f"cpu {found['cpu_ms']:.2f} ms/turn (engine {found['engine_ms']:.2f}) "
                    f"last20/first20 {found['last20_over_first20']:.2f}"
                )
            await redis.aclose()
        finally:
            engine.stop()


if __name__ == "__main__":
    from loadtests.report import usage

    usage(__doc__, "edit_sizing")
    asyncio.run(main())
