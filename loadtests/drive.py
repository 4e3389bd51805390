"""How the gateway-speed bench drives a system: a target (a URL, headers, the processes whose
CPU it costs), sequential requests timed one by one, and a fixed number of connections kept
busy for a while; with each, the CPU seconds the target's processes spent meanwhile."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from loadtests.rawhttp import Answer, Connection, request
from loadtests.systems import Proc, cpu


@dataclass
class Target:
    """A system under test: `label` and `code` name its row, `url` is where requests go
    (its path included), `procs` are the processes whose CPU it costs."""

    label: str
    code: str
    url: str
    headers: dict[str, str]
    procs: list[Proc]
    conn: Connection | None = field(default=None, repr=False)

    async def send(self, body: bytes) -> Answer:
        """One request on this target's kept-alive connection; an answer that is not a
        200 stops the bench (a refused request would time the refusal)."""
        if self.conn is None:
            self.conn = Connection.to(self.url)
        answer = await self.conn.send(request(self.url, body, self.headers))
        if answer.status != 200:
            raise RuntimeError(
                f"{self.label} ({self.code}) answered {answer.status}: {answer.body[:300]!r}"
            )
        return answer

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()
            self.conn = None


@dataclass(frozen=True)
class Block:
    """Sequential requests to one target: each one's seconds, and the CPU seconds its
    processes spent over the block."""

    seconds: list[float]
    cpu: float


async def sequential(target: Target, bodies: list[bytes]) -> Block:
    before = cpu(target.procs)
    seconds = [(await target.send(body)).total for body in bodies]
    return Block(seconds, cpu(target.procs) - before)


@dataclass(frozen=True)
class Load:
    """Requests answered by `connections` busy connections in `seconds`; the CPU seconds of
    the target's processes, of the upstream's and of this client meanwhile."""

    requests: int
    seconds: float
    cpu: float
    upstream_cpu: float
    client_cpu: float

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds


async def busy(
    target: Target,
    body: Callable[[int], bytes],
    *,
    connections: int,
    seconds: float,
    upstream: Proc,
    client: Callable[[], float],
) -> Load:
    """Keep `connections` connections busy for `seconds` (each sends its next request as
    soon as its answer is read); every request a new body, `body(n)`."""
    counter = iter(range(1 << 62))
    done = 0
    stop = time.monotonic() + seconds

    async def one() -> None:
        nonlocal done
        conn = Connection.to(target.url)
        try:
            while time.monotonic() < stop:
                answer = await conn.send(request(target.url, body(next(counter)), target.headers))
                if answer.status != 200:
                    raise RuntimeError(
                        f"{target.label} ({target.code}) answered {answer.status} under load: "
                        f"{answer.body[:300]!r}"
                    )
                done += 1
        finally:
            await conn.close()

    marks = cpu(target.procs), upstream.cpu(), client()
    started = time.monotonic()
    await asyncio.gather(*(one() for _ in range(connections)))
    elapsed = time.monotonic() - started
    return Load(
        done,
        elapsed,
        cpu(target.procs) - marks[0],
        upstream.cpu() - marks[1],
        client() - marks[2],
    )
