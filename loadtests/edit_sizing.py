"""What an edited conversation costs the service: Redis bytes held right after its last turn,
and CPU per turn (the registry's edit step in this process, and the engine's), for each
shared trace replayed one request per assistant turn, each turn an edit of the last.

    python -m loadtests.edit_sizing

The edit step runs as the gateway runs it (`toolref_server.registry.edits.apply_edit` on the
app's own services, an embedded engine), without the upstream hop. Numbers go to
docs/operations.md ("Sizing").
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
from toolref.edits import wire
from toolref.edits.edit import Inline, dictionary, dictionary_order, diff
from toolref.edits.request import Cut, cut
from toolref.receiving.budget import Budget
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


async def replay(app: Any, redis: Any, messages: list[Any], cuts: list[int]) -> dict[str, Any]:
    services = app.state.services
    budget = Budget(1 << 30)
    base: Cut | None = None
    cpu: list[float] = []
    engine_before = await engine_cpu(redis)
    body = b""
    wire_bytes = 0
    for at in cuts:
        body = json.dumps({"model": "m", "messages": messages[:at]}).encode()
        new = cut(HEADERS, body, "messages")
        assert new is not None
        data = encoded(base, new)
        wire_bytes += len(data)
        started = time.process_time()
        with budget.account() as account:
            applied = await apply_edit(services, LOCAL_TENANT, data, new.secrets, account)
        cpu.append(time.process_time() - started)
        assert applied.ref == new.ref
        assert applied.request.body == body
        base = new
    engine = await engine_cpu(redis) - engine_before
    held = 0
    async for key in redis.scan_iter(match=keys.scan_pattern(LOCAL_TENANT)):
        held += int(await redis.memory_usage(key) or 0)
    first, last = cpu[:20], cpu[-20:]
    return {
        "turns": len(cuts),
        "raw": len(body),
        "redis": held,
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
                await redis.flushall()
                app = create_app(Settings(redis_url=url), redis=redis)
                async with app.router.lifespan_context(app):
                    found = await replay(app, redis, messages, cuts)
                print(
                    f"{trace.name[:48]:48} turns {found['turns']:4} raw {found['raw']:8} "
                    f"redis {found['redis']:7} ({found['ratio']:.2f}/B) "
                    f"cpu {found['cpu_ms']:.2f} ms/turn (engine {found['engine_ms']:.2f}) "
                    f"last20/first20 {found['last20_over_first20']:.2f}"
                )
            await redis.aclose()
        finally:
            engine.stop()


if __name__ == "__main__":
    asyncio.run(main())
