"""The threads a function ran in, recorded: where a test checks that work left the event
loop for a worker thread (`toolref.asgi.workers`), or stayed on it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def threads_of(monkeypatch: Any, module: Any, name: str) -> list[str]:
    """The threads `module.<name>` ran in, each time it ran (`monkeypatch`: pytest's
    fixture, which undoes it; tests/support imports no pytest)."""
    threads: list[str] = []
    inner: Callable[..., Any] = getattr(module, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return inner(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapped)
    return threads
