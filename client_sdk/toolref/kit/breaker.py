"""A circuit breaker: after repeated failures, skip the registry until a probe succeeds.

Closed: calls go through; `failure_threshold` failures in a row open it. Open: calls are
refused at once (callers send full payloads instead) for `reset_timeout` seconds; then one
call is let through as a probe (half-open). The probe's success closes the breaker; its
failure opens it again for another `reset_timeout`; a probe that told nothing of the
callee's health (never sent: no connection came free) is `abandon`ed, and the next call
probes. Each probe let out is numbered (`probe`): abandoning one that outlived its timeout,
after a newer one went out, leaves the newer one's place held.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from enum import StrEnum


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


class CircuitBreaker:
    def __init__(
        self,
        failure_threshold: int = 5,
        reset_timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # NaN compares false: such a breaker would never open, or never probe once open.
        finite = math.isfinite(failure_threshold) and math.isfinite(reset_timeout)
        if not finite or failure_threshold < 1 or reset_timeout < 0:
            raise ValueError(
                f"failure_threshold must be >= 1 and reset_timeout >= 0, both finite, got "
                f"{failure_threshold} and {reset_timeout}"
            )
        self.failure_threshold = failure_threshold
        self.reset_timeout = reset_timeout
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._probing = False
        self._probe_started = 0.0
        self.probe = 0  # the number of the last probe `allow` let out

    @property
    def state(self) -> BreakerState:
        if self._opened_at is None:
            return BreakerState.CLOSED
        if self._probing or self._clock() - self._opened_at >= self.reset_timeout:
            return BreakerState.HALF_OPEN
        return BreakerState.OPEN

    @property
    def sound(self) -> bool:
        """Closed, and its last call succeeded (no failure counted since)."""
        return self._failures == 0 and self._opened_at is None

    def allow(self) -> bool:
        """May a call go out now? In half-open state, only one (the probe) may."""
        state = self.state
        if state is BreakerState.CLOSED:
            return True
        if state is not BreakerState.HALF_OPEN:
            return False
        now = self._clock()
        # A probe that never reported (cancelled, say) must not keep the breaker shut.
        if not self._probing or now - self._probe_started >= self.reset_timeout:
            self._probing = True
            self._probe_started = now
            self.probe += 1
            return True
        return False

    def retry_in(self) -> float:
        """Seconds until the next probe may go out (0 when calls may go now)."""
        if self._opened_at is None:
            return 0.0
        since = self._probe_started if self._probing else self._opened_at
        return max(0.0, self.reset_timeout - (self._clock() - since))

    def abandon(self, probe: int | None = None) -> None:
        """The probe `allow` let through told nothing of the callee's health (it was never
        sent: no connection came free; or its input was refused): the next call may probe
        at once, not one `reset_timeout` later. Only the probe's caller calls it, with the
        `probe` number it read after its `allow` (None: the last one): an older probe's
        leaves a newer one's place held."""
        if probe is None or probe == self.probe:
            self._probing = False

    def success(self) -> None:
        self._failures = 0
        self._opened_at = None
        self._probing = False

    def failure(self) -> None:
        self._failures += 1
        if self._probing or self._failures >= self.failure_threshold:
            self._opened_at = self._clock()
            self._probing = False
