"""A worker of `toolref-server serve --workers N` ends with its supervisor.

uvicorn's supervisor spawns the workers (multiprocessing) and stops them when it stops
itself; killed outright (SIGKILL, the OOM killer), it cannot, and its workers would go on
as orphans: holding the listening socket (a restart on the port fails, "address already in
use"), answering 503 (the embedded engine ended with the supervisor), counting usage no
scrape reads. So each worker asks the kernel for a SIGTERM when its parent dies (Linux:
PR_SET_PDEATHSIG, `die_with_parent`, as the embedded engine does), which uvicorn handles
as any stop: the requests in flight drain, the usage counted is flushed
(`app._last_flush`), the worker exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Linux: SIGTERM to this process when its parent dies (PR_SET_PDEATHSIG); the embedded
    engine's too (`embedded`, run in the child before it starts). Elsewhere, nothing."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def end_with_supervisor(workers: int) -> None:
    """In a worker process (`workers` > 1, a multiprocessing child): SIGTERM to this process
    when its parent dies, and at once if it is already gone. Elsewhere, nothing."""
    parent = multiprocessing.parent_process()
    if workers <= 1 or parent is None or sys.platform != "linux":
        return
    die_with_parent()
    if os.getppid() != parent.pid:  # died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)
