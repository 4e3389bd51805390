"""The process's open-file limit: raised to the hard limit at start.

Every connection is a file descriptor. At the common default soft limit of 1,024, a
thousand idle sockets would leave the process no descriptor to accept a new client with
(accept() fails with EMFILE and asyncio retries a second later, again and again), nor to
reach Redis. The hard limit is what the administrator allows; the soft limit may be raised
to it without privileges. Worker processes inherit the raised limit.
"""

from __future__ import annotations

import logging
import resource
from pathlib import Path

log = logging.getLogger(__name__)

_NR_OPEN = Path("/proc/sys/fs/nr_open")  # Linux: the most a process may ask for
_DARWIN_OPEN_MAX = 10_240  # macOS refuses more than OPEN_MAX whatever the hard limit says


def _ceiling(hard: int) -> int:
    if hard != resource.RLIM_INFINITY:
        return hard
    try:
        return int(_NR_OPEN.read_text().strip())
    except (OSError, ValueError):
        return 1_048_576


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard one (as far as the system allows);
    return the soft limit before and after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _ceiling(hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        for wanted in (target, min(target, _DARWIN_OPEN_MAX)):
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            except (ValueError, OSError):
                continue
            log.info("open files limit raised from %d to %d", soft, wanted)
            return soft, wanted
        log.warning(
            "open files limit stays at %d: raising it to the hard limit %d failed", soft, hard
        )
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def open_files_limit() -> int:
    """The soft limit on open files now (RLIM_INFINITY as a large number)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return _ceiling(soft) if soft == resource.RLIM_INFINITY else soft
