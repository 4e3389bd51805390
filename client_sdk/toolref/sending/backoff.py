"""`Backoff`: how long a sender lets its channel be after it could not be had (the upgrade
refused, the receiver unreachable, a channel closed before any answer came on it or before
it lived `healthy` seconds with answers on it), so that
a receiver that always breaks channels costs a failed turn ever more rarely, not one each
`first` seconds for ever.

The n-th failure in a row waits `first` * 2^(n-1) seconds, at most `longest`, each wait
drawn between half and all of that (jitter: senders that failed together do not all come
back at once); a channel that then lived `healthy` seconds with answers on it starts the
count again. O(1) a call; the clock is the caller's, `random` given for tests.
"""

from __future__ import annotations

import random as randoms
from collections.abc import Callable
from typing import Final

FIRST: Final = 30.0  # seconds after a first failure
LONGEST: Final = 600.0  # at most, however many failures in a row
HEALTHY: Final = 300.0  # seconds a channel lives with answers on it: the count starts again


class Backoff:
    """See the module docstring."""

    def __init__(
        self,
        first: float = FIRST,
        longest: float = LONGEST,
        *,
        healthy: float = HEALTHY,
        random: Callable[[], float] | None = None,  # None: `random.random`
    ) -> None:
        if not 0 < first <= longest:
            raise ValueError(
                f"a channel retried after {first:g}s, at most {longest:g}s: give 0 < first <= "
                "longest (`retry_seconds`, `longest_retry_seconds`)"
            )
        self.first, self.longest, self.healthy = first, longest, healthy
        self.random: Callable[[], float] = random or randoms.random
        self.failures = 0  # in a row, since a channel last lived `healthy` seconds
        self.until = 0.0  # no channel tried before this time

    def over(self, now: float) -> bool:
        """Whether a channel may be tried at `now`."""
        return now >= self.until

    def failed(self, now: float) -> float:
        """The seconds to wait from `now` after one more failure in a row."""
        full = min(self.first * 2.0 ** min(self.failures, 62), self.longest)
        self.failures += 1
        wait = full * (0.5 + self.random() / 2)
        self.until = now + wait
        return wait

    def lived(self, seconds: float) -> None:
        """A channel answered for `seconds`: past `healthy`, the next failure waits `first`."""
        if seconds >= self.healthy:
            self.failures = 0
