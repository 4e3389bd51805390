"""zstd contexts, one per thread: a context is not safe to share, and the worker pool
compresses and decompresses records and history messages off the event loop."""

from __future__ import annotations

import threading

import zstandard

_LEVEL = 3
_local = threading.local()


def compress(data: bytes) -> bytes:
    """One zstd frame of `data` at level 3 (linear in it)."""
    compressor: zstandard.ZstdCompressor | None = getattr(_local, "compressor", None)
    if compressor is None:
        compressor = _local.compressor = zstandard.ZstdCompressor(level=_LEVEL)
    return compressor.compress(data)


def decompress(data: bytes) -> bytes:
    """The content of one zstd frame that records its size (all this service writes)."""
    decompressor: zstandard.ZstdDecompressor | None = getattr(_local, "decompressor", None)
    if decompressor is None:
        decompressor = _local.decompressor = zstandard.ZstdDecompressor()
    return decompressor.decompress(data)
