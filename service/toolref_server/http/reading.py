"""What a connection learns of its reading, for its deadlines: how long the server itself
stopped reading (uvicorn's flow control, timed), and each event h11 parsed."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

import h11
from uvicorn.protocols.http.flow_control import FlowControl


class TimedFlow(FlowControl):
    """uvicorn's flow control, also timing how long the server stopped reading."""

    def __init__(self, transport: asyncio.Transport) -> None:
        super().__init__(transport)
        self._paused_at: float | None = None
        self._paused_total = 0.0

    def pause_reading(self) -> None:
        if not self.read_paused:
            self._paused_at = time.monotonic()
        super().pause_reading()

    def resume_reading(self) -> None:
        if self._paused_at is not None:
            self._paused_total += time.monotonic() - self._paused_at
            self._paused_at = None
        super().resume_reading()

    def paused_seconds(self) -> float:
        ongoing = 0.0 if self._paused_at is None else time.monotonic() - self._paused_at
        return self._paused_total + ongoing


class Watcher(Protocol):
    def saw(self, event: Any) -> None:
        """`event` was parsed (an `h11.Request`, `h11.Data`, `h11.EndOfMessage`, ...)."""


class Parser(h11.Connection):
    """h11's server side, telling its connection what it parsed, and keeping the error
    uvicorn reduces to a message."""

    def __init__(self, owner: Watcher, max_incomplete_event_size: int) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size)
        self.owner = owner
        self.error: h11.RemoteProtocolError | None = None

    def next_event(self) -> Any:
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as exc:
            self.error = exc
            raise
        self.owner.saw(event)
        return event
