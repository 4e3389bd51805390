"""`toolref.kit.allocator` and `toolref.kit.collector`: the relay's start tunes both (its
turns must not pay for the size of what it remembers, nor page faults for its bodies)."""

from __future__ import annotations

import gc
import sys

import pytest

from toolref.kit import allocator, collector


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's (Linux)")
def test_the_allocator_threshold_is_set_on_glibc() -> None:
    assert allocator.tune() is True  # this machine's C library is glibc


def test_the_collector_is_tuned_once() -> None:
    collector.tune()
    assert gc.get_threshold() == collector.THRESHOLDS
    frozen = gc.get_freeze_count()
    collector.tune()  # the second time freezes nothing more
    assert gc.get_freeze_count() <= frozen


_KEEPCOST = """
import ctypes, ctypes.util, sys
from toolref.kit import allocator

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
        "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(ctypes.util.find_library("c"))
if not hasattr(libc, "mallinfo2"):
    print("none")
    sys.exit()
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "tuned":
    assert allocator.tune()
block = libc.malloc(4 << 20)  # the top of a fresh process's heap (or its own mapping)
libc.free(block)
print(libc.mallinfo2().keepcost)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's (Linux)")
@pytest.mark.parametrize("tuned", [True, False])
def test_the_heap_keeps_its_free_top_for_the_next_turn(tuned: bool) -> None:
    """A fixed mmap threshold froze glibc's trim threshold at 128 KiB: a turn's large
    temporary block, freed at the top of the heap, was handed back and faulted in again
    next turn (a brotli stream's encoder tables: 0.5 ms for 100 bytes). Tuned, the free top
    stays, up to `TRIM_THRESHOLD`: what mallinfo2 calls `keepcost` (in a fresh process,
    whose heap top the block is)."""
    import subprocess

    argument = "tuned" if tuned else "as-is"
    found = subprocess.run(
        [sys.executable, "-c", _KEEPCOST, argument], capture_output=True, text=True, check=True
    ).stdout.strip()
    if found == "none":
        pytest.skip("glibc before 2.33 has no mallinfo2")
    if tuned:
        assert int(found) >= 4 << 20  # kept, not trimmed
    else:
        assert int(found) < 4 << 20  # glibc's own way: a mapping of its own, or trimmed
