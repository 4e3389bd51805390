"""`make bench` section "adversarial inputs", and what the adversarial tests share: the
service as its own process (so its CPU time and peak memory can be read from /proc), each
attack sent once at a size, and how promptly small requests are answered meanwhile.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from loadtests import attacks
from loadtests.report import Section
from toolref.wire.headers import PROTOCOL_HEADER
from toolref_server.embedded import EmbeddedEngine, free_port

ROOT = Path(__file__).resolve().parents[1]
HEADERS = {PROTOCOL_HEADER: "2"}
SMALL = {
    "messages": [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path": "a.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "x = 1\n"},
    ]
}


@dataclass(frozen=True, slots=True)
class Service:
    url: str
    pid: int


@contextmanager
def service(engine_url: str, env: Mapping[str, str] | None = None) -> Iterator[Service]:
    """`toolref-server serve` as its own process on `engine_url`, ready; stopped after."""
    port = free_port()
    command = [sys.executable, "-m", "toolref_server.cli", "serve", "--port", str(port)]
    full = {**os.environ, "TOOLREF_REDIS_URL": engine_url, "TOOLREF_LOG_LEVEL": "error"}
    process = subprocess.Popen(
        command, env={**full, **(env or {})}, cwd=ROOT, stdout=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the service exited with status {process.returncode}")
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the service did not become ready within 60 s")
            time.sleep(0.1)
        yield Service(url, process.pid)
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def memory(pid: int) -> tuple[int, int]:
    """(resident bytes now, peak resident bytes so far) of a process (Linux /proc)."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0]) * 1024
    return found["VmRSS"], found["VmHWM"]


def send(client: httpx.Client, request: attacks.Request) -> httpx.Response:
    return client.request(
        request.method, request.path, content=request.body, headers=dict(request.headers)
    )


def prepare(client: httpx.Client, attack: attacks.Attack) -> list[Any]:
    """Run the attack's set-up requests; their JSON answers."""
    answers = []
    for step in attack.setup:
        answer = send(client, step)
        answer.raise_for_status()
        answers.append(answer.json())
    return answers


@dataclass(frozen=True, slots=True)
class Cost:
    status: int
    cpu: float  # seconds of service CPU for one request
    peak: int  # bytes the service's peak RSS grew by


def cost(svc: Service, attack: attacks.Attack) -> Cost:
    """One request of `attack` on a fresh service: its status, CPU and peak-memory growth."""
    with httpx.Client(base_url=svc.url, timeout=300) as client:
        answers = prepare(client, attack)
        request = attack.build(0, answers)
        before_cpu = cpu_seconds(svc.pid)
        rss, _ = memory(svc.pid)
        status = send(client, request).status_code
        cpu = cpu_seconds(svc.pid) - before_cpu
        _, peak = memory(svc.pid)
    return Cost(status, cpu, max(0, peak - rss))


def small_latencies(url: str, count: int) -> list[float]:
    """Seconds each of `count` small requests took, one after another: a tiny optimize and
    a `/healthz`, alternately."""
    out = []
    with httpx.Client(base_url=url, timeout=120) as client:
        for index in range(count):
            start = time.perf_counter()
            if index % 2:
                client.get("/healthz").raise_for_status()
            else:
                client.post("/v1/messages:optimize", json=SMALL, headers=HEADERS).raise_for_status()
            out.append(time.perf_counter() - start)
    return out


@contextmanager
def attacking(url: str, attack: attacks.Attack, answers: list[Any]) -> Iterator[list[int]]:
    """Send `attack` in a loop from a thread for the body of the `with`; yields the statuses
    answered so far (at least one request is in flight before the body starts)."""
    stop, statuses, started = threading.Event(), list[int](), threading.Event()

    def loop() -> None:
        with httpx.Client(base_url=url, timeout=300) as client:
            index = 0
            while not stop.is_set():
                request = attack.build(index, answers)
                started.set()
                statuses.append(send(client, request).status_code)
                index += 1

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    started.wait(30)
    time.sleep(0.05)  # the request is on the wire
    try:
        yield statuses
    finally:
        stop.set()
        thread.join(300)


@dataclass(frozen=True, slots=True)
class Promptness:
    alone: float  # median seconds of a small request alone
    during: float  # median while the attack runs
    worst: float  # slowest while the attack runs
    statuses: list[int]

    @property
    def ratio(self) -> float:
        return self.during / self.alone


def promptness(url: str, attack: attacks.Attack, count: int = 40) -> Promptness:
    with httpx.Client(base_url=url, timeout=300) as client:
        answers = prepare(client, attack)
    small_latencies(url, 10)  # warm
    alone = small_latencies(url, count)
    with attacking(url, attack, answers) as statuses:
        during = small_latencies(url, count)
    return Promptness(
        statistics.median(alone), statistics.median(during), max(during), list(statuses)
    )


SIZES = (1 << 20, 4 << 20)


def run(sizes: tuple[int, int] = SIZES) -> Section:
    """The section, on an embedded engine of its own and a fresh service per measurement."""
    with tempfile.TemporaryDirectory(prefix="toolref-adversarial-") as folder:
        engine = EmbeddedEngine(folder, config={"appendonly": "no", "save": '""'})
        engine.start()
        try:
            return _section(engine.url, sizes)
        finally:
            engine.stop()


def _section(engine_url: str, sizes: tuple[int, int]) -> Section:
    rows, figures = [], {}
    worst_growth, worst_ratio = 0.0, 0.0
    for factory in attacks.ALL:
        costs = []
        for size in sizes:
            attack = factory(size)
            with service(engine_url) as svc:
                costs.append((attack, cost(svc, attack)))
        with service(engine_url) as svc:
            prompt = promptness(svc.url, factory(sizes[1]), count=40)
        per_mb = [(c.cpu / (a.size / 2**20), c.peak / a.size) for a, c in costs]
        growth = per_mb[1][0] / per_mb[0][0] if per_mb[0][0] > 0 else 1.0
        if costs[0][1].cpu < 0.05:  # under 5 clock ticks: the ratio is noise
            growth = 1.0
        worst_growth, worst_ratio = max(worst_growth, growth), max(worst_ratio, prompt.ratio)
        name = costs[0][0].name
        figures[f"{name} cpu growth"] = growth
        figures[f"{name} small-request ratio"] = prompt.ratio
        rows.append(
            [
                name,
                costs[0][0].finding,
                " / ".join(f"{a.size / 2**20:.1f}" for a, _ in costs),
                " / ".join(str(c.status) for _, c in costs),
                " / ".join(f"{c.cpu:.2f}" for _, c in costs),
                " / ".join(f"{p[0]:.3f}" for p in per_mb),
                " / ".join(f"{p[1]:.1f}" for p in per_mb),
                f"{prompt.alone * 1000:.1f} / {prompt.during * 1000:.1f} ({prompt.ratio:.1f}x)",
            ]
        )
    growth_verdict = "PASS" if worst_growth <= 2.0 else "FAIL"
    ratio_verdict = "PASS" if worst_ratio <= 10.0 else "FAIL"
    return Section(
        title="adversarial inputs",
        intro=(
            "Each class of hostile request that once cost the service more than linear time "
            "or memory (`loadtests/attacks.py`), sent once to a fresh service process at two "
            "input sizes: the service's CPU seconds and peak-RSS growth, per MB of input (for "
            "compressed bodies, of the inflated input). Linear work keeps the per-MB figures "
            "level from the small size to the large one (a refusal that stops at a fixed "
            "budget, such as the container count, costs the same at both sizes, so its per-MB "
            "figures fall). Then the larger one sent in a loop while a client sends small "
            "requests (a tiny optimize and `/healthz`, alternately): their median latency "
            "alone and during the attack. `finding` is the cost before the fix. Command: "
            "`make bench`."
        ),
        header=[
            "class",
            "finding",
            "input MB",
            "status",
            "CPU s",
            "CPU s per MB",
            "peak RSS per input byte",
            "small request ms: alone / during",
        ],
        rows=rows,
        figures=figures,
        verdicts=[
            f"{growth_verdict}: CPU per MB at the larger size is at most {worst_growth:.2f}x "
            "that at the smaller (target: at most 2x, which linear work meets with room for "
            "noise)",
            f"{ratio_verdict}: small requests during an attack take at most "
            f"{worst_ratio:.1f}x their time alone (median; target: at most 10x)",
        ],
    )


def main() -> None:  # pragma: no cover - manual runs
    print(run().markdown())


if __name__ == "__main__":
    from loadtests.report import usage

    usage(__doc__, "adversarial")
    main()
