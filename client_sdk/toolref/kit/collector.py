"""The cyclic garbage collector tuned for a process that serves bodies (the service, the
relay): written once.

A parsed or cut body is thousands of acyclic containers (lists of segments, entries, spans),
freed by reference counting; at the default threshold (700 allocations) the cyclic
collector runs often, and its full passes visit every live object, the caches and the
remembered cuts included, so a turn of a long conversation would pay for the size of what
is remembered: measured, a quarter of hydrate's throughput and most of its tail latency in
the service. What exists at start-up is collected once and then left out of every pass
(`gc.freeze`, once per process), and collections run `THRESHOLDS` apart.
"""

from __future__ import annotations

import gc
from typing import Final

THRESHOLDS: Final = (50_000, 20, 20)


def tune() -> None:
    """Freeze what exists (once per process) and space collections `THRESHOLDS` apart."""
    if gc.get_threshold() != THRESHOLDS:  # once per process
        gc.collect()
        gc.freeze()
    gc.set_threshold(*THRESHOLDS)
