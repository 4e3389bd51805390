"""The C allocator tuned for a process that works on growing bodies (the relay, the
service): large blocks from the heap, not one mapping each.

glibc serves a block of `M_MMAP_THRESHOLD` or more (128 KiB at start, raised to the size of
the largest block freed so far) with a mapping of its own: each one costs page faults on
first touch and an unmap when freed. A conversation's body grows every turn, so each turn's
body, its text and their copies are larger than any block freed before: every one is mapped
anew, and a turn pays page faults in proportion to the conversation (measured on the relay,
a 300 KB body: 0.55 ms of a turn's cut in faults, 0.15 ms without). A fixed threshold of
`MMAP_THRESHOLD` serves them from the heap, whose freed blocks the next turn reuses.

A fixed threshold also freezes glibc's trim threshold at its start (128 KiB): the free top
of the heap past it is given back at each free, so a turn's large temporary blocks (a
body's copies; brotli's encoder tables, about 1 MiB a stream) were handed back and faulted
in again at the next turn: 0.5 ms a brotli stream of 100 bytes, 0.04 ms with the top kept.
`TRIM_THRESHOLD` keeps up to 16 MiB of free top, past which it is given back as before: a
bound per arena (the main thread's heap, and each worker thread's arena, whose heaps glibc
trims by the same threshold), so memory stays flat at most 16 MiB per busy thread above
what the work itself holds; `make soak` measures the service's RSS over its run.

Only where the C library is glibc (`mallopt` found); elsewhere nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Final

MMAP_THRESHOLD: Final = 32 << 20  # glibc's own ceiling for its dynamic threshold
TRIM_THRESHOLD: Final = 16 << 20  # free heap top kept for the next turn at most
_M_TRIM_THRESHOLD: Final = -1  # mallopt's parameters (malloc.h)
_M_MMAP_THRESHOLD: Final = -3


def tune() -> bool:
    """Set the fixed thresholds; whether they were set (glibc on Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    mapped = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    return bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and mapped
