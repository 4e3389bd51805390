"""The failures file that `make test` prints after its last pass names each failure."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest

from tests.failures import LINE_CHARS, FailureRecorder, failure_line


def report(
    when: Literal["setup", "call", "teardown"],
    outcome: Literal["passed", "failed", "skipped"],
    longrepr: str | None,
) -> pytest.TestReport:
    return pytest.TestReport(
        "tests/x.py::test_y", ("tests/x.py", 1, "test_y"), {}, outcome, longrepr, when
    )


def test_a_failure_is_one_line_naming_the_test_the_phase_and_the_error() -> None:
    assert failure_line(report("call", "failed", "boom\n  at line 3")) == (
        "tests/x.py::test_y: boom at line 3"
    )
    assert failure_line(report("setup", "failed", "no engine")).startswith(
        "tests/x.py::test_y (setup): no engine"
    )
    assert len(failure_line(report("call", "failed", "x" * 5000))) == LINE_CHARS


def test_the_recorder_appends_failures_only(tmp_path: Path) -> None:
    recorder = FailureRecorder(tmp_path / "failed.txt")
    recorder.pytest_runtest_logreport(report("call", "passed", None))
    recorder.pytest_runtest_logreport(report("call", "failed", "first"))
    recorder.pytest_runtest_logreport(report("teardown", "failed", "second"))
    assert (tmp_path / "failed.txt").read_text().splitlines() == [
        "tests/x.py::test_y: first",
        "tests/x.py::test_y (teardown): second",
    ]
