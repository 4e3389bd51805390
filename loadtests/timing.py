"""Side-by-side timing: every figure is a ratio to a baseline measured in the same run."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Timing:
    seconds: float  # median seconds per call

    def ratio(self, baseline: Timing) -> float:
        return self.seconds / baseline.seconds


def measure(action: Callable[[], object], repeats: int = 9, min_time: float = 0.05) -> Timing:
    """Median time per call over `repeats` runs, each looping long enough to time well."""
    loops = 1
    while True:
        start = time.perf_counter()
        for _ in range(loops):
            action()
        if time.perf_counter() - start >= min_time:
            break
        loops *= 2
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            action()
        samples.append((time.perf_counter() - start) / loops)
    return Timing(statistics.median(samples))


def interleaved(
    actions: dict[str, Callable[[], object]], rounds: int = 5, min_time: float = 0.05
) -> dict[str, Timing]:
    """Time several actions in alternating rounds so drift affects them alike; median of rounds."""
    samples: dict[str, list[float]] = {name: [] for name in actions}
    for _ in range(rounds):
        for name, action in actions.items():
            samples[name].append(measure(action, repeats=3, min_time=min_time).seconds)
    return {name: Timing(statistics.median(values)) for name, values in samples.items()}
