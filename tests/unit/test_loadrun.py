"""The load-test judge: failures and p95 thresholds from locust's stats CSV."""

from __future__ import annotations

from pathlib import Path

from loadtests import loadrun

HEADER = "Type,Name,Request Count,Failure Count,95%\n"


def write(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "toolref_stats.csv"
    path.write_text(HEADER + "".join(row + "\n" for row in rows))
    return path


def test_a_clean_run_passes(tmp_path: Path) -> None:
    stats = write(tmp_path, ["POST,hydrate,100,0,40", ",Aggregated,100,0,40"])
    assert loadrun.judge(stats, loadrun.THRESHOLDS) == []


def test_failures_and_slow_endpoints_are_reported(tmp_path: Path) -> None:
    stats = write(tmp_path, ["POST,hydrate,100,3,40", "POST,resolve,50,0,900"])
    problems = loadrun.judge(stats, loadrun.thresholds("resolve=500"))
    assert problems == [
        "hydrate: 3 of 100 failed",
        "resolve: p95 900 ms over its 500 ms threshold",
    ]


def test_thresholds_can_be_overridden() -> None:
    limits = loadrun.thresholds("hydrate=50, custom=7")
    assert limits["hydrate"] == 50
    assert limits["custom"] == 7
    assert limits["register"] == loadrun.THRESHOLDS["register"]
