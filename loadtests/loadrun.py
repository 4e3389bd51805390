"""`make loadtest`: serve toolref (one worker per core), run locust headless, judge the result.

    python -m loadtests.loadrun --time 60s --users 50

The service runs on a private embedded engine, or on `TOOLREF_REDIS_URL` when set. Reports
go to `loadtests/results/` (locust's CSV files and `report.html`). The exit status is non-zero
when any request failed or an endpoint's p95 exceeded its threshold (`--p95 name=ms,...`).
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from toolref_server.embedded import free_port

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "loadtests" / "results"
# p95 thresholds in milliseconds, per locust request name: generous for one small machine,
# tight enough to catch a path that went quadratic or a store round trip per item.
THRESHOLDS: dict[str, float] = {
    "optimize": 1000,
    "hydrate": 1000,
    "register": 500,
    "findMissing": 300,
    "resolve": 500,
    "summary": 500,
}


def thresholds(text: str) -> dict[str, float]:
    found = dict(THRESHOLDS)
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = entry.partition("=")
        found[name.strip()] = float(value)
    return found


def serve(workers: int, data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [sys.executable, "-m", "toolref_server.cli", "serve", "--port", str(port)]
    command += ["--workers", str(workers), "--data-dir", str(data_dir)]
    env = {**os.environ, "TOOLREF_LOG_LEVEL": "warning"}
    process = subprocess.Popen(command, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"loadtest: the service exited with status {process.returncode}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.terminate()
    raise SystemExit("loadtest: the service did not become ready within 60 s")


def judge(stats: Path, limits: dict[str, float]) -> list[str]:
    """Problems found in locust's `*_stats.csv`: failed requests and p95 over threshold."""
    problems = []
    with stats.open() as rows:
        for row in csv.DictReader(rows):
            name = row["Name"]
            if name == "Aggregated":
                continue
            if int(row["Failure Count"]):
                problems.append(f"{name}: {row['Failure Count']} of {row['Request Count']} failed")
            p95 = float(row["95%"] or 0)
            limit = limits.get(name)
            if limit is not None and p95 > limit:
                problems.append(f"{name}: p95 {p95:.0f} ms over its {limit:.0f} ms threshold")
            print(
                f"  {name:12} {int(row['Request Count']):>7} requests  p95 {p95:>6.0f} ms",
                file=sys.stderr,
            )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="toolref load test")
    parser.add_argument("--time", default=os.environ.get("LOADTEST_TIME", "60s"))
    parser.add_argument("--users", type=int, default=int(os.environ.get("LOADTEST_USERS", "50")))
    parser.add_argument("--spawn-rate", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--p95", default=os.environ.get("LOADTEST_P95", ""))
    options = parser.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    data_dir = Path(tempfile.mkdtemp(prefix="toolref-load-"))
    process, url = serve(options.workers, data_dir)
    try:
        locust = subprocess.run(
            [
                sys.executable, "-m", "locust",
                "-f", str(ROOT / "loadtests" / "locustfile.py"),
                "--host", url, "--headless",
                "-u", str(options.users), "-r", str(options.spawn_rate),
                "-t", options.time,
                "--csv", str(RESULTS / "toolref"),
                "--html", str(RESULTS / "report.html"),
                "--only-summary",
                "--loglevel", "WARNING",
            ],
            cwd=ROOT,
            check=False,
        )  # fmt: skip
    finally:
        process.terminate()
        process.wait(30)
        shutil.rmtree(data_dir, ignore_errors=True)
    print(
        f"loadtest: {options.users} users for {options.time} on {options.workers} workers",
        file=sys.stderr,
    )
    problems = judge(RESULTS / "toolref_stats.csv", thresholds(options.p95))
    if locust.returncode != 0 and not problems:
        problems.append(f"locust exited with status {locust.returncode}")
    for problem in problems:
        print(f"loadtest: FAIL {problem}", file=sys.stderr)
    if not problems:
        print(f"loadtest: PASS; reports in {RESULTS.relative_to(ROOT)}/", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
