"""Names the tests that failed, for the end of `make test`.

`make test` runs four passes, and CI shows only the tail of what they printed: a failure in
the first pass scrolls out of sight behind three more. With TOOLREF_TEST_FAILURES_FILE set, the
pytest controller (never an xdist worker, which would write each failure twice) appends one
line per failed test to that file: its id and the last line of its error, cut to 300
characters. The Makefile prints the file after the last pass.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FAILURES_FILE = "TOOLREF_TEST_FAILURES_FILE"
LINE_CHARS = 300


def failure_line(report: pytest.TestReport) -> str:
    """One line: where (`nodeid`, with the phase when not the call) and why."""
    crash = getattr(report.longrepr, "reprcrash", None)
    why = crash.message if crash is not None else str(report.longrepr)
    why = " ".join(why.split())
    where = report.nodeid if report.when == "call" else f"{report.nodeid} ({report.when})"
    return f"{where}: {why}"[:LINE_CHARS]


class FailureRecorder:
    def __init__(self, path: Path) -> None:
        self.path = path

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed and not hasattr(report, "wasxfail"):
            with self.path.open("a", encoding="utf-8") as out:
                out.write(failure_line(report) + "\n")


def register(config: pytest.Config) -> None:
    """Record failures when asked (TOOLREF_TEST_FAILURES_FILE) and this is the controller."""
    target = os.environ.get(FAILURES_FILE)
    if target and not hasattr(config, "workerinput"):
        path = Path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        config.pluginmanager.register(FailureRecorder(path), "toolref-failures")
