"""Work counted without a clock: the lines Python runs in a set of modules.

An asymptotic test runs the same shape of input at two sizes and compares the counts: work
linear in the input doubles with it, quadratic work grows fourfold. Line events are exact
and the same on every run, so the comparison needs no timing and has no noise.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any


def steps(run: Callable[[], object], *modules: Any) -> int:
    """How many lines of `modules` (their source files) `run()` executes."""
    files = {str(Path(module.__file__).resolve()) for module in modules}
    known: dict[str, bool] = {}  # code file -> whether it is one of `modules`
    count = 0

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        name = frame.f_code.co_filename
        mine = known.get(name)
        if mine is None:
            mine = known[name] = str(Path(name).resolve()) in files
        return local if mine else None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        run()
    finally:
        sys.settrace(previous)
    return count


def growth(work: Callable[[int], object], size: int, *modules: Any) -> float:
    """How many times the work grows when the input doubles from `size` (2.0: linear)."""
    small = steps(lambda: work(size), *modules)
    return steps(lambda: work(2 * size), *modules) / small
