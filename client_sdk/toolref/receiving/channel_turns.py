"""The turns one channel serves (`toolref.receiving.channel_server`): their tasks, the
bytes of their bodies held, their windows where the sender keeps them (`Window`: a turn's
answer waits for its sender's credit, and breaks off, `Unread`, left without it), and
whether the channel has room for one more (`frames.MAX_STREAMS` turns,
`frames.MAX_HELD_BYTES` of bodies), telling the channel as the last turn served ends
(`quiet`: its idle time counts from then). Each count moves as a frame comes or a turn
ends: O(1) a frame.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any, Final

from toolref.websocket import channel as frames

_DRAIN_SECONDS: Final = 5.0  # the channel gone, its turns' cancellation awaited this long


class Unread(ConnectionError):
    """A turn's answer waited `send_timeout` seconds for its sender's credit: it breaks off,
    raised to the app's `send` as a client gone (an `OSError`, as uvicorn's own)."""


class Window:
    """Bytes of one turn's answer the receiver may still send (`frames`' windows): taken
    as pieces go, given back by the sender's credit, never above the window granted."""

    def __init__(self, size: int, wait: float) -> None:
        self.size = self.left = size
        self.wait = wait
        self.more = asyncio.Event()

    def grant(self, size: int) -> None:
        self.left = min(self.left + size, self.size)
        self.more.set()

    async def take(self, want: int) -> int:
        """Up to `want` bytes to send now, waiting for credit (`Unread` past `wait` s)."""
        while self.left <= 0:
            self.more.clear()
            try:
                await asyncio.wait_for(self.more.wait(), self.wait)
            except TimeoutError:
                raise Unread(f"its answer was left unread for {self.wait:g}s") from None
        taken = min(want, self.left)
        self.left -= taken
        return taken


class Turns:
    """The turns a channel serves: their tasks, their windows (where the sender keeps
    them), and the bytes of their bodies held, each counted as it comes and goes (O(1) a
    frame)."""

    def __init__(self, window: int | None, send_timeout: float) -> None:
        self.served: dict[int, asyncio.Task[None]] = {}
        self.held: dict[int, int] = {}  # each served turn's body bytes, held until it ends
        self.held_bytes = 0
        self.size, self.send_timeout = window, send_timeout
        self.windows: dict[int, Window] = {}  # each served turn's, with windows
        self.answering: set[int] = set()  # served turns (not busy) whose answer has not ended
        self.past_end: set[int] = set()  # served turns, busy ones too, whose answer ended
        self.empty = asyncio.Event()  # set as the last of them ends
        self.drained: asyncio.Task[None] | None = None  # `_stop_told`'s, ended with them
        self.quiet: Callable[[], None] | None = None  # told as the last turn served ends

    def window(self, stream: int) -> Window | None:
        """A new turn's window (None: the channel keeps none)."""
        if self.size is None:
            return None
        found = self.windows[stream] = Window(self.size, self.send_timeout)
        return found

    def credit(self, credit: frames.Credit) -> None:
        """Credit for a turn served (one that ended already: nothing to do)."""
        if (found := self.windows.get(credit.stream)) is not None:
            found.grant(credit.size)

    def full(self, turn: frames.Turn) -> str | None:
        return _full(len(self.served), self.held_bytes + len(turn.body))

    def start(self, turn: frames.Turn, work: Coroutine[Any, Any, None], busy: bool) -> None:
        self.served[turn.stream] = task = asyncio.create_task(work)
        if not busy:  # a stop waits for its answer (`_drained`); a busy one, nothing done
            self.answering.add(turn.stream)
        self.held[turn.stream] = len(turn.body)
        self.held_bytes += len(turn.body)
        task.add_done_callback(partial(self._forget, turn.stream))

    def cancel(self, stream: int) -> None:
        if (left := self.served.get(stream)) is not None:
            left.cancel()

    @property
    def unanswered(self) -> int:
        """Turns served, busy ones too, whose answer has not ended (a turn's task still
        running after its END, its app's own work, is answered)."""
        return len(self.served) - len(self.past_end)

    def _forget(self, stream: int, _: object) -> None:
        self.served.pop(stream, None)  # a stream is never reused while served: its task
        self.held_bytes -= self.held.pop(stream, 0)
        self.windows.pop(stream, None)
        self.answered(stream)
        self.past_end.discard(stream)
        if not self.served and self.quiet is not None:
            self.quiet()

    def answered(self, stream: int) -> None:
        """A turn's answer ended (its END sent), or its task did."""
        if stream in self.served:
            self.past_end.add(stream)
        self.answering.discard(stream)
        if not self.answering:
            self.empty.set()

    async def end(self) -> None:
        """Every turn cancelled, and awaited a while (an app's own cleanup): none is left
        running past its channel."""
        left = list(self.served.values())
        if self.drained is not None:
            self.drained.cancel()
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left, timeout=_DRAIN_SECONDS)


def _full(turns: int, body_bytes: int) -> str | None:
    """Why the channel has no room for one more turn (None: it has): `frames.MAX_STREAMS`
    turns served at once, or `frames.MAX_HELD_BYTES` of their bodies held."""
    if turns >= frames.MAX_STREAMS:
        return f"this channel serves {frames.MAX_STREAMS} turns at once"
    if body_bytes > frames.MAX_HELD_BYTES:
        return f"this channel holds {frames.MAX_HELD_BYTES} bytes of turns' bodies at once"
    return None
