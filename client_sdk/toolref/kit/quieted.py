"""`Quieted`: one warning of a kind per `every` seconds a process, the ones held back counted
in the next. A failure that recurs on every request (the store down, a summarizer's breaker
open) would otherwise write a line per request: thousands a second under load, the one line
an operator needs buried, and the log's own disk and shipping a second outage. The first
warning of a quiet spell goes out at once, so an outage is seen as it starts; the next one
after `every` seconds says how many were held back meanwhile.

O(1) a call, one number a kind held (kinds are the caller's few fixed messages).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

EVERY: Final = 60.0  # seconds between two warnings of a kind, by default


class Quieted:
    """Warnings through `log`, each kind (its message template) at most once per `every`
    seconds; `clock` is monotonic seconds (a test moves it)."""

    def __init__(
        self,
        log: logging.Logger,
        every: float = EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = log
        self.every = every
        self.clock = clock
        self._said: dict[str, float] = {}  # a kind: when it was last written
        self._held: dict[str, int] = {}  # a kind: how many were held back since

    def warning(self, message: str, *args: object) -> None:
        """`log.warning(message, *args)` unless one of this `message` went out less than
        `every` seconds ago (then counted, and said in the next that goes out)."""
        now = self.clock()
        said = self._said.get(message)
        if said is not None and now - said < self.every:
            self._held[message] = self._held.get(message, 0) + 1
            return
        held = self._held.pop(message, 0)
        self._said[message] = now
        if held:
            message += f" ({held} more like it in the last %.0f s not logged)"
            args = (*args, now - said if said is not None else self.every)
        self.log.warning(message, *args)
