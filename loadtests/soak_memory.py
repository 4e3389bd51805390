"""The soak's memory: RSS of every process sampled over time, its growth per request after
warm-up (a least-squares slope), and a chart of it.

Why a slope and not the two ends: a single sample is noisy (a large body held at that
moment, a garbage collection just before or after, the allocator returning an arena or
not), so the difference of two samples says more about those moments than about the run;
the least-squares slope of RSS against requests served uses every sample after warm-up,
so one odd sample moves it little, while a leak (some bytes kept per request) is exactly a
slope, whatever level the process settled at. Against requests, not time: a leak is per
request, and the rate a loaded machine keeps may vary.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psutil

MIB: Final = 2**20
PER: Final = 10_000  # slopes are given per this many requests
SPAN_MIB: Final = 16.0  # each chart's RSS axis spans at least this


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # seconds since the traffic started
    requests: int  # requests completed by then
    rss: dict[str, int]  # process label -> resident bytes


class Sampler:
    """Samples the RSS of each named process and of its children (labelled `name (child's
    name)`, numbered when two share a name) every `every` seconds, from a thread, with the
    requests completed. Children only, not their own: the engine forks a copy of itself to
    save, which would otherwise be sampled, now and then, under the engine's name."""

    def __init__(self, roots: dict[str, int], requests: Callable[[], int], every: float) -> None:
        self.roots = {name: psutil.Process(pid) for name, pid in roots.items()}
        self.requests, self.every = requests, every
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="soak-sampler", daemon=True)
        self._start = time.monotonic()

    def __enter__(self) -> Sampler:
        self._start = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def sample(self) -> Sample:
        rss: dict[str, int] = {}
        for name, root in self.roots.items():
            for process in [root, *root.children()]:
                try:
                    label = name if process is root else f"{name} ({process.name()})"
                    if process.status() == psutil.STATUS_ZOMBIE:
                        continue
                    size = process.memory_info().rss
                except psutil.NoSuchProcess:
                    continue
                base, count = label, 1
                while label in rss:
                    count += 1
                    label = f"{base} #{count}"
                rss[label] = size
        return Sample(time.monotonic() - self._start, self.requests(), rss)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.samples.append(self.sample())


@dataclass(frozen=True, slots=True)
class Limit:
    """Growth allowed after warm-up: `per_10k_mib` MiB per 10,000 requests, and never less
    than `floor_mib` in all. The floor is for short runs: the allocator keeps a few MiB more
    now and then (a new peak of bodies in flight), which a run of a few thousand requests
    would read as a slope of tens of MiB per 10k; over a long run the rate decides."""

    per_10k_mib: float
    floor_mib: float

    def allowed_mib(self, requests: int) -> float:
        return max(self.per_10k_mib * requests / PER, self.floor_mib)


@dataclass(frozen=True, slots=True)
class Growth:
    """One process over the samples after warm-up."""

    process: str
    first: int  # RSS bytes at the end of warm-up
    last: int  # RSS bytes at the end
    peak: int
    per_request: float  # least-squares slope: bytes per request
    intercept: float  # of the fitted line, in bytes
    requests: int  # served over these samples
    samples: int

    @property
    def per_10k_mib(self) -> float:
        return self.per_request * PER / MIB

    @property
    def fitted_mib(self) -> float:
        """Growth over the samples along the fitted line."""
        return self.per_request * self.requests / MIB

    def passes(self, limit: Limit) -> bool:
        return self.fitted_mib <= limit.allowed_mib(self.requests)


def growth(samples: list[Sample], warmup: float) -> list[Growth]:
    """Per process, its growth over the samples at or after `warmup` seconds."""
    judged = [s for s in samples if s.at >= warmup]
    labels = sorted({label for s in judged for label in s.rss}, key=_order)
    found = []
    for label in labels:
        points = [(s.requests, s.rss[label]) for s in judged if label in s.rss]
        if len(points) < 3 or points[0][0] == points[-1][0]:
            continue
        xs, ys = [float(x) for x, _ in points], [float(y) for _, y in points]
        fit = statistics.linear_regression(xs, ys)
        peak = max(y for _, y in points)
        requests = points[-1][0] - points[0][0]
        first, last = points[0][1], points[-1][1]
        at = Growth(label, first, last, peak, fit.slope, fit.intercept, requests, len(points))
        found.append(at)
    return found


def _order(label: str) -> tuple[int, str]:
    """The chain's order: service first, its engine next, then the rest."""
    ranks = ("service", "relay", "backend", "provider")
    root = label.split(" (", 1)[0]
    return (ranks.index(root) if root in ranks else len(ranks), label)


def timeline(samples: list[Sample], points: int = 7) -> list[Sample]:
    """About `points` samples spread evenly over the run, the first and last included."""
    if len(samples) <= points:
        return samples
    step = (len(samples) - 1) / (points - 1)
    return [samples[round(i * step)] for i in range(points)]


def draw(
    samples: list[Sample], growths: list[Growth], warmup: float, limit: Limit, path: Path
) -> Path:
    """RSS against requests, one panel per process: warm-up shaded, the fitted line drawn."""
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(
        len(growths), 1, figsize=(8, 1.9 * len(growths) + 0.6), sharex=True, squeeze=False
    )
    warm = [s.requests for s in samples if s.at < warmup]
    for axis, found in zip(axes[:, 0], growths, strict=True):
        points = [(s.requests, s.rss[found.process]) for s in samples if found.process in s.rss]
        axis.plot([x / 1e3 for x, _ in points], [y / MIB for _, y in points], lw=0.8)
        if warm:
            axis.axvspan(0, max(warm) / 1e3, color="#dddddd", label="warm-up")
        judged = [s.requests for s in samples if s.at >= warmup]
        if judged:
            x0, x1 = judged[0], judged[-1]
            fit = [(found.intercept + found.per_request * x) / MIB for x in (x0, x1)]
            verdict = "pass" if found.passes(limit) else "FAIL"
            axis.plot([x0 / 1e3, x1 / 1e3], fit, "r--", lw=1,
                      label=f"{found.per_10k_mib:+.2f} MiB / 10k requests ({verdict})")  # fmt: skip
        low, high = axis.get_ylim()
        if high - low < SPAN_MIB:  # a flat line drawn flat, not its noise magnified
            middle = (low + high) / 2
            axis.set_ylim(middle - SPAN_MIB / 2, middle + SPAN_MIB / 2)
        axis.set_title(found.process, fontsize=9)
        axis.set_ylabel("RSS MiB", fontsize=8)
        axis.legend(fontsize=7, loc="upper left")
    axes[-1, 0].set_xlabel("requests (thousands)")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    return path
