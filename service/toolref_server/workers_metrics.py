"""Metrics of several worker processes: the folder they share (prometheus-client's
multiprocess mode), what a scrape reads from it, and dead workers' gauges forgotten.

`toolref-server serve --workers N` (N > 1) makes a fresh private folder per run, names it in
`PROMETHEUS_MULTIPROC_DIR` before the workers start (prometheus-client picks its value
class when it is first imported, so the variable must be there first), and removes it when
the service stops. Every worker writes its counters, histograms and gauges to files named
by its pid there; a scrape of any worker reads them all (`collected`). A dead worker's
counters stay (totals never go backwards when uvicorn replaces a worker); its live gauges
(`livesum`, `livemax`) are removed (`forget_dead`), at each worker's start and every
`TOOLREF_SAMPLE_SECONDS`, and its own at a worker's clean stop (`forget`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # imported when used: the CLI sets ENV before prometheus-client loads
    from prometheus_client import CollectorRegistry

ENV: Final = "PROMETHEUS_MULTIPROC_DIR"
_FILE: Final = re.compile(r"[a-z_]+_(\d+)\.db")


def directory() -> str | None:
    """The shared folder of this process's workers, or None (one process: its own values)."""
    return os.environ.get(ENV) or None


@contextlib.contextmanager
def serving(workers: int) -> Iterator[str | None]:
    """For a serve of `workers` processes: a fresh private folder named in the environment
    the workers inherit (several workers), or none (one worker counts in its own memory;
    an inherited variable is dropped, so stale files of another run are never read)."""
    if workers <= 1:
        os.environ.pop(ENV, None)
        yield None
        return
    made = tempfile.mkdtemp(prefix="toolref-metrics-")  # mode 0700: this user's alone
    os.environ[ENV] = made
    try:
        yield made
    finally:
        os.environ.pop(ENV, None)
        shutil.rmtree(made, ignore_errors=True)


def collected(folder: str) -> CollectorRegistry:
    """A registry reading every worker's values in `folder` (summed counters, gauges as
    each declares). Linear in the files: workers x metric kinds."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=folder)  # type: ignore[no-untyped-call]
    return registry


def pids(folder: str) -> set[int]:
    """The pids that wrote files in `folder`."""
    found = set()
    for path in Path(folder).iterdir():
        match = _FILE.fullmatch(path.name)
        if match:
            found.add(int(match[1]))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process now holds the pid
    return True


def forget_dead(folder: str) -> list[int]:
    """Remove the live gauges of every worker that wrote in `folder` and is gone; the pids
    forgotten. Counters are kept."""
    from prometheus_client.multiprocess import mark_process_dead

    dead = sorted(pid for pid in pids(folder) if not alive(pid))
    for pid in dead:
        mark_process_dead(pid, folder)  # type: ignore[no-untyped-call]
    return dead


def forget(folder: str) -> None:
    """This worker's live gauges removed (it stops)."""
    from prometheus_client.multiprocess import mark_process_dead

    mark_process_dead(os.getpid(), folder)  # type: ignore[no-untyped-call]
