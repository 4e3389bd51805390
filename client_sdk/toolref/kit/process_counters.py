"""Counters of the SDK's server-side parts (middleware, relay): plain counts always, and a
Prometheus counter of the same name when `prometheus_client` is installed (the SDK does not
depend on it). One counter per name per process, so two middlewares share it."""

from __future__ import annotations

import threading
from collections import Counter as Counts
from typing import Any

_lock = threading.Lock()
_made: dict[str, LabelledCounter] = {}


class LabelledCounter:
    """A counter with one label; `counts` holds what this process counted."""

    def __init__(self, name: str, documentation: str, label: str) -> None:
        self.name, self.label = name, label
        self.counts: Counts[str] = Counts()
        self._prometheus: Any = None
        try:
            from prometheus_client import Counter
        except ImportError:
            return
        self._prometheus = Counter(name, documentation, [label])

    def inc(self, value: str, amount: int = 1) -> None:
        self.counts[value] += amount
        if self._prometheus is not None:
            self._prometheus.labels(value).inc(amount)


def counter(name: str, documentation: str, label: str) -> LabelledCounter:
    """The process's counter `name` (made on first use)."""
    with _lock:
        found = _made.get(name)
        if found is None:
            found = _made[name] = LabelledCounter(name, documentation, label)
        return found
