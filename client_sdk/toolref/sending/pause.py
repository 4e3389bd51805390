"""`Pause`: when a sender tries edits again after a receiver answered one 415 (it cannot
apply edits now: its registry is down, refuses its key, is over a quota).

The request goes as it is at once; the endpoint's next requests go as they are too, until
the pause is over: 1 s after a first 415 (`FIRST`), doubled after each further one, at most
`LONGEST`; none again once an edit is answered. So a receiver whose registry is down costs
each client a few small refused edits over the outage, not one per turn, and edits resume
within a second or two of its return after a short one. Kept per endpoint by the sender
(`toolref.sending.sender`; `toolrefFetch` keeps the same in JS).
"""

from __future__ import annotations

from typing import Final

FIRST: Final = 1.0  # seconds, after a first 415
LONGEST: Final = 30.0
# An edit of the lowest version refused as unreadable (400 `malformed-body`: no rollback
# explains it, a proxy rewriting bodies or a sender's bug): 5 minutes, doubled, at most an
# hour, so such a receiver costs a few refused edits an hour, not one a turn
UNREADABLE_FIRST: Final = 300.0
UNREADABLE_LONGEST: Final = 3600.0


class Pause:
    """See the module docstring; times are monotonic seconds."""

    def __init__(self) -> None:
        self.until = 0.0  # edits again from this time
        self.length = 0.0
        self.begun = 0  # pauses begun: an edit sent before the latest is of its outage

    def over(self, now: float) -> bool:
        return now >= self.until

    def refused(
        self, now: float, seen: int, first: float | None = None, longest: float | None = None
    ) -> None:
        """An edit answered 415 at `now`; `seen`: `begun` when it was sent. One sent before
        the latest pause began (edits in flight at once, all refused) is that outage: it
        pauses nothing more (else n at once paused 2^(n-1) s, as JS's manager counts)."""
        if seen != self.begun:
            return
        self.begun += 1
        first = FIRST if first is None else first  # read now: settable in tests
        longest = LONGEST if longest is None else longest
        self.length = min(max(self.length * 2, first), longest)
        self.until = now + self.length

    def answered(self) -> None:
        """An edit answered (not 415): the next 415 pauses briefly again."""
        self.length = 0.0
