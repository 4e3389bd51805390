"""A compressed body is inflated off the event loop when what it may become is large,
however few bytes it arrives as (a small gzip or zstd body can inflate to megabytes)."""

from __future__ import annotations

import asyncio
import gzip
import threading
from collections.abc import Callable
from typing import Any

import pytest
import zstandard

from toolref import AsyncRegistryClient
from toolref.receiving.hydrator import Hydrator
from toolref.wire import compression

BODY = b'{"messages":[{"role":"user","content":"' + b"a" * (4 << 20) + b'"}]}'


def recording(monkeypatch: pytest.MonkeyPatch, name: str) -> list[str]:
    """Where `compression.<name>` ran, each time it ran."""
    threads: list[str] = []
    inner: Callable[..., bytes] = getattr(compression, name)

    def wrapped(*args: Any) -> bytes:
        threads.append(threading.current_thread().name)
        return inner(*args)

    monkeypatch.setattr(compression, name, wrapped)
    return threads


@pytest.mark.parametrize(
    ("encoding", "packed", "step"),
    [
        ("gzip", gzip.compress(BODY), "inflate_gzip"),
        ("zstd", zstandard.ZstdCompressor().compress(BODY), "inflate"),
    ],
)
def test_a_small_body_that_inflates_large_is_inflated_in_a_worker(
    monkeypatch: pytest.MonkeyPatch, encoding: str, packed: bytes, step: str
) -> None:
    assert len(packed) < 64 << 10  # far under the offload size as sent
    threads = recording(monkeypatch, step)
    hydrator = Hydrator(AsyncRegistryClient("http://unused"), offload_bytes=1 << 20)
    assert asyncio.run(hydrator.inflate(packed, encoding, None)) == BODY
    assert threads
    assert threads != [threading.main_thread().name]
