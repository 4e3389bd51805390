"""Service speed: register, resolve and hydrate on the real service, each next to the bare
baseline (`loadtests/bare.py`) doing the same parse and Redis command, driven the same way in
the same run, against the same engine."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from loadtests.report import Section
from loadtests.traces import Trace
from toolref import formats
from toolref.wire.canonical import digest_of
from toolref_server.embedded import EmbeddedEngine, free_port

ROOT = Path(__file__).resolve().parents[1]
HEADERS = {"Toolref-Protocol": "2", "Content-Type": "application/json"}
CONCURRENCY = 8


@dataclass
class Run:
    requests: int
    seconds: float
    latencies: list[float]

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextmanager
def _server(command: list[str], env: dict[str, str], url: str) -> Iterator[str]:
    process = subprocess.Popen(
        command, env={**os.environ, **env}, cwd=ROOT, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.post(url + "/", timeout=0.5)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(15)


def _invocation(size: int, token: str) -> dict[str, Any]:
    return {
        "name": "read_file",
        "args": {"path": f"src/{token}.py"},
        "result": (token + "\n" + "    value = compute(value)\n" * (size // 27))[:size],
        "isError": False,
    }


async def _drive(url: str, bodies: Iterator[bytes], seconds: float) -> Run:
    latencies: list[float] = []
    stop = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def worker() -> None:
            while time.monotonic() < stop:
                body = next(bodies)
                start = time.perf_counter()
                answer = await client.post(url, content=body, headers=HEADERS)
                latencies.append(time.perf_counter() - start)
                if answer.status_code != 200:
                    raise RuntimeError(f"{url}: HTTP {answer.status_code}: {answer.text[:200]}")

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        elapsed = time.monotonic() - started
    return Run(len(latencies), elapsed, latencies)


def _register_bodies() -> Iterator[bytes]:
    while True:  # new invocations every time: register stores, it does not just touch
        items = [_invocation(2000, uuid.uuid4().hex) for _ in range(10)]
        yield json.dumps({"invocations": items}).encode()


def _repeat(body: bytes) -> Iterator[bytes]:
    while True:
        yield body


def _hydrate_messages(traces: list[Trace]) -> list[dict[str, Any]]:
    longest = max(traces, key=lambda t: len(t.messages))
    return longest.messages[:200]


def _prepare(toolref: str, engine_url: str, traces: list[Trace]) -> dict[str, Any]:
    """Bodies for both apps, with the data each reads already stored."""
    import redis  # sync client for the set-up only

    store = redis.Redis.from_url(engine_url)
    big = [_invocation(20_000, uuid.uuid4().hex) for _ in range(50)]
    answer = httpx.post(f"{toolref}/v1/invocations", json={"invocations": big}, headers=HEADERS)
    answer.raise_for_status()
    refs = [r["ref"] for r in answer.json()["refs"]]
    bare_keys = [f"bare:resolve:{n}" for n in range(len(big))]
    for key, item in zip(bare_keys, big, strict=True):
        store.set(key, json.dumps(item))
    messages = _hydrate_messages(traces)
    optimized = httpx.post(
        f"{toolref}/v1/messages:optimize", json={"messages": messages}, headers=HEADERS,
        timeout=60,
    ).json()["messages"]  # fmt: skip
    fmt = formats.detect(messages)
    pairs = formats.scan(messages, fmt).complete
    hydrate_keys = [f"bare:hydrate:{digest_of(p.invocation()).hex}" for p in pairs]
    for key, pair in zip(hydrate_keys, pairs, strict=True):
        store.set(key, json.dumps(pair.invocation()))
    store.close()
    return {
        "register": (_register_bodies(), _register_bodies()),
        "resolve": (
            _repeat(json.dumps({"refs": refs}).encode()),
            _repeat(json.dumps({"refs": bare_keys}).encode()),
        ),
        "hydrate": (
            _repeat(json.dumps({"messages": optimized}).encode()),
            _repeat(json.dumps({"messages": optimized, "keys": hydrate_keys}).encode()),
        ),
        "markers": len(pairs),
    }


PATHS = {
    "register": ("/v1/invocations", "/register"),
    "resolve": ("/v1/invocations:resolve", "/resolve"),
    "hydrate": ("/v1/messages:hydrate", "/hydrate"),
}


def measure(traces: list[Trace], seconds: float = 2.0, rounds: int = 3) -> dict[str, list[Run]]:
    results: dict[str, list[Run]] = {}
    with tempfile.TemporaryDirectory(prefix="toolref-speed-") as folder:
        engine = EmbeddedEngine(folder, config={"appendonly": "no", "save": '""'})
        url = engine.start()
        try:
            env = {"TOOLREF_REDIS_URL": url, "TOOLREF_LOG_LEVEL": "warning"}
            port, bare_port = free_port(), free_port()
            toolref_cmd = [sys.executable, "-m", "toolref_server.cli", "serve", "--port", str(port)]
            bare_cmd = [
                sys.executable, "-m", "uvicorn", "loadtests.bare:app", "--port", str(bare_port),
                "--log-level", "warning", "--no-access-log",
            ]  # fmt: skip
            with (
                _server(toolref_cmd, env, f"http://127.0.0.1:{port}") as toolref,
                _server(bare_cmd, env, f"http://127.0.0.1:{bare_port}") as bare,
            ):
                bodies = _prepare(toolref, url, traces)
                for name, (path, bare_path) in PATHS.items():
                    ours, theirs = bodies[name]
                    for _ in range(rounds):  # alternate, so drift hits both alike
                        for app, target, feed in (
                            ("toolref", toolref + path, ours),
                            ("bare", bare + bare_path, theirs),
                        ):
                            run = asyncio.run(_drive(target, feed, seconds))
                            results.setdefault(f"{name}/{app}", []).append(run)
        finally:
            engine.stop()
    return results


def _merge(runs: list[Run]) -> Run:
    return Run(
        sum(r.requests for r in runs),
        sum(r.seconds for r in runs),
        [x for r in runs for x in r.latencies],
    )


def run(traces: list[Trace], seconds: float = 2.0, rounds: int = 3) -> Section:
    results = {key: _merge(runs) for key, runs in measure(traces, seconds, rounds).items()}
    rows = []
    verdicts = []
    figures: dict[str, float] = {}
    for name in PATHS:
        ours, bare = results[f"{name}/toolref"], results[f"{name}/bare"]
        share = ours.throughput / bare.throughput
        p99 = ours.percentile(0.99) / bare.percentile(0.99)
        figures[f"{name}_throughput_share"] = share
        figures[f"{name}_p99_ratio"] = p99
        for app, r in (("toolref", ours), ("bare", bare)):
            rows.append(
                [
                    name,
                    app,
                    f"{r.throughput:,.0f}",
                    f"{r.percentile(0.5) * 1000:.1f}",
                    f"{r.percentile(0.95) * 1000:.1f}",
                    f"{r.percentile(0.99) * 1000:.1f}",
                    f"{share:.2f}" if app == "toolref" else "1.00",
                ]
            )
        ok = share >= 0.5 and p99 <= 2.0
        verdicts.append(
            f"{'PASS' if ok else 'FAIL'}: {name} reaches {share:.0%} of the bare baseline's "
            f"throughput (target 50%) with p99 {p99:.2f}x the baseline's (target at most 2x)"
        )
    return Section(
        title="Service speed",
        intro=(
            f"Requests per second and latency at {CONCURRENCY} concurrent connections, one "
            "service process and one bare Starlette process on the same embedded engine, "
            f"{rounds} alternating rounds of {seconds:g} s each. register: 10 new invocations of "
            "2 KB; resolve: 50 refs of 20 KB; hydrate: the first 200 messages of the longest "
            "trace with every tool payload a marker. The bare app parses the same body with the "
            "same JSON parser and runs the same Redis command (SET per item, one MGET)."
        ),
        header=["endpoint", "app", "req/s", "p50 ms", "p95 ms", "p99 ms", "throughput share"],
        rows=rows,
        figures=figures,
        verdicts=verdicts,
    )
