"""What the edits bench measures of one conversation through one system (the relay path,
`edits_bench`, or the chat-backend path, `backend_path`), and the Redis keys it added."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from redis.asyncio import Redis

from loadtests.counting_hop import Sent
from toolref.edits.wire import MEDIA_TYPE
from toolref_server.storage import keys

# Per tenant (and window or minute), not per conversation: the stored-bytes quota, model
# calls, and gateway usage (a conversation that crossed a minute added that minute's hash).
COUNTERS: Final = frozenset({keys.STORED_BYTES, keys.MODEL_CALLS, keys.USAGE})


@dataclass
class Measured:
    """One conversation (or interleaved group) through one system."""

    name: str
    kind: str  # "trace" or "pattern"
    fmt: str
    turns: int
    agent: int  # bytes of the bodies the agent sent
    baseline: int
    sent: list[Sent]  # what the relay sent the gateway meanwhile
    cpu: list[float]  # the service's CPU seconds, per turn
    control: list[float]  # the service's CPU seconds for the control request after each turn
    engine: list[float]  # the engine's
    redis: int = 0  # MEMORY USAGE of the keys it added
    keys: dict[str, tuple[int, int]] = field(default_factory=dict)  # kind: (keys, bytes)
    raw: int = 0  # raw JSON bytes of what it said (`edits_baseline.content_bytes`)
    served: list[int] = field(default_factory=list)  # turns per worker or process
    added: list[float] = field(default_factory=list)  # a middleware's added seconds, per turn

    @property
    def wire(self) -> int:
        return sum(s.wire for s in self.sent)

    @property
    def extra(self) -> int:
        """Requests to the gateway beyond one per turn."""
        return len(self.sent) - self.turns

    @property
    def problems(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for s in self.sent:
            if s.status >= 400:
                kind = f"{s.status} {s.problem}".strip()
                found[kind] = found.get(kind, 0) + 1
        return found

    @property
    def path(self) -> str:
        llm = [s for s in self.sent if s.llm]
        edits = sum(s.media == MEDIA_TYPE for s in llm)
        if edits == len(llm):
            return "edits"
        return "history refs" if not edits else f"edits {edits} of {len(llm)}"


async def keys_of(redis: Redis) -> set[bytes]:
    return {key async for key in redis.scan_iter(match="tr:*", count=1000)}


async def usage_of(redis: Redis, keys: set[bytes]) -> tuple[int, dict[str, tuple[int, int]]]:
    """MEMORY USAGE summed over `keys` (counters left out), and per kind of key: how many,
    and their bytes."""
    chosen = [k for k in keys if k.split(b":")[2].decode() not in COUNTERS]
    pipe = redis.pipeline(transaction=False)
    for key in chosen:
        pipe.memory_usage(key, samples=0)
    sizes = [int(s or 0) for s in await pipe.execute()] if chosen else []
    kinds: dict[str, tuple[int, int]] = {}
    for key, size in zip(chosen, sizes, strict=True):
        kind = key.split(b":")[2].decode()
        count, total = kinds.get(kind, (0, 0))
        kinds[kind] = (count + 1, total + size)
    return sum(sizes), kinds
